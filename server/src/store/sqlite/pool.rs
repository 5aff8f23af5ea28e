//! A small pool of read-only connections to the store file. In WAL mode they
//! read concurrently with each other and with the writer, so a long page
//! query never holds the writer's lock. Queries run on tokio's blocking
//! threads, never on the async workers.

use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use crate::store::StoreResult;

/// Read-only connections, handed out one per running read.
pub struct ReadPool {
    idle: Mutex<Vec<Connection>>,
    /// One permit per idle connection: waiting for one is async, so a full
    /// pool parks requests, not threads.
    permits: Arc<Semaphore>,
    size: usize,
}

impl ReadPool {
    /// Opens `size` read-only connections to the database file at `path`
    /// (which the writer has already created in WAL mode).
    pub fn open(path: &str, size: usize) -> StoreResult<ReadPool> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut idle = Vec::with_capacity(size);
        for _ in 0..size.max(1) {
            let conn = Connection::open_with_flags(path, flags)?;
            // Readers wait only in rare WAL recovery or checkpoint windows.
            conn.pragma_update(None, "busy_timeout", 5000)?;
            conn.pragma_update(None, "cache_size", -16000)?;
            conn.pragma_update(None, "mmap_size", 268435456)?;
            idle.push(conn);
        }
        Ok(ReadPool {
            permits: Arc::new(Semaphore::new(idle.len())),
            size: idle.len(),
            idle: Mutex::new(idle),
        })
    }

    /// Number of connections.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs `f` on a connection of the pool, on a blocking thread.
    pub async fn run<T, F>(self: &Arc<Self>, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the pool's semaphore is never closed");
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let loan = Loan {
                conn: pool.take(),
                pool: &pool,
            };
            let out = f(loan.conn.as_ref().expect("on loan"));
            drop(loan);
            drop(permit);
            out
        })
        .await?
    }

    /// Runs `f` here and now if a connection is free (`None` otherwise):
    /// for reads so small that a thread hop would cost more than the read.
    pub fn try_run<T>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T>,
    ) -> Option<StoreResult<T>> {
        let _permit = self.permits.try_acquire().ok()?;
        let loan = Loan {
            conn: self.take(),
            pool: self,
        };
        Some(f(loan.conn.as_ref().expect("on loan")))
    }

    fn take(&self) -> Option<Connection> {
        // The permit guarantees an idle connection.
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }
}

/// A borrowed connection, given back even when the read panics.
struct Loan<'p> {
    conn: Option<Connection>,
    pool: &'p ReadPool,
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
    }
}
