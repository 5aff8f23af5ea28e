//! The store: one events table with a dense per-scope `seq`, plus the
//! projections the endpoints and startup recovery need. Synchronous. [`Db`]
//! is the one writer of this process, on SQLite ([`sqlite`]) or on
//! Postgres shared by a cluster ([`pg`]); callers hold it behind one mutex
//! so that commit order equals publish order. Reads run in [`Snapshot`]s,
//! where [`Readers`] say: on the writer's connection, on a [`ReadPool`] of
//! read-only connections (WAL), or on Postgres's pool. What an event
//! changes ([`model`]) and the answers built from rows ([`rows`]) are
//! stated once, for both.

mod backend;
mod boundary;
pub mod model;
pub mod pg;
mod readers;
mod records;
mod rows;
pub mod sqlite;

use replay_core::protocol::Scope;

pub use backend::{Backend, Db, Reads, Snapshot, View};
pub use boundary::BOUNDARY_SCAN_MAX;
pub use model::{ProcessState, QuestionState, ToolState, TurnState};
pub use readers::{Reader, Readers, Store, READERS};
pub use records::RecordKind;
pub use rows::{Budget, Page, ProcessLog, ProcessRow, ENVELOPE_BYTES};
pub use sqlite::{ReadPool, SqliteDb, SqliteSnapshot, Synchronous};

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored JSON value did not decode.
    #[error("stored json: {0}")]
    Json(#[from] serde_json::Error),
    /// A read running off the async runtime panicked or was cancelled.
    #[error("read task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// Postgres failed (a query, or the connection).
    #[error("postgres: {}", pg_detail(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// No pooled Postgres connection could be had in time.
    #[error("postgres pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The backend could not be set up.
    #[error("store backend: {0}")]
    Backend(String),
    /// An event of a turn or process this node no longer holds (Postgres:
    /// its lease ran out and another node claimed it, or it has ended);
    /// nothing written.
    #[error("{0} is no longer held by this node")]
    NotHeld(String),
    /// The failure of a group commit, shared by each of its appends.
    #[error("{0}")]
    Shared(std::sync::Arc<StoreError>),
    /// A state column held a value this server does not know.
    #[error("unknown {kind} state {value:?}")]
    UnknownState {
        /// Whose state (`turn`, `process`, …).
        kind: &'static str,
        /// The value found.
        value: String,
    },
}

impl StoreError {
    /// True when the store cannot be reached or refuses work for now (a
    /// lost or refused connection, no pooled connection in time, a locked
    /// file): the request may succeed later, so it is answered `503`, never
    /// as if the data were missing or broken.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Pool(_) => true,
            StoreError::Shared(e) => e.is_unavailable(),
            StoreError::Postgres(e) => pg_unavailable(e),
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            _ => false,
        }
    }
}

/// A Postgres error that says the server is gone or not serving: the
/// connection closed or failed at the socket, or a connection-exception,
/// shutdown or too-many-connections answer (SQLSTATE 08, 57P, 53300).
fn pg_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        return code.starts_with("08") || code.starts_with("57P") || code == "53300";
    }
    // No server answer at all: an I/O error under the connection.
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// A Postgres error with the server's message (its `Display` says only "db error").
fn pg_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{e}: {db}"),
        None => e.to_string(),
    }
}

/// Result of the store layer.
pub type StoreResult<T> = Result<T, StoreError>;

/// A scope's log identity and head.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogInfo {
    /// The log's epoch.
    pub epoch: String,
    /// Durable head (0 = empty).
    pub head: u64,
}

/// A session's background tasks failed because their node is gone
/// ([`Backend::fail_expired_tasks`]).
pub struct ExpiredTasks {
    /// The session.
    pub session_id: String,
    /// Its tasks afterwards.
    pub snapshot: replay_core::protocol::TasksSnapshot,
    /// The tasks failed.
    pub failed: Vec<String>,
}

/// A nonterminal turn found at recovery.
#[derive(Clone, Debug)]
pub struct OpenTurn {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
}

/// An unanswered persisted question.
#[derive(Clone, Debug)]
pub struct OpenQuestion {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The question.
    pub question_id: String,
}

/// A started but uncompleted tool call.
#[derive(Clone, Debug)]
pub struct OpenTool {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The call.
    pub call_id: String,
}

pub(crate) fn scope_from_str(s: &str) -> Scope {
    match s {
        "session" => Scope::Session,
        "team" => Scope::Team,
        "process" => Scope::Process,
        "worktree" => Scope::Worktree,
        _ => Scope::System,
    }
}
