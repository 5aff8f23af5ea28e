//! The two backends behind one interface: [`Db`] (the writer), [`Snapshot`]
//! (one consistent read) and [`Reads`] (the queries both answer). Each
//! method picks SQLite's or Postgres's implementation; neither knows of the
//! other.

use replay_core::protocol::{BackgroundWait, Envelope, Event, Scope, Task, TasksSnapshot};

use super::pg::{self, read as pgr, PgDb, PgSnapshot};
use super::sqlite::SqlReads;
use super::{
    Budget, LogInfo, OpenQuestion, OpenTool, OpenTurn, Page, ProcessLog, ProcessRow, QuestionState,
    SqliteDb, SqliteSnapshot, StoreResult, TurnState,
};

/// The writer of this process.
// One per process, behind its mutex: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Db {
    /// The embedded file (or `:memory:`).
    Sqlite(SqliteDb),
    /// A Postgres database, possibly shared with other nodes (shared with
    /// the [`crate::log::Log`] too, which appends without this writer's
    /// lock).
    Pg(std::sync::Arc<PgDb>),
}

/// One consistent read.
pub enum Snapshot<'c> {
    /// A read transaction on a SQLite connection.
    Sqlite(SqliteSnapshot<'c>),
    /// A REPEATABLE READ transaction on a pooled Postgres connection.
    Pg(Box<PgSnapshot>),
}

impl Db {
    /// The global list's epoch and, on SQLite, its committed head (on
    /// Postgres the head is what the node has published: see `follow`).
    pub fn global_info(&self) -> LogInfo {
        match self {
            Db::Sqlite(d) => d.global_info(),
            Db::Pg(d) => LogInfo {
                epoch: d.global_epoch().to_owned(),
                head: 0,
            },
        }
    }

