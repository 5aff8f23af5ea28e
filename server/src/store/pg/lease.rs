//! Leases on Postgres (docs/cluster.md): a node renews what it
//! runs (turns, processes, background tasks) on a connection of its own,
//! and fails, once each, the processes and tasks of nodes whose lease ran
//! out (turns are ended by `recovery::end_orphans`).

use std::time::Duration;

use deadpool_postgres::Transaction;
use replay_core::protocol::{
    Envelope, Event, Scope, Task, TaskState, WithReason, REASON_WORKER_RESTART,
};

use super::append::stage;
use super::{block, read, PgDb};
use crate::store::rows::background_wait;
use crate::store::{ExpiredTasks, StoreResult};
use crate::util::now_rfc3339;

impl PgDb {
    /// Extends the lease of every open turn, running process and open
    /// background task this node's boot owns, but lets the leases of
    /// `abandoned` turns run out now (see `Worker::abandon`). Runs on a
    /// connection of its own (`c`), so it never waits for the pool.
    pub async fn renew_leases(
        c: &tokio_postgres::Client,
        owner: &str,
        lease: Duration,
        abandoned: &[String],
    ) -> StoreResult<()> {
        let secs = lease.as_secs_f64();
        c.execute(
            "UPDATE turns SET lease_until = now() - interval '1 millisecond'
             WHERE owner = $1 AND state IN ('queued', 'running') AND turn_id = ANY($2)",
            &[&owner, &abandoned],
        )
        .await?;
        c.execute(
            "UPDATE turns SET lease_until = now() + make_interval(secs => $2)
             WHERE owner = $1 AND state IN ('queued', 'running', 'failing')
               AND NOT (turn_id = ANY($3))",
            &[&owner, &secs, &abandoned],
        )
        .await?;
        c.execute(
            "UPDATE processes SET lease_until = now() + make_interval(secs => $2)
             WHERE owner = $1 AND state = 'running'",
            &[&owner, &secs],
        )
        .await?;
        c.execute(
            "UPDATE tasks SET lease_until = now() + make_interval(secs => $2)
             WHERE owner = $1 AND open",
            &[&owner, &secs],
        )
        .await?;
        Ok(())
    }

    /// Fails, once each, the running processes whose lease ran out (their
    /// node is gone): each claim and its `process.failed` are one
    /// transaction, and a claim skips rows another node has locked.
    pub fn fail_expired_processes(&self) -> StoreResult<Vec<Envelope>> {
        let owner = self.owner();
        let failed = Event::ProcessFailed(WithReason {
            reason: REASON_WORKER_RESTART.into(),
        });
        block(async {
            let mut out = Vec::new();
            loop {
                let mut tx = self.begin().await?;
                let staged = async {
                    let row = tx
                        .query_opt(
                            "UPDATE processes SET owner = $1 WHERE process_id =
                               (SELECT process_id FROM processes
                                 WHERE state = 'running' AND lease_until < now()
                                 ORDER BY row_no LIMIT 1 FOR UPDATE SKIP LOCKED)
                             RETURNING process_id",
                            &[&&*owner],
                        )
                        .await?;
                    let Some(row) = row else { return Ok(None) };
                    let process_id: String = row.get(0);
                    let holder = self.holder(&owner);
                    Ok(Some(
                        stage(&mut tx, Scope::Process, &process_id, &failed, holder).await?,
                    ))
                }
                .await;
                match staged {
                    Ok(Some(staged)) => out.extend(tx.commit(vec![staged]).await?),
                    Ok(None) => {
                        tx.rollback().await;
                        return Ok(out);
                    }
                    Err(e) => {
                        tx.rollback().await;
                        return Err(e);
                    }
                }
            }
        })
    }

    /// Fails, once each, the open background tasks whose lease ran out:
    /// per session, in one transaction under its row lock, the expired
    /// tasks become `failed` (`worker_restart`), `background_wait` drops
    /// them (and is cleared when nothing is left to wait for), and the
    /// version moves. Returns each session's new snapshot with the tasks
    /// failed.
    pub fn fail_expired_tasks(&self) -> StoreResult<Vec<ExpiredTasks>> {
        block(async {
            let mut c = self.pool().get().await?;
            let mut out = Vec::new();
            loop {
                let tx = c.transaction().await?;
                let row = tx
                    .query_opt(
                        "SELECT session_id FROM tasks WHERE open AND lease_until < now()
                         LIMIT 1 FOR UPDATE SKIP LOCKED",
                        &[],
                    )
                    .await?;
                let Some(row) = row else { return Ok(out) };
                let session_id: String = row.get(0);
                let failed = fail_tasks_in(&tx, &session_id).await?;
                tx.commit().await?;
                let snapshot = read::tasks(&c, &session_id).await?;
                out.push(ExpiredTasks {
                    session_id,
                    snapshot,
                    failed,
                });
            }
        })
    }
}

/// Fails the expired open tasks of `session_id` (see
/// [`PgDb::fail_expired_tasks`]); returns their ids.
async fn fail_tasks_in(tx: &Transaction<'_>, session_id: &str) -> StoreResult<Vec<String>> {
    let bg: Option<String> = tx
        .query_one(
            "SELECT background_wait FROM sessions WHERE session_id = $1 FOR UPDATE",
            &[&session_id],
        )
        .await?
        .get(0);
    let rows = tx
        .query(
            "SELECT task_id, json FROM tasks
             WHERE session_id = $1 AND open AND lease_until < now()",
            &[&session_id],
        )
        .await?;
    let now = now_rfc3339();
    let mut failed = Vec::new();
    for r in &rows {
        let mut task: Task = serde_json::from_str(r.get(1))?;
        task.state = TaskState::Failed;
        task.ended_at = Some(now.clone());
        task.detail = Some(REASON_WORKER_RESTART.into());
        tx.execute(
            "UPDATE tasks SET json = $2, open = false WHERE task_id = $1",
            &[&task.task_id, &serde_json::to_string(&task)?],
        )
        .await?;
        failed.push(task.task_id);
    }
    if failed.is_empty() {
        return Ok(failed); // another node failed them first
    }
    let mut wait = background_wait(bg.as_deref())?;
    if let Some(w) = wait.as_mut() {
        w.task_ids.retain(|t| !failed.contains(t));
    }
    let wait = wait.filter(|w| !w.task_ids.is_empty());
    tx.execute(
        "UPDATE sessions SET tasks_version = tasks_version + 1, background_wait = $2
         WHERE session_id = $1",
        &[&session_id, &serde_json::to_string(&wait)?],
    )
    .await?;
    Ok(failed)
}
