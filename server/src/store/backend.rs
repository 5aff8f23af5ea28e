//! The two backends behind one interface: [`Reads`] (the queries every
//! backend answers), [`View`] (one consistent read) and [`Backend`] (the
//! writer). [`Db`] and [`Snapshot`] hold SQLite's or Postgres's and pick
//! it in one place, their `Deref`: callers call the traits' methods on
//! them. Neither backend knows of the other.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use replay_core::protocol::{BackgroundWait, Envelope, Event, Scope, Task, TasksSnapshot};

use super::pg::{PgDb, PgSnapshot};
use super::{
    Budget, ExpiredTasks, LogInfo, OpenQuestion, OpenTool, OpenTurn, Page, ProcessLog, ProcessRow,
    QuestionState, SqliteDb, SqliteSnapshot, StoreResult, TurnState,
};

/// The read-only queries, on the writer ([`Db`]) or a [`Snapshot`].
pub trait Reads {
    /// Durable events of one log with `seq > after`, ascending, at most `limit`.
    fn page(
        &self,
        scope: Scope,
        scope_id: &str,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<Envelope>> {
        let budget = Budget {
            events: limit,
            bytes: usize::MAX,
        };
        Ok(self.page_within(scope, scope_id, after, budget)?.events)
    }
    /// Durable events of one log with `seq > after`, ascending, within `budget`.
    fn page_within(
        &self,
        scope: Scope,
        scope_id: &str,
        after: u64,
        budget: Budget,
    ) -> StoreResult<Page>;
    /// Durable events of every scope with `id > after_id`, ascending, within `budget`.
    fn global_page_within(&self, after_id: u64, budget: Budget) -> StoreResult<Page>;
    /// Durable events of every scope with `id > after_id`, ascending, at most `limit`.
    fn global_page(&self, after_id: u64, limit: usize) -> StoreResult<Vec<Envelope>> {
        let budget = Budget {
            events: limit,
            bytes: usize::MAX,
        };
        Ok(self.global_page_within(after_id, budget)?.events)
    }
    /// Where a page of a session's history that ends at `end` starts: the
    /// newest turn boundary at least `at_least` events before `end`, or 0
    /// (`boundary`; docs/protocol.md §4.1).
    fn turn_boundary(&self, session_id: &str, end: u64, at_least: u64) -> StoreResult<u64> {
        super::boundary::find(self, session_id, end, at_least)
    }
    /// Bytes of event data in one log (what a fold of it has to load).
    fn log_bytes(&self, scope: Scope, scope_id: &str) -> StoreResult<u64>;
    /// The session's task state.
    fn tasks(&self, session_id: &str) -> StoreResult<TasksSnapshot>;
    /// Every runtime-managed process.
    fn processes(&self) -> StoreResult<Vec<ProcessRow>>;
    /// A process's whole log and its state.
    fn process_log(&self, process_id: &str) -> StoreResult<Option<ProcessLog>>;
    /// Number of sessions and of durable events.
    fn counts(&self) -> StoreResult<(u64, u64)>;
    /// Number of boots recorded (on Postgres: of every node).
    fn boot_count(&self) -> StoreResult<u64>;
}

/// One consistent read: everything read through it describes one commit.
pub trait View: Reads {
    /// A scope log's epoch and head as of this view.
    fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>>;
    /// The global list's epoch and highest id as of this view.
    fn global_info(&self) -> StoreResult<LogInfo>;
}

/// The writer's operations. Its reads ([`Reads`]) each see the last commit.
pub trait Backend: Reads {
    /// The global list's epoch and, on SQLite, its committed head (on
    /// Postgres the head is what the node has published: see `follow`).
    fn global_info(&self) -> LogInfo;
    /// A scope log's committed epoch and head, if the log exists (a failed
    /// lookup is an error, never "no such log").
    fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>>;
    /// True when other processes may write this store too (Postgres).
    fn shared(&self) -> bool {
        false
    }
    /// True when the session exists; a failed lookup is an error, not "no
    /// such session" (a client told `404` during an outage would give the
    /// session up).
    fn session_exists(&self, session_id: &str) -> StoreResult<bool> {
        Ok(self.log_info(Scope::Session, session_id)?.is_some())
    }
    /// Allocates the next number of a named counter (ids survive restarts).
    fn next_number(&mut self, name: &str) -> StoreResult<u64>;
    /// Appends one durable event and moves its projections, in one
    /// transaction (its log is created if needed).
    fn append(&mut self, scope: Scope, scope_id: &str, event: &Event) -> StoreResult<Envelope>;
    /// Registers a session row (its `session.created` is appended by the caller).
    fn insert_session(&mut self, session_id: &str, title: &str) -> StoreResult<()>;
    /// The turn a message started, if that `message_id` was seen before.
    fn turn_for_message(&self, session_id: &str, message_id: &str) -> StoreResult<Option<String>>;
    /// A queued turn and the user's `message.committed`, in one transaction.
    fn accept_message(
        &mut self,
        session_id: &str,
        turn_id: &str,
        message_id: &str,
        text: &str,
    ) -> StoreResult<Envelope>;
    /// State of a turn.
    fn turn_state(&self, turn_id: &str) -> StoreResult<Option<TurnState>>;
    /// Turns to end at recovery: every open one on SQLite; on Postgres those
    /// whose lease ran out (their node is gone), claimed by this node.
    fn open_turns(&self) -> StoreResult<Vec<OpenTurn>>;
    /// Questions to decline at recovery (as [`Backend::open_turns`]).
    fn open_questions(&self) -> StoreResult<Vec<OpenQuestion>>;
    /// State of a persisted question, with its session.
    fn question_state(&self, question_id: &str) -> StoreResult<Option<(String, QuestionState)>>;
    /// Tool calls to fail at recovery (as [`Backend::open_turns`]).
    fn open_tools(&self) -> StoreResult<Vec<OpenTool>>;
    /// Fails, once each, the running processes whose lease ran out (their
    /// node is gone; only a shared store leases them); returns the
    /// `process.failed` events committed.
    fn fail_expired_processes(&mut self) -> StoreResult<Vec<Envelope>> {
        Ok(Vec::new())
    }
    /// Fails, once each, the open background tasks whose lease ran out (as
    /// [`Backend::fail_expired_processes`]); returns each session's new
    /// task state.
    fn fail_expired_tasks(&mut self) -> StoreResult<Vec<ExpiredTasks>> {
        Ok(Vec::new())
    }
    /// Appends process output; returns the byte offset it starts at.
    fn append_process_log(&mut self, process_id: &str, text: &str) -> StoreResult<u64>;
    /// Replaces the session's task state and bumps its version; returns the
    /// new snapshot.
    fn put_tasks(
        &mut self,
        session_id: &str,
        tasks: &[Task],
        background_wait: Option<&BackgroundWait>,
    ) -> StoreResult<TasksSnapshot>;
    /// Sessions with a queued or running task.
    fn sessions_with_open_tasks(&self) -> StoreResult<Vec<String>>;
    /// Records a new boot (on Postgres: the owner of the turns accepted from now).
    fn insert_boot(&mut self, boot_id: &str) -> StoreResult<()>;
    /// Stores what startup recovery did in this boot.
    fn set_recovery(&mut self, boot_id: &str, report: &serde_json::Value) -> StoreResult<()>;
    /// How commits reach the disk: SQLite's `synchronous`, Postgres's
    /// `synchronous_commit`.
    fn synchronous(&self) -> StoreResult<String>;
    /// Logs whose epoch or head changed since the last call, with their new
    /// values (SQLite; on Postgres heads move as events are published, see
    /// `follow`).
    fn take_changed(&mut self) -> Vec<((Scope, String), LogInfo)> {
        Vec::new()
    }
    /// A scope log's epoch and committed head as this writer knows them,
    /// without a query: on SQLite, whose writer is the store's only one;
    /// `None` on Postgres, where other nodes commit too and heads move as
    /// events are published (see `follow`).
    fn cached_log_info(&self, _scope: Scope, _scope_id: &str) -> Option<LogInfo> {
        None
    }
}

/// The writer of this process.
// One per process, behind its mutex: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Db {
    /// The embedded file (or `:memory:`).
    Sqlite(SqliteDb),
    /// A Postgres database, possibly shared with other nodes (shared with
    /// the [`crate::log::Log`] too, which appends without this writer's
    /// lock).
    Pg(Arc<PgDb>),
}

impl Deref for Db {
    type Target = dyn Backend;
    fn deref(&self) -> &(dyn Backend + 'static) {
        match self {
            Db::Sqlite(d) => d,
            Db::Pg(d) => d,
        }
    }
}

impl DerefMut for Db {
    fn deref_mut(&mut self) -> &mut (dyn Backend + 'static) {
        match self {
            Db::Sqlite(d) => d,
            Db::Pg(d) => d,
        }
    }
}

/// One consistent read.
pub enum Snapshot<'c> {
    /// A read transaction on a SQLite connection.
    Sqlite(SqliteSnapshot<'c>),
    /// A REPEATABLE READ transaction on a pooled Postgres connection.
    Pg(Box<PgSnapshot>),
}

impl<'c> Deref for Snapshot<'c> {
    type Target = dyn View + 'c;
    fn deref(&self) -> &(dyn View + 'c) {
        match self {
            Snapshot::Sqlite(s) => s,
            Snapshot::Pg(s) => &**s,
        }
    }
}