    /// A scope log's committed epoch and head, if the log exists (a failed
    /// lookup is an error, never "no such log").
    pub fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        match self {
            Db::Sqlite(d) => Ok(d.log_info(scope, scope_id)),
            Db::Pg(d) => d.log_info(scope, scope_id),
        }
    }

    /// True when other processes may write this store too (Postgres).
    pub fn shared(&self) -> bool {
        matches!(self, Db::Pg(_))
    }

    /// True when the session exists; a failed lookup is an error, not "no
    /// such session" (a client told `404` during an outage would give the
    /// session up).
    pub fn session_exists(&self, session_id: &str) -> StoreResult<bool> {
        Ok(self.log_info(Scope::Session, session_id)?.is_some())
    }

    /// Allocates the next number of a named counter (ids survive restarts).
    pub fn next_number(&mut self, name: &str) -> StoreResult<u64> {
        match self {
            Db::Sqlite(d) => d.next_number(name),
            Db::Pg(d) => d.next_number(name),
        }
    }

    /// Appends one durable event (its log is created if needed).
    pub fn append(&mut self, scope: Scope, scope_id: &str, event: &Event) -> StoreResult<Envelope> {
        match self {
            Db::Sqlite(d) => d.append(scope, scope_id, event),
            Db::Pg(d) => d.append(scope, scope_id, event),
        }
    }

    /// Registers a session row.
    pub fn insert_session(&mut self, session_id: &str, title: &str) -> StoreResult<()> {
        match self {
            Db::Sqlite(d) => d.insert_session(session_id, title),
            Db::Pg(d) => d.insert_session(session_id, title),
        }
    }

    /// The turn a message started, if that `message_id` was seen before.
    pub fn turn_for_message(
        &self,
        session_id: &str,
        message_id: &str,
    ) -> StoreResult<Option<String>> {
        match self {
            Db::Sqlite(d) => d.turn_for_message(session_id, message_id),
            Db::Pg(d) => d.turn_for_message(session_id, message_id),
        }
    }

    /// A queued turn and the user's `message.committed`, in one transaction.
    pub fn accept_message(
        &mut self,
        session_id: &str,
        turn_id: &str,
        message_id: &str,
        text: &str,
    ) -> StoreResult<Envelope> {
        match self {
            Db::Sqlite(d) => d.accept_message(session_id, turn_id, message_id, text),
            Db::Pg(d) => d.accept_message(session_id, turn_id, message_id, text),
        }
    }

    /// State of a turn.
    pub fn turn_state(&self, turn_id: &str) -> StoreResult<Option<TurnState>> {
        match self {
            Db::Sqlite(d) => d.turn_state(turn_id),
            Db::Pg(d) => d.turn_state(turn_id),
        }
    }

    /// Turns to end at recovery: every open one on SQLite; on Postgres those
    /// whose lease ran out (their node is gone).
    pub fn open_turns(&self) -> StoreResult<Vec<OpenTurn>> {
        match self {
            Db::Sqlite(d) => d.open_turns(),
            Db::Pg(d) => d.open_turns(),
        }
    }

    /// Questions to decline at recovery (as [`Db::open_turns`]).
    pub fn open_questions(&self) -> StoreResult<Vec<OpenQuestion>> {
        match self {
            Db::Sqlite(d) => d.open_questions(),
            Db::Pg(d) => d.open_questions(),
        }
    }

    /// State of a persisted question, with its session.
    pub fn question_state(
        &self,
        question_id: &str,
    ) -> StoreResult<Option<(String, QuestionState)>> {
        match self {
            Db::Sqlite(d) => d.question_state(question_id),
            Db::Pg(d) => d.question_state(question_id),
        }
    }

    /// Tool calls to fail at recovery (as [`Db::open_turns`]).
    pub fn open_tools(&self) -> StoreResult<Vec<OpenTool>> {
        match self {
            Db::Sqlite(d) => d.open_tools(),
            Db::Pg(d) => d.open_tools(),
        }
    }

    /// Appends process output; returns the byte offset it starts at.
    pub fn append_process_log(&mut self, process_id: &str, text: &str) -> StoreResult<u64> {
        match self {
            Db::Sqlite(d) => d.append_process_log(process_id, text),
            Db::Pg(d) => d.append_process_log(process_id, text),
        }
    }

    /// Replaces the session's task state; returns the new snapshot.
    pub fn put_tasks(
        &mut self,
        session_id: &str,
        tasks: &[Task],
        background_wait: Option<&BackgroundWait>,
    ) -> StoreResult<TasksSnapshot> {
        match self {
            Db::Sqlite(d) => d.put_tasks(session_id, tasks, background_wait),
            Db::Pg(d) => d.put_tasks(session_id, tasks, background_wait),
        }
    }

    /// Sessions with a queued or running task.
    pub fn sessions_with_open_tasks(&self) -> StoreResult<Vec<String>> {
        match self {
            Db::Sqlite(d) => d.sessions_with_open_tasks(),
            Db::Pg(d) => d.sessions_with_open_tasks(),
        }
    }

    /// Records a new boot (on Postgres: the owner of the turns accepted from now).
    pub fn insert_boot(&mut self, boot_id: &str) -> StoreResult<()> {
        match self {
            Db::Sqlite(d) => d.insert_boot(boot_id),
            Db::Pg(d) => {
                d.set_owner(boot_id);
                d.insert_boot(boot_id)
            }
        }
    }

    /// Stores what startup recovery did in this boot.
    pub fn set_recovery(&mut self, boot_id: &str, report: &serde_json::Value) -> StoreResult<()> {
        match self {
            Db::Sqlite(d) => d.set_recovery(boot_id, report),
            Db::Pg(d) => d.set_recovery(boot_id, report),
        }
    }

    /// How commits reach the disk: SQLite's `synchronous`, Postgres's
    /// `synchronous_commit`.
    pub fn synchronous(&self) -> StoreResult<String> {
        match self {
            Db::Sqlite(d) => d.synchronous().map(str::to_owned),
            Db::Pg(d) => d.synchronous(),
        }
    }

    /// Logs whose head changed since the last call (SQLite; on Postgres
    /// heads move as events are published, see `follow`).
    pub fn take_changed(&mut self) -> Vec<((Scope, String), LogInfo)> {
        match self {
            Db::Sqlite(d) => d.take_changed(),
            Db::Pg(_) => Vec::new(),
        }
    }
}

