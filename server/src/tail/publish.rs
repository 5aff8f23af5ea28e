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
use replay_core::protocol::Scope;
use tokio::sync::mpsc;

use super::{next_backoff, stamp, Names, Out, Shared, RECONNECT_MIN, WRITE_TIMEOUT};

/// Operations taken from the queue into one pipeline at most.
const BATCH: usize = 512;

/// The live keys this node holds: session → stamped snapshot.
type Owned = HashMap<String, String>;

/// What the publishing task holds.
struct Publishing {
    names: Names,
    /// This node's id, stamped on everything it writes.
    node: String,
    lease: Duration,
    shared: Arc<Shared>,
}

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
    let p = Publishing {
        names,
        node,
        lease,
        shared,
    };
    let mut owned = Owned::new();
    let mut backoff = RECONNECT_MIN;
    loop {
        match p.connect(&client, &owned).await {
            Ok(conn) => {
                backoff = RECONNECT_MIN;
                p.shared.set_conn(Some(conn.clone()));
                let lost = p.send_queue(conn, &mut rx, &mut owned).await;
                p.shared.set_conn(None);
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
                            p.shared.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        p.keep(&mut owned, op);
                    }
                    None => return,
                },
            }
        }
        backoff = next_backoff(backoff);
    }
}

impl Publishing {
    /// A connection with this node's keys written back and announced.
    async fn connect(
        &self,
        client: &redis::Client,
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
                self.set_live(&mut pipe, session_id, value);
            }
            // Readers that lost deltas while Redis was away get the whole
            // turn again (rule 6: a snapshot replaces the overlay).
            for (session_id, value) in owned {
                let channel = self.names.channel(Scope::Session, session_id);
                pipe.publish(channel, value).ignore();
            }
            pipe.exec_async(&mut conn).await?;
        }
        Ok(conn)
    }

    fn set_live(&self, pipe: &mut redis::Pipeline, session_id: &str, value: &str) {
        let ms = u64::try_from(self.lease.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        pipe.cmd("SET")
            .arg(self.names.live_key(session_id))
            .arg(value)
            .arg("PX")
            .arg(ms)
            .ignore();
    }

    /// Applies a live-turn operation to the held keys.
    fn keep(&self, owned: &mut Owned, op: Out) {
        match op {
            Out::Live {
                session_id,
                snapshot: Some(json),
            } => {
                owned.insert(session_id, stamp(&self.node, &json));
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

    /// Sends the queue on `conn` and refreshes the live keys every third of
    /// a lease; returns the error that lost the connection, or `None` when
    /// the queue closed.
    async fn send_queue(
        &self,
        mut conn: MultiplexedConnection,
        rx: &mut mpsc::Receiver<Out>,
        owned: &mut Owned,
    ) -> Option<redis::RedisError> {
        let mut refresh = tokio::time::interval((self.lease / 3).max(Duration::from_millis(1)));
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
                    publishes = self.build(&mut pipe, owned, batch.drain(..));
                }
                _ = refresh.tick() => {
                    for (session_id, value) in owned.iter() {
                        self.set_live(&mut pipe, session_id, value);
                    }
                }
            }
            if pipe.is_empty() {
                continue;
            }
            if let Err(e) = pipe.exec_async(&mut conn).await {
                self.shared.dropped.fetch_add(publishes, Ordering::Relaxed);
                return Some(e);
            }
            self.shared
                .published
                .fetch_add(publishes, Ordering::Relaxed);
        }
    }

    /// One batch as a pipeline: the newest live key per session first, then
    /// the transients in order. Returns how many transients it carries.
    fn build(
        &self,
        pipe: &mut redis::Pipeline,
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
                    self.keep(owned, op);
                }
                Out::ForgetAll => {
                    forget.extend(owned.keys().cloned());
                    self.keep(owned, op);
                }
            }
        }
        for session_id in forget.iter().chain(&live) {
            match owned.get(session_id) {
                Some(value) => self.set_live(pipe, session_id, value),
                None => {
                    pipe.del(self.names.live_key(session_id)).ignore();
                }
            }
        }
        let n = publishes.len() as u64;
        for (channel, json) in publishes {
            pipe.publish(channel, stamp(&self.node, &json)).ignore();
        }
        n
    }
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
        let p = Publishing {
            names: Names::new("t"),
            node: "n".into(),
            lease: Duration::from_secs(1),
            shared: Arc::default(),
        };
        let mut owned = Owned::new();
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
        let n = p.build(&mut redis::pipe(), &mut owned, ops.into_iter());
        assert_eq!(n, 1);
        assert_eq!(owned.len(), 1);
        assert_eq!(owned["a"], "n\n2");
        let forgot = p.build(
            &mut redis::pipe(),
            &mut owned,
            std::iter::once(Out::ForgetAll),
        );
        assert_eq!(forgot, 0);
        assert!(owned.is_empty());
    }
}
