//! The store and the fan-out behind one lock: an event is published only
//! after it is committed, and in commit order.

use std::sync::{Arc, Mutex, MutexGuard};

use replay_client::core::protocol::{Envelope, Event, Scope};

use crate::hub::{Frame, Hub};
use crate::store::{Db, StoreResult};
use crate::util::now_rfc3339;

/// Store plus hub.
pub struct Log {
    db: Mutex<Db>,
    /// The live fan-out.
    pub hub: Arc<Hub>,
}

impl Log {
    /// Wraps an opened store.
    pub fn new(db: Db, hub: Arc<Hub>) -> Log {
        Log {
            db: Mutex::new(db),
            hub,
        }
    }

    /// Locks the store (short, synchronous sections only).
    pub fn db(&self) -> MutexGuard<'_, Db> {
        // A panic while holding the lock leaves SQLite consistent (transactions
        // roll back), so a poisoned lock is still usable.
        self.db.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Publishes a transient event stamped with the scope's current head.
    pub fn publish_transient(&self, scope: Scope, scope_id: &str, event: Event, critical: bool) {
        let db = self.db();
        let head = db.log_info(scope, scope_id).map_or(0, |i| i.head);
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
