//! The log's part on a shared store (Postgres: the nodes of a cluster write
//! one log). Appends take no lock of this node: Postgres orders them, and
//! this node commits its concurrent appends in groups. Durable events reach
//! the fan-out only through the log, in id order, whichever node wrote them
//! ([`crate::follow`]).

use std::future::Future;
use std::sync::{Arc, RwLock};

use replay_core::protocol::{Envelope, Event, Scope};

use crate::fanout::Fanout;
use crate::follow::{self, Heads, Publisher};
use crate::store::pg::{self, PgDb};
use crate::store::StoreResult;

/// The shared store's writer, what publishes its log here, and the task
/// following it (stopped when this is dropped).
pub struct SharedLog {
    db: Arc<PgDb>,
    publisher: Arc<Publisher>,
    follower: tokio::task::AbortHandle,
}

impl Drop for SharedLog {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

impl SharedLog {
    /// Starts publishing the log at `url`, which `db` writes, to `fanout`:
    /// fills `heads` with every log's head as it is now, then follows.
    pub fn start(
        url: &str,
        db: Arc<PgDb>,
        fanout: &Arc<Fanout>,
        heads: &Arc<RwLock<Heads>>,
    ) -> StoreResult<SharedLog> {
        let publisher = pg::block(Publisher::start(
            db.pool().clone(),
            Arc::clone(fanout),
            Arc::clone(heads),
            db.global_epoch().to_owned(),
            db.node_tag().to_owned(),
        ))?;
        let follower = pg::runtime().spawn(follow::follow(url.to_owned(), Arc::clone(&publisher)));
        Ok(SharedLog {
            db,
            publisher,
            follower: follower.abort_handle(),
        })
    }

    /// The store's pool.
    pub fn pool(&self) -> &deadpool_postgres::Pool {
        self.db.pool()
    }

    /// What publishes the log here.
    pub fn publisher(&self) -> &Arc<Publisher> {
        &self.publisher
    }

    /// Commits `event` in a group of this node's appends, then publishes the
    /// group (the events are not read back); gives the event as committed,
    /// once the log up to it is published. The future owns what it uses, so
    /// it can run as a task of the Postgres runtime.
    pub fn append(
        &self,
        scope: Scope,
        scope_id: &str,
        event: Event,
    ) -> impl Future<Output = StoreResult<Envelope>> + Send + 'static {
        let (db, publisher) = (Arc::clone(&self.db), Arc::clone(&self.publisher));
        let scope_id = scope_id.to_owned();
        async move {
            let grouped = match db.append_grouped(scope, &scope_id, event).await {
                Ok(grouped) => grouped,
                Err(e) => {
                    // It may have committed (a lost reply); this node skips
                    // its own wake-ups, so its follower looks now.
                    publisher.poke();
                    return Err(e);
                }
            };
            if let Err(e) = publisher.publish_own(&grouped.group).await {
                tracing::warn!(error = %e, "publishing from the log failed; the follower will");
                publisher.poke();
            }
            Ok(grouped.own().0.clone())
        }
    }

    /// Publishes events just committed through the writer: read back from
    /// the log with whatever other nodes committed before them. A failure
    /// is only logged: the follower publishes them once it can read the
    /// log again.
    pub fn publish_committed(&self, envs: &[Envelope]) {
        let Some(upto) = envs.iter().filter_map(|e| e.id).max() else {
            return;
        };
        if let Err(e) = self.publisher.catch_up_now(Some(upto)) {
            tracing::warn!(error = %e, "publishing from the log failed; the follower will");
            self.publisher.poke();
        }
    }

    /// Publishes everything committed and not published yet (a log another
    /// node may have just created).
    pub fn catch_up(&self) -> StoreResult<()> {
        self.publisher.catch_up_now(None)
    }

    /// How this node's appends were committed and published:
    /// `{transactions, events, published_own}`, appends grouped into
    /// transactions and events published without reading them back.
    pub fn append_stats(&self) -> serde_json::Value {
        use std::sync::atomic::Ordering::Relaxed;
        let groups = self.db.group_stats();
        serde_json::json!({
            "transactions": groups.commits.load(Relaxed),
            "events": groups.events.load(Relaxed),
            "published_own": self.publisher.published_own.load(Relaxed),
        })
    }

    /// Where the events this node published came from: `{from_wakeups,
    /// read, reads, gap_reads, plain_wakeups, wakeups_dropped}`, see
    /// [`follow::FollowStats`].
    pub fn follow_stats(&self) -> serde_json::Value {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.publisher.stats;
        serde_json::json!({
            "from_wakeups": s.from_wakeups.load(Relaxed),
            "read": s.read.load(Relaxed),
            "reads": s.reads.load(Relaxed),
            "gap_reads": s.gap_reads.load(Relaxed),
            "plain_wakeups": s.plain_wakeups.load(Relaxed),
            "wakeups_dropped": s.wakeups_dropped.load(Relaxed),
        })
    }
}
