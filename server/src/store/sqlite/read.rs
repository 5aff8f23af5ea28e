//! Read-only queries. They run on any connection: the writer's (under its
//! lock) or a pooled reader's. A [`SqliteSnapshot`] is one read transaction, so
//! everything read through it describes the same committed state.

use replay_core::protocol::{Scope, TasksSnapshot};
use rusqlite::{params, CachedStatement, Connection, OptionalExtension, Params, Row, Transaction};

use crate::store::rows::{tasks_snapshot, EventRow, PageBuilder};
use crate::store::{
    scope_from_str, Budget, LogInfo, Page, ProcessLog, ProcessRow, ProcessState, Reads,
    StoreResult, View,
};

/// One read transaction: a consistent view of the store (WAL readers see
/// the last commit before their first read, whatever the writer does next).
pub struct SqliteSnapshot<'c> {
    tx: Transaction<'c>,
}

impl<'c> SqliteSnapshot<'c> {
    /// Begins a read transaction and pins its view at once, so that the view
    /// is the one current when `begin` returns (callers rely on that order).
    pub fn begin(conn: &'c Connection) -> StoreResult<SqliteSnapshot<'c>> {
        let tx = conn.unchecked_transaction()?;
        // A deferred transaction takes its view at its first read.
        tx.query_row("SELECT COUNT(*) FROM meta", [], |_| Ok(()))?;
        Ok(SqliteSnapshot { tx })
    }
}

impl View for SqliteSnapshot<'_> {
    /// A scope log's epoch and head as of this view.
    fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        Ok(self
            .tx
            .prepare_cached("SELECT epoch, head FROM logs WHERE scope = ?1 AND scope_id = ?2")?
            .query_row(params![scope.as_str(), scope_id], |r| {
                Ok(LogInfo {
                    epoch: r.get(0)?,
                    head: r.get(1)?,
                })
            })
            .optional()?)
    }

    /// The global list's epoch and highest row id as of this view.
    fn global_info(&self) -> StoreResult<LogInfo> {
        let epoch: String =
            self.tx
                .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
                    r.get(0)
                })?;
        Ok(LogInfo {
            epoch,
            head: self
                .tx
                .query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))?,
        })
    }
}

impl SqlConn for SqliteSnapshot<'_> {
    fn conn(&self) -> &Connection {
        &self.tx
    }
}

/// Event rows of `st` (columns id, seq, type, ts, data; `log` says whose
/// log each is) into a page within `budget`; the query must ask for
/// [`Budget::query_limit`] rows.
fn envelopes_within(
    st: &mut CachedStatement<'_>,
    params: impl Params,
    log: impl Fn(&Row<'_>) -> rusqlite::Result<(Scope, String)>,
    budget: Budget,
) -> StoreResult<Page> {
    let mut rows = st.query(params)?;
    let mut page = PageBuilder::new(budget);
    while let Some(r) = rows.next()? {
        let (scope, scope_id) = log(r)?;
        let row = EventRow {
            id: r.get(0)?,
            seq: r.get(1)?,
            ty: r.get(2)?,
            ts: r.get(3)?,
            data: r.get(4)?,
            scope,
            scope_id,
        };
        if !page.offer(row)? {
            break;
        }
    }
    Ok(page.finish())
}

/// What runs SQLite's queries: the writer's connection ([`super::SqliteDb`],
/// under its lock) or a read transaction ([`SqliteSnapshot`]).
pub trait SqlConn {
    /// The connection the queries run on.
    fn conn(&self) -> &Connection;
}

/// The read-only queries, on any SQLite connection.
impl<T: SqlConn> Reads for T {
    /// Durable events of one log with `seq > after`, ascending, within `budget`.
    fn page_within(
        &self,
        scope: Scope,
        scope_id: &str,
        after: u64,
        budget: Budget,
    ) -> StoreResult<Page> {
        let mut st = self.conn().prepare_cached(
            "SELECT id, seq, type, ts, data FROM events
         WHERE scope = ?1 AND scope_id = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
        )?;
        let params = params![scope.as_str(), scope_id, after, budget.query_limit()];
        envelopes_within(
            &mut st,
            params,
            |_| Ok((scope, scope_id.to_owned())),
            budget,
        )
    }

    /// Durable events of every scope with row `id > after_id`, ascending,
    /// within `budget`.
    fn global_page_within(&self, after_id: u64, budget: Budget) -> StoreResult<Page> {
        let mut st = self.conn().prepare_cached(
            "SELECT id, seq, type, ts, data, scope, scope_id FROM events
         WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        envelopes_within(
            &mut st,
            params![after_id, budget.query_limit()],
            |r| Ok((scope_from_str(&r.get::<_, String>(5)?), r.get(6)?)),
            budget,
        )
    }

    /// Bytes of event data in one log (what a fold of it has to load).
    /// `octet_length` counts bytes, with no text decoded into memory.
    fn log_bytes(&self, scope: Scope, scope_id: &str) -> StoreResult<u64> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT COALESCE(SUM(octet_length(data)), 0) FROM events
         WHERE scope = ?1 AND scope_id = ?2",
            )?
            .query_row(params![scope.as_str(), scope_id], |r| r.get(0))?)
    }

    /// The session's task state.
    fn tasks(&self, session_id: &str) -> StoreResult<TasksSnapshot> {
        let conn = self.conn();
        let session = conn
            .query_row(
                "SELECT tasks_version, background_wait FROM sessions WHERE session_id = ?1",
                [session_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let mut st =
            conn.prepare_cached("SELECT json FROM tasks WHERE session_id = ?1 ORDER BY ord")?;
        let tasks = st
            .query_map([session_id], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        tasks_snapshot(session, tasks)
    }

    /// Every runtime-managed process.
    fn processes(&self) -> StoreResult<Vec<ProcessRow>> {
        let mut st = self.conn().prepare(
            "SELECT process_id, command, state, exit_code, length(CAST(log AS BLOB))
             FROM processes ORDER BY rowid",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get::<_, String>(2)?,
                r.get(3)?,
                r.get(4)?,
            ))
        })?;
        rows.map(|row| {
            let (process_id, command, state, exit_code, log_bytes) = row?;
            Ok(ProcessRow {
                process_id,
                command,
                state: ProcessState::parse(&state)?,
                exit_code,
                log_bytes,
            })
        })
        .collect()
    }

    /// A process's whole log and its state.
    fn process_log(&self, process_id: &str) -> StoreResult<Option<ProcessLog>> {
        let found: Option<(String, String)> = self
            .conn()
            .query_row(
                "SELECT log, state FROM processes WHERE process_id = ?1",
                [process_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        found
            .map(|(log, state)| {
                Ok(ProcessLog {
                    log,
                    state: ProcessState::parse(&state)?,
                })
            })
            .transpose()
    }

    /// Number of sessions and of durable events.
    fn counts(&self) -> StoreResult<(u64, u64)> {
        let conn = self.conn();
        let sessions = conn.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))?;
        let events = conn.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?;
        Ok((sessions, events))
    }

    /// Number of boots recorded in this database.
    fn boot_count(&self) -> StoreResult<u64> {
        let conn = self.conn();
        Ok(conn.query_row("SELECT COUNT(*) FROM boots", [], |r| r.get(0))?)
    }
}
