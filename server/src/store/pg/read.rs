//! Read-only queries on Postgres (the store's `Reads` and `View` over them
//! are in `backend.rs`). A [`PgSnapshot`] is one REPEATABLE READ
//! transaction, so what is read through it describes one committed state.

use deadpool_postgres::{Object, Pool};
use futures_util::{pin_mut, TryStreamExt};
use replay_core::protocol::{Envelope, Scope, TasksSnapshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::{big, unsigned};
use crate::store::rows::{tasks_snapshot, EventRow, PageBuilder};
use crate::store::{
    scope_from_str, Budget, LogInfo, Page, ProcessLog, ProcessRow, ProcessState, StoreResult,
};

/// One read transaction on a pooled connection; dropped, it rolls back
/// and then gives the connection back (the pool sends nothing at checkout).
pub struct PgSnapshot {
    client: Option<Object>,
}

impl Drop for PgSnapshot {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            super::runtime().spawn(async move {
                if client.batch_execute("ROLLBACK").await.is_err() {
                    drop(Object::take(client)); // not given back half-open
                }
            });
        }
    }
}

impl PgSnapshot {
    /// Begins a read transaction and pins its view at once.
    pub async fn begin(pool: &Pool) -> StoreResult<PgSnapshot> {
        PgSnapshot::pin(pool.get().await?).await
    }

    /// Begins a read transaction on a connection already taken from the pool.
    pub async fn pin(client: Object) -> StoreResult<PgSnapshot> {
        // Owned first: if this fails half-way, the drop still rolls back.
        let snap = PgSnapshot {
            client: Some(client),
        };
        snap.client()
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1")
            .await?;
        Ok(snap)
    }

    /// The connection, inside the transaction.
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("a snapshot not dropped")
    }
}

/// A scope log's epoch and head.
pub async fn log_info(c: &Client, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
    let row = c
        .query_opt(
            "SELECT epoch, head FROM logs WHERE scope = $1 AND scope_id = $2",
            &[&scope.as_str(), &scope_id],
        )
        .await?;
    Ok(row.map(|r| LogInfo {
        epoch: r.get(0),
        head: unsigned(r.get(1)),
    }))
}

/// The global list's epoch and highest id.
pub async fn global_info(c: &Client) -> StoreResult<LogInfo> {
    let r = c
        .query_one(
            "SELECT (SELECT value FROM meta WHERE key = 'epoch'),
                    (SELECT COALESCE(MAX(id), 0) FROM events)",
            &[],
        )
        .await?;
    Ok(LogInfo {
        epoch: r.get(0),
        head: unsigned(r.get(1)),
    })
}

/// An events row of `COLUMNS`.
fn event_row(r: &Row) -> EventRow {
    EventRow {
        id: unsigned(r.get(0)),
        seq: unsigned(r.get(1)),
        ty: r.get(2),
        ts: r.get(3),
        data: r.get(4),
        scope: scope_from_str(r.get(5)),
        scope_id: r.get(6),
    }
}

const COLUMNS: &str = "id, seq, type, ts, data, scope, scope_id";

/// Rows `COLUMNS` of `sql` into a page within `budget` (the query asks
/// for [`Budget::query_limit`] rows).
async fn within(
    c: &Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    budget: Budget,
) -> StoreResult<Page> {
    let rows = c.query_raw(sql, params.iter().copied()).await?;
    pin_mut!(rows);
    let mut page = PageBuilder::new(budget);
    while let Some(r) = rows.try_next().await? {
        if !page.offer(event_row(&r))? {
            break;
        }
    }
    Ok(page.finish())
}

/// Events of one log with `seq > after`, ascending, within `budget`.
pub async fn page_within(
    c: &Client,
    scope: Scope,
    scope_id: &str,
    after: u64,
    budget: Budget,
) -> StoreResult<Page> {
    let sql = format!(
        "SELECT {COLUMNS} FROM events WHERE scope = $1 AND scope_id = $2 AND seq > $3
         ORDER BY seq LIMIT $4"
    );
    let limit = budget.query_limit();
    let params: [&(dyn ToSql + Sync); 4] = [&scope.as_str(), &scope_id, &big(after), &limit];
    within(c, &sql, &params, budget).await
}

