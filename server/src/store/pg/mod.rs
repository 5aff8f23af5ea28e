//! The Postgres store (`--db postgres://…`): the same log and projections
//! as the SQLite store, shared by every node of a cluster. Its schema is
//! `schema.sql`. The server's store interface is synchronous (SQLite's is),
//! so each call runs its async queries with [`block`]: the calling worker
//! thread hands its other tasks over first.
//!
//! Seqs and ids: an append first bumps its log's `head` (that row lock,
//! held to commit, orders the appends of one log only: seqs are dense per
//! log and commit in seq order). Its global id comes last: one statement
//! bumps the `$events` counter and inserts the events, sent with `COMMIT`
//! in one round trip ([`tx`]), so the counter's row lock is held for that
//! statement and the commit inside Postgres, never across a round trip, and
//! ids are still dense and commit in id order: a reader that sees an id sees
//! every smaller one (docs/cluster.md).

mod append;
mod backend;
pub mod cluster;
mod group;
mod lease;
pub mod read;
mod records;
mod tx;
pub mod wakeup;
mod write;

use std::future::Future;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use super::{StoreError, StoreResult};

pub use group::{GroupStats, Grouped};
pub use read::{events_after, PgSnapshot};
pub use tx::Committed;
pub use write::PgDb;

/// The notification channel every append notifies after its commit (the
/// payload: the group's events, or "read the log"; see [`wakeup`]).
pub const CHANNEL: &str = "replay_events";

/// Connections per node in the pool (writes are one at a time per node;
/// reads share the rest).
pub const POOL_SIZE: usize = 8;

/// Threads of the Postgres runtime: the connections' I/O and the follower.
const PG_THREADS: usize = 2;

/// The runtime that drives every Postgres connection (see the module docs).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(PG_THREADS)
            .thread_name("replay-pg")
            .enable_all()
            .build()
            .expect("the Postgres runtime starts")
    })
}

/// Runs `f` to completion from synchronous code, on this thread, with the
/// connections it uses driven by [`runtime`]; on a worker thread of the
/// server's runtime, that thread's other tasks move elsewhere meanwhile
/// (so not on a current-thread runtime).
pub fn block<F: Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| runtime().block_on(f))
}

/// Runs `f` on [`runtime`] and waits for it asynchronously.
pub async fn on_runtime<T: Send + 'static>(
    f: impl Future<Output = StoreResult<T>> + Send + 'static,
) -> StoreResult<T> {
    runtime().spawn(f).await?
}

/// True for a `postgres://` or `postgresql://` URL.
pub fn is_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// Opens a pool on `url` and makes sure the schema exists.
pub async fn connect(url: &str) -> StoreResult<Pool> {
    let config = tokio_postgres::Config::from_str(url)?;
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            // A closed connection is replaced at checkout; nothing is sent
            // (a snapshot ends its read transaction when dropped, a write
            // transaction ends itself or closes its connection).
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| StoreError::Backend(e.to_string()))?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    // Nodes starting together: one creates, the others wait and see it.
    tx.batch_execute("SELECT pg_advisory_xact_lock(727274)")
        .await?;
    tx.batch_execute(include_str!("schema.sql")).await?;
    tx.commit().await?;
    Ok(pool)
}

/// A u64 count or id as Postgres's BIGINT.
fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A BIGINT count or id back (never negative in this schema).
fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
