//! The subscribing side: one connection that receives every other node's
//! transients (one pattern over every log's channel) and hands them to this
//! node's fan-out in the order they arrive.
//!
//! After each (re)subscription, and before the first message is handed on,
//! every running turn's live key is read and handed on as its snapshot:
//! what was missed while the connection was away is replaced whole, and
//! what is buffered behind the subscription only overlaps it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::StreamExt;
use replay_core::protocol::Envelope;

use super::{next_backoff, unstamp, Local, Names, Shared, RECONNECT_MIN, WRITE_TIMEOUT};
use crate::fanout::Frame;

/// Keys asked for per `SCAN` step while reading every live turn.
const SCAN_COUNT: usize = 500;

/// What the subscribing task holds.
struct Subscriber {
    client: redis::Client,
    names: Names,
    /// This node's id: its own messages are skipped.
    node: String,
    shared: Arc<Shared>,
    local: Arc<Local>,
}

/// Runs until the tail is dropped: subscribe, catch up the live turns,
/// hand messages on; on a loss, reconnect with backoff.
pub(super) async fn run(
    client: redis::Client,
    names: Names,
    node: String,
    shared: Arc<Shared>,
    local: Arc<Local>,
) {
    let sub = Subscriber {
        client,
        names,
        node,
        shared,
        local,
    };
    let mut backoff = RECONNECT_MIN;
    loop {
        match sub.listen().await {
            Ok(()) => backoff = RECONNECT_MIN,
            Err(e) => tracing::debug!(error = %e, "tail: Redis unreachable (subscribing)"),
        }
        if sub.shared.subscribed.swap(false, Ordering::Relaxed) {
            tracing::warn!("tail: lost Redis (subscribing); reconnecting");
        }
        tokio::time::sleep(backoff).await;
        backoff = next_backoff(backoff);
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

impl Subscriber {
    /// One subscription's life; `Ok` once it was up and then ended.
    async fn listen(&self) -> redis::RedisResult<()> {
        let mut pubsub = tokio::time::timeout(WRITE_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| timed_out())??;
        pubsub.psubscribe(self.names.channels()).await?;
        tokio::time::timeout(WRITE_TIMEOUT, self.live_turns())
            .await
            .map_err(|_| timed_out())??;
        self.shared.subscribed.store(true, Ordering::Relaxed);
        let mut messages = pubsub.on_message();
        while let Some(msg) = messages.next().await {
            self.deliver(msg.get_payload_bytes()).await;
        }
        Ok(())
    }

    /// Hands every running turn's live key on as its snapshot.
    async fn live_turns(&self) -> redis::RedisResult<()> {
        let mut conn = self.client.get_multiplexed_async_connection().await?;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(self.names.live_keys())
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let values: Vec<Option<Vec<u8>>> =
                    redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
                for value in values.into_iter().flatten() {
                    self.deliver(&value).await;
                }
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Hands one stamped envelope of another node to the fan-out.
    async fn deliver(&self, value: &[u8]) {
        let Some((from, json)) = unstamp(value) else {
            return;
        };
        if from == self.node {
            return; // published here already
        }
        let Ok(env) = Envelope::from_json(json.as_bytes()) else {
            tracing::warn!("tail: a message this node cannot read");
            return;
        };
        if env.is_durable() {
            return; // durable events come from the log only
        }
        self.local.catch_up_for(&env).await;
        self.shared.received.fetch_add(1, Ordering::Relaxed);
        self.local.fanout.publish(&Arc::new(Frame {
            env,
            json: json.to_owned(),
        }));
    }
}
