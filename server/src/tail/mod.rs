//! The cluster's live tail (`--redis`): the transient events of a turn
//! running on any node reach every node's fan-out, and the latest
//! `live_turn.snapshot` of each running turn can be read from any node.
//!
//! Redis carries it: one pub/sub channel per log ([`channel`]), one
//! subscriber connection per node (a pattern over all of them), and one key
//! per running turn's session ([`live_key`]) that its node refreshes every
//! third of its turn lease, so that it expires with the lease when the node
//! dies. Postgres stays the only durable truth: nothing durable passes
//! here, and an outage of Redis only stops the tails from flowing between
//! nodes ([`TailStatus::connected`] false) until it is back.
//!
//! Order: one node publishes a turn's transients through one connection,
//! in the order they were made, and every node reads them through one; a
//! live turn's key is written before the transients that follow its change
//! ([`publish`]), so a reader that subscribed before reading the key misses
//! nothing after it.

mod publish;
mod subscribe;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use replay_core::protocol::{Envelope, Event, LiveTurn, Scope};
use tokio::sync::mpsc;

use crate::fanout::Fanout;
use crate::follow::{Heads, Publisher};

/// Operations waiting for the publishing connection; past this many (Redis
/// slower than the turns) the newest are dropped and counted.
pub const QUEUE: usize = 16_384;
/// Longest a read of a live turn's key may take before the reader goes on
/// without it (durable state only).
pub const READ_TIMEOUT: Duration = Duration::from_millis(250);
/// Longest one batch of writes to Redis may take before its connection is
/// counted as lost.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Waits between attempts to reach Redis again.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Errors of the live tail's setup.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    /// The `--redis` URL cannot be used.
    #[error("--redis {url}: {source}")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// Why.
        source: redis::RedisError,
    },
    /// The store is one process's SQLite: there is no other node.
    #[error("--redis needs a shared log (a postgres:// --db)")]
    NeedsSharedLog,
}

/// The names one shared log uses in Redis, all under `replay:{boot_id}:`,
/// so that clusters of different logs may share one Redis.
#[derive(Clone, Debug)]
pub struct Names {
    prefix: String,
}

impl Names {
    /// The names of the tail whose `boot_id` is `boot_id`.
    pub fn new(boot_id: &str) -> Names {
        Names {
            prefix: format!("replay:{boot_id}"),
        }
    }

    /// The channel of one log's transient events.
    pub fn channel(&self, scope: Scope, scope_id: &str) -> String {
        format!("{}:tail:{}:{scope_id}", self.prefix, scope.as_str())
    }

    /// The pattern of every log's channel.
    fn channels(&self) -> String {
        format!("{}:tail:*", self.prefix)
    }

    /// The key holding the latest `live_turn.snapshot` of a session's
    /// running turn.
    pub fn live_key(&self, session_id: &str) -> String {
        format!("{}:live:{session_id}", self.prefix)
    }

    /// The pattern of every live turn's key.
    fn live_keys(&self) -> String {
        format!("{}:live:*", self.prefix)
    }
}

/// What every message and key value starts with: the node that wrote it,
/// then a newline, then an envelope's JSON.
fn stamp(node: &str, json: &str) -> String {
    format!("{node}\n{json}")
}

/// The node and the JSON of a stamped value.
fn unstamp(value: &[u8]) -> Option<(&str, &str)> {
    std::str::from_utf8(value).ok()?.split_once('\n')
}

/// `url` with any password replaced by `***` (diagnostics, logs).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((auth, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

/// Counters and state of the tail, shared by its tasks.
#[derive(Default)]
struct Shared {
    publishing: AtomicBool,
    subscribed: AtomicBool,
    published: AtomicU64,
    received: AtomicU64,
    dropped: AtomicU64,
    live_reads_failed: AtomicU64,
    /// The publishing connection while it works (reads use it too).
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
}

