//! The store and the fan-out. On SQLite writes go through one lock: an
//! event is published only after it is committed, and in commit order. On
//! Postgres appends take no lock of this node and durable events reach the
//! fan-out through the log ([`SharedLog`]); writes that must be atomic with
//! a check still take the lock. Reads do not take it: they run in
//! snapshots where the store's [`Readers`] say, off the async runtime, and
//! heads are kept in memory.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use replay_core::protocol::{Envelope, Event, LiveTurn, LiveTurnSnapshot, Scope, TasksSnapshot};

use crate::fanout::{Fanout, Frame};
use crate::follow::{Heads, Publisher};
use crate::shared_log::SharedLog;
use crate::store::{pg, Db, LogInfo, Readers, Snapshot, Store, StoreResult, Synchronous};
use crate::tail::{Local, Tail, TailError, TailStatus};
use crate::util::now_rfc3339;
use crate::worker::SessionLive;

/// Store plus fan-out.
pub struct Log {
    db: Arc<Mutex<Db>>,
    readers: Readers,
    /// The part of a shared store (Postgres), held once: `None` on SQLite.
    shared: Option<SharedLog>,
    heads: Arc<RwLock<Heads>>,
    /// The live fan-out.
    pub fanout: Arc<Fanout>,
    /// The cluster's live tail, when one was started ([`Log::start_tail`]).
    tail: OnceLock<Tail>,
}

/// The locked writer. Dropping it copies the heads changed under it to the
/// in-memory heads, after the caller has published its events.
pub struct DbGuard<'a> {
    db: MutexGuard<'a, Db>,
    heads: &'a RwLock<Heads>,
}

impl Deref for DbGuard<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        &self.db
    }
}

impl DerefMut for DbGuard<'_> {
    fn deref_mut(&mut self) -> &mut Db {
        &mut self.db
    }
}

impl Drop for DbGuard<'_> {
    fn drop(&mut self) {
        let changed = self.db.take_changed();
        if changed.is_empty() {
            return;
        }
        let mut heads = self.heads.write().unwrap_or_else(PoisonError::into_inner);
        heads.logs.extend(changed);
        heads.global = self.db.global_info();
    }
}

impl Log {
    /// Opens the store at `path` ([`Store::open`]: `:memory:`, a file, or a
    /// `postgres://` URL, whose turns accepted here are leased for
    /// `lease`) and fills the heads.
    pub fn open(
        path: &str,
        sync: Synchronous,
        fanout: Arc<Fanout>,
        lease: Duration,
    ) -> StoreResult<Log> {
        let store = Store::open(path, sync, lease)?;
        let heads = Arc::default();
        let shared = store
            .shared
            .map(|db| SharedLog::start(path, db, &fanout, &heads))
            .transpose()?;
        let log = Log {
            db: store.writer,
            readers: store.readers,
            shared,
            heads,
            fanout,
            tail: OnceLock::new(),
        };
        drop(log.db()); // the writer's heads, where it keeps them
        Ok(log)
    }

    /// True when reads run on connections of their own.
    pub fn concurrent_reads(&self) -> bool {
        self.readers.concurrent()
    }

    /// The shared store's pool and publisher, when the store is Postgres
    /// (what `crate::cluster` links the nodes with).
    pub fn cluster_links(&self) -> Option<(deadpool_postgres::Pool, Arc<Publisher>)> {
        self.shared
            .as_ref()
            .map(|c| (c.pool().clone(), Arc::clone(c.publisher())))
    }

    /// How this node's appends were committed and published
    /// ([`SharedLog::append_stats`]; `null` on SQLite).
    pub fn append_stats(&self) -> serde_json::Value {
        self.shared
            .as_ref()
            .map_or(serde_json::Value::Null, SharedLog::append_stats)
    }

    /// Where the events this node published came from
    /// ([`SharedLog::follow_stats`]; `null` on SQLite).
    pub fn follow_stats(&self) -> serde_json::Value {
        self.shared
            .as_ref()
            .map_or(serde_json::Value::Null, SharedLog::follow_stats)
    }

    /// Drops the next `count` wake-ups of other nodes as if lost (fault
    /// `lose_wakeups`; nothing on SQLite, which has no other node).
    pub fn lose_wakeups(&self, count: u64) {
        if let Some(c) = &self.shared {
            c.publisher().lose_wakeups(count);
        }
    }

