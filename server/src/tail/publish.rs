//! The publishing side: one connection that carries this node's transients
//! to the other nodes and keeps its running turns' live keys, in the order
//! they were made.
//!
//! A batch of queued operations goes out as one pipeline whose live keys
//! (the newest value per session) come first, then the transients in
//! order: a key is never behind a transient sent before it, which is what
//! lets a reader subscribe, then read the key, and miss nothing (a key
//! ahead only overlaps deltas, which a client trims, PROTOCOL.md §6 rule 6).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;

use super::{next_backoff, stamp, Names, Out, Shared, RECONNECT_MIN, WRITE_TIMEOUT};

/// Operations taken from the queue into one pipeline at most.
const BATCH: usize = 512;

/// The live keys this node holds: session → stamped snapshot.
type Owned = HashMap<String, String>;

/// Runs until the tail is dropped: connects, writes back what this node
/// holds (its keys, and each as a `live_turn.snapshot` for the readers that
/// missed deltas meanwhile), then sends the queue; on a loss, keeps taking
/// the queue (its live turns are kept, its transients dropped and counted)
/// until Redis is back.
pub(super) async fn run(
    client: redis::Client,
    names: Names,
    node: String,
    lease: Duration,
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Out>,
) {
    let mut owned = Owned::new();
    let mut backoff = RECONNECT_MIN;
    loop {
        match connect(&client, &names, &node, lease, &owned).await {
            Ok(conn) => {
                backoff = RECONNECT_MIN;
                shared.set_conn(Some(conn.clone()));
                let lost =
                    send_queue(conn, &names, &node, lease, &shared, &mut rx, &mut owned).await;
                shared.set_conn(None);
                match lost {
                    Some(e) => {
                        tracing::warn!(error = %e, "tail: lost Redis (publishing); reconnecting")
                    }
                    None => return, // the tail was dropped
                }
            }
            Err(e) => tracing::debug!(error = %e, "tail: Redis unreachable (publishing)"),
        }
        // Meanwhile the queue is taken so live turns stay current.
        let wait = tokio::time::sleep(backoff);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                () = &mut wait => break,
                op = rx.recv() => match op {
                    Some(op) => {
                        if matches!(op, Out::Publish { .. }) {
                            shared.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        keep(&mut owned, &node, op);
                    }
                    None => return,
                },
            }
        }
        backoff = next_backoff(backoff);
    }
}

/// A connection with this node's keys written back and announced.
async fn connect(
    client: &redis::Client,
    names: &Names,
    node: &str,
    lease: Duration,
    owned: &Owned,
) -> redis::RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(WRITE_TIMEOUT))
        .set_response_timeout(Some(WRITE_TIMEOUT));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    if !owned.is_empty() {
        let mut pipe = redis::pipe();
        for (session_id, value) in owned {
            set_live(&mut pipe, names, session_id, value, lease);
        }
        // Readers that lost deltas while Redis was away get the whole turn
        // again (rule 6: a snapshot replaces the overlay).
        for (session_id, value) in owned {
            let json = &value[node.len() + 1..];
            pipe.publish(
                names.channel(replay_core::protocol::Scope::Session, session_id),
                stamp(node, json),
            )
            .ignore();
        }
        pipe.exec_async(&mut conn).await?;
    }
    Ok(conn)
}

fn set_live(
    pipe: &mut redis::Pipeline,
    names: &Names,
    session_id: &str,
    value: &str,
    lease: Duration,
) {
    let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
    pipe.cmd("SET")
        .arg(names.live_key(session_id))
        .arg(value)
        .arg("PX")
        .arg(ms)
        .ignore();
}

/// Applies a live-turn operation to the held keys.
fn keep(owned: &mut Owned, node: &str, op: Out) {
    match op {
        Out::Live {
            session_id,
            snapshot: Some(json),
        } => {
            owned.insert(session_id, stamp(node, &json));
        }
        Out::Live {
            session_id,
            snapshot: None,
        } => {
            owned.remove(&session_id);
        }
        Out::ForgetAll => owned.clear(),
        Out::Publish { .. } => {}
    }
}

/// Sends the queue on `conn` and refreshes the live keys every third of a
/// lease; returns the error that lost the connection, or `None` when the
/// queue closed.
async fn send_queue(
    mut conn: MultiplexedConnection,
    names: &Names,
    node: &str,
    lease: Duration,
    shared: &Shared,
    rx: &mut mpsc::Receiver<Out>,
    owned: &mut Owned,
) -> Option<redis::RedisError> {
    let mut refresh = tokio::time::interval((lease / 3).max(Duration::from_millis(1)));
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let mut pipe = redis::pipe();
        let mut publishes = 0u64;
        tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    return None;
                }
                publishes = build(&mut pipe, names, node, lease, owned, batch.drain(..));
            }
            _ = refresh.tick() => {
                for (session_id, value) in owned.iter() {
                    set_live(&mut pipe, names, session_id, value, lease);
                }
            }
        }
        if pipe.is_empty() {
            continue;
        }
        if let Err(e) = pipe.exec_async(&mut conn).await {
            shared.dropped.fetch_add(publishes, Ordering::Relaxed);
            return Some(e);
        }
        shared.published.fetch_add(publishes, Ordering::Relaxed);
    }
}

/// One batch as a pipeline: the newest live key per session first, then
/// the transients in order. Returns how many transients it carries.
fn build(
    pipe: &mut redis::Pipeline,
    names: &Names,
    node: &str,
    lease: Duration,
    owned: &mut Owned,
    ops: impl Iterator<Item = Out>,
) -> u64 {
    let mut live: HashSet<String> = HashSet::new();
    let mut forget: Vec<String> = Vec::new();
    let mut publishes = Vec::new();
    for op in ops {
        match op {
            Out::Publish { channel, json } => publishes.push((channel, json)),
            Out::Live { ref session_id, .. } => {
                live.insert(session_id.clone());
                keep(owned, node, op);
            }
            Out::ForgetAll => {
                forget.extend(owned.keys().cloned());
                keep(owned, node, op);
            }
        }
    }
    for session_id in forget.iter().chain(&live) {
        match owned.get(session_id) {
            Some(value) => set_live(pipe, names, session_id, value, lease),
            None => {
                pipe.del(names.live_key(session_id)).ignore();
            }
        }
    }
    let n = publishes.len() as u64;
    for (channel, json) in publishes {
        pipe.publish(channel, stamp(node, &json)).ignore();
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(session: &str, json: Option<&str>) -> Out {
        Out::Live {
            session_id: session.into(),
            snapshot: json.map(str::to_owned),
        }
    }

    #[test]
    fn a_batch_keeps_the_newest_live_turn_of_each_session() {
        let mut owned = Owned::new();
        let mut pipe = redis::pipe();
        let ops = vec![
            live("a", Some("1")),
            Out::Publish {
                channel: "c".into(),
                json: "d1".into(),
            },
            live("a", Some("2")),
            live("b", Some("3")),
            live("b", None),
        ];
        let names = Names::new("t");
        let second = Duration::from_secs(1);
        let n = build(&mut pipe, &names, "n", second, &mut owned, ops.into_iter());
        assert_eq!(n, 1);
        assert_eq!(owned.len(), 1);
        assert_eq!(owned["a"], "n\n2");
        let forgot = build(
            &mut redis::pipe(),
            &names,
            "n",
            second,
            &mut owned,
            std::iter::once(Out::ForgetAll),
        );
        assert_eq!(forgot, 0);
        assert!(owned.is_empty());
    }
}