impl Shared {
    fn conn(&self) -> Option<redis::aio::MultiplexedConnection> {
        self.conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_conn(&self, conn: Option<redis::aio::MultiplexedConnection>) {
        self.publishing.store(conn.is_some(), Ordering::Relaxed);
        *self.conn.lock().unwrap_or_else(PoisonError::into_inner) = conn;
    }
}

/// What one operation asks of the publishing connection.
#[derive(Debug)]
enum Out {
    /// A transient envelope for the other nodes.
    Publish {
        /// Its log's [`channel`].
        channel: String,
        /// Its JSON.
        json: String,
    },
    /// The session's live turn changed: its latest snapshot's JSON, or
    /// `None` once no turn runs.
    Live {
        /// The session.
        session_id: String,
        /// A `live_turn.snapshot` envelope's JSON.
        snapshot: Option<String>,
    },
    /// Every live turn of this node is gone (its worker restarted).
    ForgetAll,
}

/// Where the tail hands the transients of other nodes: this node's fan-out, in
/// order after the durable events they follow.
pub struct Local {
    /// The fan-out.
    pub fanout: Arc<Fanout>,
    /// The heads this node has published.
    pub heads: Arc<RwLock<Heads>>,
    /// What publishes the durable log to the fan-out.
    pub publisher: Arc<Publisher>,
}

impl Local {
    fn published_head(&self, scope: Scope, scope_id: &str) -> u64 {
        let heads = self.heads.read().unwrap_or_else(PoisonError::into_inner);
        heads
            .logs
            .get(&(scope, scope_id.to_owned()))
            .map_or(0, |i| i.head)
    }

    /// Publishes, up to the newest, the durable events `env` follows when
    /// this node has not published them yet (its `after_seq` is ahead), so
    /// that a transient never overtakes the durable event it follows.
    async fn catch_up_for(&self, env: &Envelope) {
        let ahead = env
            .after_seq
            .is_some_and(|a| a > self.published_head(env.scope, &env.scope_id));
        if ahead {
            if let Err(e) = self.publisher.catch_up(None).await {
                tracing::warn!(error = %e, "tail: catching up with the log failed");
            }
        }
    }
}

/// Diagnostics of the tail (`/v1/diagnostics` `tail`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TailStatus {
    /// `"redis"`.
    pub broker: &'static str,
    /// The URL, its password hidden.
    pub url: String,
    /// Publishing and subscribed both work now.
    pub connected: bool,
    /// The id every node serves as `boot_id` (see docs/protocol.md, Cluster).
    pub boot_id: String,
    /// This process's id in the tail (other nodes' messages are told apart by it).
    pub node: String,
    /// Transient events sent to the other nodes.
    pub published: u64,
    /// Transient events of other nodes handed to this node's fan-out.
    pub received: u64,
    /// Operations not sent because Redis was unreachable or slow.
    pub dropped: u64,
    /// Reads of another node's live turn that failed or timed out.
    pub live_reads_failed: u64,
}