    /// Locks the writer (short, synchronous sections only).
    pub fn db(&self) -> DbGuard<'_> {
        // A panic while holding the lock leaves SQLite consistent (transactions
        // roll back), so a poisoned lock is still usable. On Postgres the
        // holder waits for round trips: a worker of the runtime waiting here
        // too would stop every task it runs (with one worker thread, the
        // node's every stream), so it hands them over first, as a Postgres
        // call does.
        let db = if self.shared.is_some() {
            crate::util::lock_handing_off(&self.db)
        } else {
            self.db.lock().unwrap_or_else(PoisonError::into_inner)
        };
        DbGuard {
            db,
            heads: &self.heads,
        }
    }

    /// A scope log's epoch and published head, if the log exists (no query;
    /// on Postgres, a log this node has not seen yet is looked for in the
    /// log first: another node may have just created it). A failed look is
    /// an error, never "no such log": a client told `404` gives up.
    pub fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        if let Some(info) = self.published_info(scope, scope_id) {
            return Ok(Some(info));
        }
        let Some(shared) = self.shared.as_ref() else {
            return Ok(None);
        };
        shared.catch_up()?;
        Ok(self.published_info(scope, scope_id))
    }

    fn published_info(&self, scope: Scope, scope_id: &str) -> Option<LogInfo> {
        let heads = self.heads.read().unwrap_or_else(PoisonError::into_inner);
        heads.logs.get(&(scope, scope_id.to_owned())).cloned()
    }

    /// A scope log's published head, 0 for a log not published here (no
    /// query: what stamps transients and heartbeats).
    pub fn published_head(&self, scope: Scope, scope_id: &str) -> u64 {
        self.published_info(scope, scope_id).map_or(0, |i| i.head)
    }

    /// The global list's epoch and published head (no query).
    pub fn global_info(&self) -> LogInfo {
        let heads = self.heads.read().unwrap_or_else(PoisonError::into_inner);
        heads.global.clone()
    }

    /// True when the session exists (an error when that cannot be known).
    pub fn session_exists(&self, session_id: &str) -> StoreResult<bool> {
        Ok(self.log_info(Scope::Session, session_id)?.is_some())
    }

    /// Runs `f` on one consistent snapshot of the store, off the async
    /// runtime and, but for `:memory:`, without the writer's lock.
    pub async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.read_inner(None, move |snap, _| f(snap)).await
    }

    /// Runs a small read on this thread if a connection is free right now
    /// (`None` otherwise): no thread hop, so it happens at once.
    pub fn try_read_now<T>(
        &self,
        f: impl FnOnce(&Snapshot<'_>) -> StoreResult<T>,
    ) -> Option<StoreResult<T>> {
        self.readers.try_run_now(|mut reader| f(&reader.pin()?))
    }

    /// Like [`Log::read`], with the session's `live_turn` taken atomically
    /// with the snapshot: the agent commits and edits the overlay under the
    /// session lock, so the view is begun under that lock too.
    ///
    /// A turn running on another node (the cluster's live tail) is read
    /// before the view is pinned, so the view holds every durable event the
    /// live turn follows.
    pub async fn read_session<T, F>(
        &self,
        session_id: &str,
        live: Arc<SessionLive>,
        f: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot<'_>, Option<LiveTurn>) -> StoreResult<T> + Send + 'static,
    {
        let remote = match self.tail.get() {
            Some(tail) if live.lock().live_turn.is_none() => tail.remote_live(session_id).await,
            _ => None,
        };
        self.read_inner(Some(live), move |snap, local| f(snap, local.or(remote)))
            .await
    }

    async fn read_inner<T, F>(&self, live: Option<Arc<SessionLive>>, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot<'_>, Option<LiveTurn>) -> StoreResult<T> + Send + 'static,
    {
        self.readers
            .run(move |mut reader| {
                // The connection is already ours: the session lock is held
                // only while the view is pinned, never while waiting for one
                // (and, on the writer's connection, taken before the store's
                // lock, the order writers take them in).
                let (snap, live_turn) = match &live {
                    Some(live) => {
                        let st = live.lock();
                        (reader.pin()?, st.live_turn.clone())
                    }
                    None => (reader.pin()?, None),
                };
                f(&snap, live_turn)
            })
            .await
    }

    /// Commits a durable event, then publishes it; returns it. On Postgres
    /// without this node's writer lock: concurrent appends commit in
    /// parallel, and each returns once the log up to it is published, so a
    /// transient the caller publishes next never overtakes it.
    pub fn append(&self, scope: Scope, scope_id: &str, event: Event) -> StoreResult<Envelope> {
        if let Some(shared) = &self.shared {
            return pg::block(shared.append(scope, scope_id, event));
        }
        let mut db = self.db();
        let env = db.append(scope, scope_id, &event)?;
        self.publish_committed(vec![env.clone()]);
        Ok(env)
    }

    /// [`Log::append`] for async callers. On Postgres the append and its
    /// publishing run as one task of the Postgres runtime and no worker
    /// thread blocks: [`Log::append`] blocks its thread, which first hands
    /// its other tasks to another thread (with the cluster bench's 16
    /// appends in flight a node ran ~30 threads on 2 cores).
    pub async fn append_async(
        &self,
        scope: Scope,
        scope_id: &str,
        event: Event,
    ) -> StoreResult<Envelope> {
        match &self.shared {
            Some(shared) => pg::on_runtime(shared.append(scope, scope_id, event)).await,
            None => self.append(scope, scope_id, event),
        }
    }

    /// Publishes durable events just committed, in commit order (on SQLite
    /// the caller holds the writer; on Postgres through the log,
    /// [`SharedLog::publish_committed`]).
    pub fn publish_committed(&self, envs: Vec<Envelope>) {
        match &self.shared {
            Some(shared) => shared.publish_committed(&envs),
            None => {
                for env in envs {
                    self.fanout.publish(&Frame::new(env));
                }
            }
        }
    }

    /// Runs `f` on the store and publishes the durable events it returns, all
    /// under the lock (for writes that must be atomic with a check).
    pub fn with_db<T>(
        &self,
        f: impl FnOnce(&mut Db) -> StoreResult<(T, Vec<Envelope>)>,
    ) -> StoreResult<T> {
        let mut db = self.db();
        let (out, envs) = f(&mut db)?;
        self.publish_committed(envs);
        Ok(out)
    }

    /// Publishes a session's `tasks.snapshot`, stamped with the head of the
    /// locked writer `db` (the caller holds it, so snapshots go out in
    /// version order).
    pub fn publish_tasks(&self, db: &Db, session_id: &str, snap: &TasksSnapshot) {
        // Where the writer does not know it (Postgres), the published head:
        // the committed one may be ahead of what subscribers were sent.
        let head = db
            .cached_log_info(Scope::Session, session_id)
            .or_else(|| self.published_info(Scope::Session, session_id))
            .map_or(0, |i| i.head);
        let event = Event::TasksSnapshot(snap.clone());
        let env = transient(Scope::Session, session_id, head, event, true);
        self.publish_here_and_on_the_tail(env);
    }

    /// Publishes a transient event stamped with the scope's published head
    /// (never above what subscribers have been sent; no store lock).
    pub fn publish_transient(&self, scope: Scope, scope_id: &str, event: Event, critical: bool) {
        let head = self.published_info(scope, scope_id).map_or(0, |i| i.head);
        let env = transient(scope, scope_id, head, event, critical);
        self.publish_here_and_on_the_tail(env);
    }

    fn publish_here_and_on_the_tail(&self, env: Envelope) {
        let frame = Frame::new(env);
        self.fanout.publish(&frame);
        if let Some(tail) = self.tail.get() {
            tail.publish(&frame.env, &frame.json);
        }
    }

    /// Starts the cluster's live tail on Redis at `url` (Postgres only;
    /// docs/cluster.md). Its `boot_id` is named after the shared
    /// log's epoch: the same on every node, new only with a new log.
    pub fn start_tail(&self, url: &str, lease: Duration) -> Result<(), TailError> {
        let Some(shared) = &self.shared else {
            return Err(TailError::NeedsSharedLog);
        };
        let boot_id = format!("tail_{}", self.global_info().epoch);
        let local = Local {
            fanout: Arc::clone(&self.fanout),
            heads: Arc::clone(&self.heads),
            publisher: Arc::clone(shared.publisher()),
        };
        let tail = Tail::start(url, boot_id, lease, local, pg::runtime())?;
        // Set once, at boot, before any turn runs.
        let _ = self.tail.set(tail);
        Ok(())
    }

    /// The `boot_id` streams and replays name: the live tail's (one for the
    /// whole cluster) when there is one, else this node's worker's.
    pub fn served_boot_id(&self, worker_boot_id: &str) -> String {
        self.tail
            .get()
            .map_or(worker_boot_id, Tail::boot_id)
            .to_owned()
    }

    /// Records a session's live turn for the other nodes (the live tail
    /// only; the caller holds the session lock, so records go out in `rev`
    /// order).
    pub fn share_live(&self, session_id: &str, live_turn: Option<&LiveTurn>) {
        let Some(tail) = self.tail.get() else { return };
        let snapshot = live_turn.map(|lt| {
            let head = self
                .published_info(Scope::Session, session_id)
                .map_or(0, |i| i.head);
            let event = Event::LiveTurnSnapshot(LiveTurnSnapshot {
                live_turn: Some(lt.clone()),
            });
            transient(Scope::Session, session_id, head, event, true).to_json()
        });
        tail.put_live(session_id, snapshot);
    }

    /// Forgets the live turns this node recorded (its worker restarted).
    pub fn forget_live(&self) {
        if let Some(tail) = self.tail.get() {
            tail.forget_all();
        }
    }

    /// The live turn of a session running on another node (the live tail
    /// only), once this node has published every durable event it follows.
    pub async fn remote_live_turn(&self, session_id: &str) -> Option<LiveTurn> {
        self.tail.get()?.remote_live(session_id).await
    }

    /// The live tail's diagnostics (`None`: no tail, live tails stay on
    /// the node running the turn).
    pub fn tail_status(&self) -> Option<TailStatus> {
        self.tail.get().map(Tail::status)
    }
}

/// A transient envelope (no `id`, no `seq`).
pub fn transient(
    scope: Scope,
    scope_id: &str,
    head: u64,
    event: Event,
    critical: bool,
) -> Envelope {
    Envelope {
        id: None,
        scope,
        scope_id: scope_id.to_owned(),
        seq: None,
        after_seq: Some(head),
        critical,
        ts: now_rfc3339(),
        event,
    }
}