/// Events of every scope with `id > after_id`, ascending, within `budget`.
pub async fn global_page_within(c: &Client, after_id: u64, budget: Budget) -> StoreResult<Page> {
    let sql = format!("SELECT {COLUMNS} FROM events WHERE id > $1 ORDER BY id LIMIT $2");
    within(c, &sql, &[&big(after_id), &budget.query_limit()], budget).await
}

/// Events of every scope with `after < id <= upto`, ascending, at most
/// `limit`, each with its log's epoch (what a node publishes and the heads it
/// moves to).
pub async fn events_after(
    c: &deadpool_postgres::ClientWrapper,
    after: u64,
    upto: u64,
    limit: usize,
) -> StoreResult<Vec<(Envelope, String)>> {
    // Prepared once per connection: every node runs it for every group.
    let stmt = c
        .prepare_cached(
            "SELECT e.id, e.seq, e.type, e.ts, e.data, e.scope, e.scope_id, l.epoch
             FROM events e JOIN logs l ON l.scope = e.scope AND l.scope_id = e.scope_id
             WHERE e.id > $1 AND e.id <= $2 ORDER BY e.id LIMIT $3",
        )
        .await?;
    let rows = c
        .query(&stmt, &[&big(after), &big(upto), &big(limit as u64)])
        .await?;
    rows.iter()
        .map(|r| Ok((event_row(r).into_envelope()?, r.get(7))))
        .collect()
}

/// Bytes of event data in one log.
pub async fn log_bytes(c: &Client, scope: Scope, scope_id: &str) -> StoreResult<u64> {
    let r = c
        .query_one(
            "SELECT COALESCE(SUM(octet_length(data)), 0)::BIGINT FROM events
             WHERE scope = $1 AND scope_id = $2",
            &[&scope.as_str(), &scope_id],
        )
        .await?;
    Ok(unsigned(r.get(0)))
}

/// The session's task state.
pub async fn tasks(c: &Client, session_id: &str) -> StoreResult<TasksSnapshot> {
    let session = c
        .query_opt(
            "SELECT tasks_version, background_wait FROM sessions WHERE session_id = $1",
            &[&session_id],
        )
        .await?
        .map(|r| (unsigned(r.get(0)), r.get(1)));
    let rows = c
        .query(
            "SELECT json FROM tasks WHERE session_id = $1 ORDER BY ord",
            &[&session_id],
        )
        .await?;
    tasks_snapshot(session, rows.iter().map(|r| r.get::<_, &str>(0)))
}

/// Every runtime-managed process.
pub async fn processes(c: &Client) -> StoreResult<Vec<ProcessRow>> {
    let rows = c
        .query(
            "SELECT process_id, command, state, exit_code, octet_length(log)::BIGINT
             FROM processes ORDER BY row_no",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(ProcessRow {
                process_id: r.get(0),
                command: r.get(1),
                state: ProcessState::parse(r.get(2))?,
                exit_code: r.get(3),
                log_bytes: unsigned(r.get(4)),
            })
        })
        .collect()
}

/// A process's whole log and its state.
pub async fn process_log(c: &Client, process_id: &str) -> StoreResult<Option<ProcessLog>> {
    let row = c
        .query_opt(
            "SELECT log, state FROM processes WHERE process_id = $1",
            &[&process_id],
        )
        .await?;
    row.map(|r| {
        Ok(ProcessLog {
            log: r.get(0),
            state: ProcessState::parse(r.get(1))?,
        })
    })
    .transpose()
}

/// Number of sessions and of events.
pub async fn counts(c: &Client) -> StoreResult<(u64, u64)> {
    let r = c
        .query_one(
            "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM events)",
            &[],
        )
        .await?;
    Ok((unsigned(r.get(0)), unsigned(r.get(1))))
}

/// Number of boots recorded (of every node).
pub async fn boot_count(c: &Client) -> StoreResult<u64> {
    let r = c.query_one("SELECT COUNT(*) FROM boots", &[]).await?;
    Ok(unsigned(r.get(0)))
}