/// The live tail of one node.
pub struct Tail {
    node: String,
    boot_id: String,
    names: Names,
    url: String,
    lease: Duration,
    out: mpsc::Sender<Out>,
    shared: Arc<Shared>,
    local: Arc<Local>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Tail {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Tail {
    /// Starts publishing and subscribing on `runtime` (they reach Redis on
    /// their own, and again after each loss). `boot_id` is the id every node
    /// of the shared log serves; `lease` the turn lease the live keys
    /// expire with.
    pub fn start(
        url: &str,
        boot_id: String,
        lease: Duration,
        local: Local,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Tail, TailError> {
        let client = redis::Client::open(url).map_err(|source| TailError::Url {
            url: redact(url),
            source,
        })?;
        let node = crate::util::random_id("n");
        let names = Names::new(&boot_id);
        let local = Arc::new(local);
        let shared = Arc::new(Shared::default());
        let (out, rx) = mpsc::channel(QUEUE);
        let publishing = runtime.spawn(publish::run(
            client.clone(),
            names.clone(),
            node.clone(),
            lease,
            Arc::clone(&shared),
            rx,
        ));
        let subscribing = runtime.spawn(subscribe::run(
            client,
            names.clone(),
            node.clone(),
            Arc::clone(&shared),
            Arc::clone(&local),
        ));
        Ok(Tail {
            node,
            boot_id,
            names,
            url: redact(url),
            lease,
            out,
            shared,
            local,
            tasks: vec![publishing.abort_handle(), subscribing.abort_handle()],
        })
    }

    /// The id every node serves as `boot_id`.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// How long a live key outlives its node's last refresh.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn send(&self, op: Out) {
        if self.out.try_send(op).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends a transient envelope (already published here) to the other nodes.
    pub fn publish(&self, env: &Envelope, json: &str) {
        self.send(Out::Publish {
            channel: self.names.channel(env.scope, &env.scope_id),
            json: json.to_owned(),
        });
    }

    /// Records the session's live turn (`snapshot`: a `live_turn.snapshot`
    /// envelope's JSON, `None` once it is gone) for readers on other nodes.
    pub fn put_live(&self, session_id: &str, snapshot: Option<String>) {
        self.send(Out::Live {
            session_id: session_id.to_owned(),
            snapshot,
        });
    }

    /// Forgets every live turn this node recorded (its worker restarted).
    pub fn forget_all(&self) {
        self.send(Out::ForgetAll);
    }

    /// The live turn of a session running on another node, as that node
    /// last recorded it (`None`: none, or Redis cannot tell within
    /// [`READ_TIMEOUT`]), once this node has published every durable event
    /// it follows.
    pub async fn remote_live(&self, session_id: &str) -> Option<LiveTurn> {
        let mut conn = self.shared.conn()?;
        let key = self.names.live_key(session_id);
        let read = tokio::time::timeout(READ_TIMEOUT, async move {
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<Vec<u8>>>(&mut conn)
                .await
        });
        let value = match read.await {
            Ok(Ok(v)) => v?,
            Ok(Err(_)) | Err(_) => {
                self.shared
                    .live_reads_failed
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let (node, json) = unstamp(&value)?;
        // This node's own key outlived its turn by a moment: it has none.
        if node == self.node {
            return None;
        }
        let env = Envelope::from_json(json.as_bytes()).ok()?;
        let Event::LiveTurnSnapshot(snapshot) = &env.event else {
            return None;
        };
        self.local.catch_up_for(&env).await;
        snapshot.live_turn.clone()
    }

    /// Diagnostics.
    pub fn status(&self) -> TailStatus {
        let s = &self.shared;
        TailStatus {
            broker: "redis",
            url: self.url.clone(),
            connected: s.publishing.load(Ordering::Relaxed) && s.subscribed.load(Ordering::Relaxed),
            boot_id: self.boot_id.clone(),
            node: self.node.clone(),
            published: s.published.load(Ordering::Relaxed),
            received: s.received.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            live_reads_failed: s.live_reads_failed.load(Ordering::Relaxed),
        }
    }
}

/// The next wait of a reconnect loop.
fn next_backoff(backoff: Duration) -> Duration {
    backoff.saturating_mul(2).min(RECONNECT_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("redis://u:secret@h:6379/0"),
            "redis://u:***@h:6379/0"
        );
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("redis://secret@h"), "redis://***@h");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn stamped_values_name_their_node() {
        let v = stamp("n_1", "{\"a\":\"b\\nc\"}");
        assert_eq!(unstamp(v.as_bytes()), Some(("n_1", "{\"a\":\"b\\nc\"}")));
        assert_eq!(unstamp(b"no newline"), None);
    }

    #[test]
    fn names_follow_the_log() {
        let names = Names::new("tail_e_1");
        assert_eq!(
            names.channel(Scope::Session, "s_1"),
            "replay:tail_e_1:tail:session:s_1"
        );
        assert_eq!(names.live_key("s_1"), "replay:tail_e_1:live:s_1");
    }
}