impl Snapshot<'_> {
    /// A scope log's epoch and head as of this view.
    pub fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        match self {
            Snapshot::Sqlite(s) => s.log_info(scope, scope_id),
            Snapshot::Pg(s) => pg::block(pgr::log_info(s.client(), scope, scope_id)),
        }
    }

    /// The global list's epoch and highest id as of this view.
    pub fn global_info(&self) -> StoreResult<LogInfo> {
        match self {
            Snapshot::Sqlite(s) => s.global_info(),
            Snapshot::Pg(s) => pg::block(pgr::global_info(s.client())),
        }
    }
}

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
    /// Bytes of event data in one log.
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

/// Implements [`Reads`] for a type by naming how each backend answers:
/// `$sql` yields a `SqlReads`, `$pg` runs a `pg::read` function `f(client, args…)`.
macro_rules! reads {
    ($ty:ty, |$s:ident| $sql:expr, |$p:ident, $f:ident| $pg:expr) => {
        impl Reads for $ty {
            fn page_within(
                &self,
                scope: Scope,
                id: &str,
                after: u64,
                budget: Budget,
            ) -> StoreResult<Page> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.page_within(scope, id, after, budget);
                }
                let $p = self;
                let $f = |c| pgr::page_within(c, scope, id, after, budget);
                $pg
            }
            fn global_page_within(&self, after_id: u64, budget: Budget) -> StoreResult<Page> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.global_page_within(after_id, budget);
                }
                let $p = self;
                let $f = |c| pgr::global_page_within(c, after_id, budget);
                $pg
            }
            fn log_bytes(&self, scope: Scope, id: &str) -> StoreResult<u64> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.log_bytes(scope, id);
                }
                let $p = self;
                let $f = |c| pgr::log_bytes(c, scope, id);
                $pg
            }
            fn tasks(&self, session_id: &str) -> StoreResult<TasksSnapshot> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.tasks(session_id);
                }
                let $p = self;
                let $f = |c| pgr::tasks(c, session_id);
                $pg
            }
            fn processes(&self) -> StoreResult<Vec<ProcessRow>> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.processes();
                }
                let $p = self;
                let $f = pgr::processes;
                $pg
            }
            fn process_log(&self, process_id: &str) -> StoreResult<Option<ProcessLog>> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.process_log(process_id);
                }
                let $p = self;
                let $f = |c| pgr::process_log(c, process_id);
                $pg
            }
            fn counts(&self) -> StoreResult<(u64, u64)> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.counts();
                }
                let $p = self;
                let $f = pgr::counts;
                $pg
            }
            fn boot_count(&self) -> StoreResult<u64> {
                let $s = self;
                if let Some(r) = $sql {
                    return r.boot_count();
                }
                let $p = self;
                let $f = pgr::boot_count;
                $pg
            }
        }
    };
}

reads!(
    Db,
    |d| match d {
        Db::Sqlite(d) => Some(d),
        Db::Pg(_) => None,
    },
    |d, f| match d {
        Db::Pg(d) => {
            let snap = pg::block(PgSnapshot::begin(d.pool()))?;
            pg::block(f(snap.client()))
        }
        Db::Sqlite(_) => unreachable!("answered by SQLite above"),
    }
);

reads!(
    Snapshot<'_>,
    |s| match s {
        Snapshot::Sqlite(s) => Some(s),
        Snapshot::Pg(_) => None,
    },
    |s, f| match s {
        Snapshot::Pg(s) => pg::block(f(s.client())),
        Snapshot::Sqlite(_) => unreachable!("answered by SQLite above"),
    }
);
