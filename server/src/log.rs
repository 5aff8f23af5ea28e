//! The store and the fan-out. Writes go through one lock: an event is
//! published only after it is committed, and in commit order. Reads do not
//! take that lock: they run in snapshots on a pool of read-only connections
//! (a file store) off the async runtime, and heads are kept in memory.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use replay_core::protocol::{Envelope, Event, LiveTurn, Scope, TasksSnapshot};

use crate::hub::{Frame, Hub};
use crate::store::{Db, LogInfo, ReadPool, Snapshot, StoreResult, Synchronous};
use crate::util::now_rfc3339;
use crate::worker::SessionLive;

/// Read-only connections of a file store (a handful is plenty: page reads
/// are short and CPU-bound, and the machine has few cores).
pub const READERS: usize = 4;

/// Store plus hub.
pub struct Log {
    db: Arc<Mutex<Db>>,
    /// `None` for `:memory:`: another connection would be another database,
    /// so reads use the writer's connection under its lock.
    readers: Option<Arc<ReadPool>>,
    heads: RwLock<Heads>,
    /// The live fan-out.
    pub hub: Arc<Hub>,
}

/// The published heads: every event up to a log's head here has been
/// committed and handed to the hub.
#[derive(Default)]
struct Heads {
    logs: HashMap<(Scope, String), LogInfo>,
    global: LogInfo,
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
    /// Opens the store at `path` (`:memory:`: one connection for everything;
    /// a file: the writer plus [`READERS`] read-only connections).
    pub fn open(path: &str, sync: Synchronous, hub: Arc<Hub>) -> StoreResult<Log> {
        let db = Db::open(path, sync)?;
        let readers = if path == ":memory:" {
            None
        } else {
            Some(Arc::new(ReadPool::open(path, READERS)?))
        };
        let log = Log {
            db: Arc::new(Mutex::new(db)),
            readers,
            heads: RwLock::new(Heads::default()),
            hub,
        };
        drop(log.db()); // fills the heads
        Ok(log)
    }

    /// True when reads run on a pool of their own connections.
    pub fn concurrent_reads(&self) -> bool {
        self.readers.is_some()
    }

    /// Locks the writer (short, synchronous sections only).
    pub fn db(&self) -> DbGuard<'_> {
        // A panic while holding the lock leaves SQLite consistent (transactions
        // roll back), so a poisoned lock is still usable.
        DbGuard {
            db: self.db.lock().unwrap_or_else(PoisonError::into_inner),
            heads: &self.heads,
        }
    }

    /// A scope log's epoch and published head, if the log exists (no query).
    pub fn log_info(&self, scope: Scope, scope_id: &str) -> Option<LogInfo> {
        let heads = self.heads.read().unwrap_or_else(PoisonError::into_inner);
        heads.logs.get(&(scope, scope_id.to_owned())).cloned()
    }

    /// The global list's epoch and published head (no query).
    pub fn global_info(&self) -> LogInfo {
        let heads = self.heads.read().unwrap_or_else(PoisonError::into_inner);
        heads.global.clone()
    }

    /// True when the session exists.
    pub fn session_exists(&self, session_id: &str) -> bool {
        self.log_info(Scope::Session, session_id).is_some()
    }

    /// Runs `f` on one consistent snapshot of the store, off the async
    /// runtime and, for a file store, without the writer's lock.
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
        match &self.readers {
            Some(pool) => pool.try_run(|conn| f(&Snapshot::begin(conn)?)),
            None => {
                let db = self.db.try_lock().ok()?;
                Some(db.snapshot().and_then(|snap| f(&snap)))
            }
        }
    }

    /// Like [`Log::read`], with the session's `live_turn` taken atomically
    /// with the snapshot: the agent commits and edits the overlay under the
    /// session lock, so the view is begun under that lock too.
    pub async fn read_session<T, F>(&self, live: Arc<SessionLive>, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot<'_>, Option<LiveTurn>) -> StoreResult<T> + Send + 'static,
    {
        self.read_inner(Some(live), f).await
    }

    async fn read_inner<T, F>(&self, live: Option<Arc<SessionLive>>, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot<'_>, Option<LiveTurn>) -> StoreResult<T> + Send + 'static,
    {
        match &self.readers {
            Some(pool) => {
                pool.run(move |conn| {
                    // The connection is already ours: the session lock is held
                    // only while the view is pinned, never while waiting.
                    let (snap, live_turn) = match &live {
                        Some(live) => {
                            let st = live.lock();
                            (Snapshot::begin(conn)?, st.live_turn.clone())
                        }
                        None => (Snapshot::begin(conn)?, None),
                    };
                    f(&snap, live_turn)
                })
                .await
            }
            None => {
                let db = Arc::clone(&self.db);
                tokio::task::spawn_blocking(move || {
                    // Session lock before store lock, the order writers use.
                    let st = live.as_ref().map(|l| l.lock());
                    let db = db.lock().unwrap_or_else(PoisonError::into_inner);
                    let snap = db.snapshot()?;
                    f(&snap, st.and_then(|s| s.live_turn.clone()))
                })
                .await?
            }
        }
    }

    /// Commits a durable event, then publishes it; returns it.
    pub fn append(&self, scope: Scope, scope_id: &str, event: Event) -> StoreResult<Envelope> {
        let mut db = self.db();
        let env = db.append(scope, scope_id, &event)?;
        self.hub.publish(&Frame::new(env.clone()));
        Ok(env)
    }

    /// Runs `f` on the store and publishes the durable events it returns, all
    /// under the lock (for writes that must be atomic with a check).
    pub fn with_db<T>(
        &self,
        f: impl FnOnce(&mut Db) -> StoreResult<(T, Vec<Envelope>)>,
    ) -> StoreResult<T> {
        let mut db = self.db();
        let (out, envs) = f(&mut db)?;
        for env in envs {
            self.hub.publish(&Frame::new(env));
        }
        Ok(out)
    }

    /// Publishes a session's `tasks.snapshot`, stamped with the head of the
    /// locked writer `db` (the caller holds it, so snapshots go out in
    /// version order).
    pub fn publish_tasks(&self, db: &Db, session_id: &str, snap: &TasksSnapshot) {
        let head = db
            .log_info(Scope::Session, session_id)
            .map_or(0, |i| i.head);
        let event = Event::TasksSnapshot(snap.clone());
        let env = transient(Scope::Session, session_id, head, event, true);
        self.hub.publish(&Frame::new(env));
    }

    /// Publishes a transient event stamped with the scope's published head
    /// (never above what subscribers have been sent; no store lock).
    pub fn publish_transient(&self, scope: Scope, scope_id: &str, event: Event, critical: bool) {
        let head = self.log_info(scope, scope_id).map_or(0, |i| i.head);
        let env = transient(scope, scope_id, head, event, critical);
        self.hub.publish(&Frame::new(env));
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
