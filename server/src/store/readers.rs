//! Where reads run, and opening a store with them. A read takes a
//! connection first ([`Readers::run`]), then pins its view
//! ([`Reader::pin`]): a caller that reads some state of its own with the
//! view holds that state's lock only while the view is pinned, never while
//! waiting for a connection.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use deadpool_postgres::Object;
use rusqlite::Connection;

use super::pg::{self, PgDb, PgSnapshot};
use super::{Db, ReadPool, Snapshot, SqliteDb, SqliteSnapshot, StoreResult, Synchronous};

/// Read-only connections of a file store (a handful is plenty: page reads
/// are short and CPU-bound, and the machine has few cores).
pub const READERS: usize = 4;

/// A store just opened: its writer, where its reads run, and the writer
/// again when other nodes share the store (Postgres), for what appends
/// without the writer's lock.
pub struct Store {
    /// The writer, behind the lock that orders commits and publishing.
    pub writer: Arc<Mutex<Db>>,
    /// Where reads run.
    pub readers: Readers,
    /// The shared store's writer (`None` on SQLite).
    pub shared: Option<Arc<PgDb>>,
}

impl Store {
    /// Opens the store at `path`: `:memory:`, one connection for everything;
    /// a file, the writer plus [`READERS`] read-only connections; a
    /// `postgres://` URL, a pool and the schema (turns accepted here are
    /// leased for `lease`).
    pub fn open(path: &str, sync: Synchronous, lease: Duration) -> StoreResult<Store> {
        if pg::is_url(path) {
            let pool = pg::block(pg::connect(path))?;
            let db = Arc::new(pg::block(PgDb::open(pool.clone(), lease))?);
            return Ok(Store {
                writer: Arc::new(Mutex::new(Db::Pg(Arc::clone(&db)))),
                readers: Readers::Pg(pool),
                shared: Some(db),
            });
        }
        let writer = Arc::new(Mutex::new(Db::Sqlite(SqliteDb::open(path, sync)?)));
        let readers = if path == ":memory:" {
            Readers::Writer(Arc::clone(&writer))
        } else {
            Readers::Files(Arc::new(ReadPool::open(path, READERS)?))
        };
        Ok(Store {
            writer,
            readers,
            shared: None,
        })
    }
}

/// Where reads run.
pub enum Readers {
    /// `:memory:`: another connection would be another database, so reads
    /// use the writer's connection under its lock.
    Writer(Arc<Mutex<Db>>),
    /// A file: read-only connections (WAL), reading beside the writer.
    Files(Arc<ReadPool>),
    /// Postgres: read transactions on the pool's connections.
    Pg(deadpool_postgres::Pool),
}

/// A connection taken for one read, its view not pinned yet.
// One per read, on the stack of the thread running it: the variants' sizes
// do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Reader<'a> {
    /// The writer's, locked when the view is pinned.
    Writer(&'a Mutex<Db>, Option<MutexGuard<'a, Db>>),
    /// A read-only connection of a file store.
    File(&'a Connection),
    /// A pooled Postgres connection (taken by the view it pins).
    Pg(Option<Object>),
}

impl Readers {
    /// True when reads run on connections of their own, beside the writer.
    pub fn concurrent(&self) -> bool {
        !matches!(self, Readers::Writer(_))
    }

    /// Runs `f` on a connection, off the async runtime.
    pub async fn run<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Reader<'_>) -> StoreResult<T> + Send + 'static,
    {
        match self {
            Readers::Writer(db) => {
                let db = Arc::clone(db);
                tokio::task::spawn_blocking(move || f(Reader::Writer(&db, None))).await?
            }
            Readers::Files(pool) => pool.run(move |conn| f(Reader::File(conn))).await,
            Readers::Pg(pool) => {
                let pool = pool.clone();
                let client = pg::on_runtime(async move { Ok(pool.get().await?) }).await?;
                tokio::task::spawn_blocking(move || f(Reader::Pg(Some(client)))).await?
            }
        }
    }

    /// Runs a small read on this thread if a connection is free right now
    /// (`None` otherwise, and always on Postgres, where every read is a
    /// round trip): no thread hop, so it happens at once.
    pub fn try_run_now<T>(
        &self,
        f: impl FnOnce(Reader<'_>) -> StoreResult<T>,
    ) -> Option<StoreResult<T>> {
        match self {
            Readers::Writer(db) => {
                let held = db.try_lock().ok()?;
                Some(f(Reader::Writer(db, Some(held))))
            }
            Readers::Files(pool) => pool.try_run(|conn| f(Reader::File(conn))),
            Readers::Pg(_) => None,
        }
    }
}

impl Reader<'_> {
    /// Begins the read's one consistent view (once).
    pub fn pin(&mut self) -> StoreResult<Snapshot<'_>> {
        match self {
            Reader::Writer(db, held) => {
                let db = match held {
                    Some(db) => db,
                    None => held.insert(db.lock().unwrap_or_else(PoisonError::into_inner)),
                };
                // Only `:memory:` reads on its writer (`Store::open`); a
                // Postgres store reads on its pool (`Reader::Pg`).
                let Db::Sqlite(db) = &**db else {
                    unreachable!("only a SQLite store reads on its writer")
                };
                Ok(Snapshot::Sqlite(db.snapshot()?))
            }
            Reader::File(conn) => Ok(Snapshot::Sqlite(SqliteSnapshot::begin(conn)?)),
            Reader::Pg(client) => {
                let client = client.take().expect("a view is pinned once");
                Ok(Snapshot::Pg(Box::new(pg::block(PgSnapshot::pin(client))?)))
            }
        }
    }
}
