//! The Postgres writer: appends and projection updates, each in one
//! transaction (see the module docs of `pg` for how seqs are assigned).

use std::time::Duration;

use deadpool_postgres::{Object, Pool, Transaction};
use replay_core::protocol::{
    BackgroundWait, Envelope, Event, MessageCommitted, Role, Scope, Task, TaskState, TasksSnapshot,
};

use super::{big, block, read, unsigned, CHANNEL};
use crate::store::{LogInfo, OpenQuestion, OpenTool, OpenTurn, StoreError, StoreResult};
use crate::util::{now_rfc3339, random_id};

/// The store of one node: a pool on the shared database.
pub struct PgDb {
    pool: Pool,
    /// The boot that owns the turns this node accepts (their lease holder).
    owner: String,
    /// How long a turn's lease lasts unless renewed.
    lease: Duration,
    global_epoch: String,
}

impl PgDb {
    /// A store on `pool` whose turns are leased for `lease`.
    pub async fn open(pool: Pool, lease: Duration) -> StoreResult<PgDb> {
        let client = pool.get().await?;
        client
            .execute(
                "INSERT INTO meta (key, value) VALUES ('epoch', $1) ON CONFLICT DO NOTHING",
                &[&random_id("e")],
            )
            .await?;
        let global_epoch = read::global_info(&client).await?.epoch;
        drop(client);
        Ok(PgDb {
            pool,
            owner: String::new(),
            lease,
            global_epoch,
        })
    }

    /// The pool (readers and the follower use it too).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Sets the boot that leases the turns accepted from now on.
    pub fn set_owner(&mut self, boot_id: &str) {
        boot_id.clone_into(&mut self.owner);
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// What this node's writes are leased as.
    fn holder(&self) -> Holder<'_> {
        Holder {
            owner: &self.owner,
            lease_secs: self.lease.as_secs_f64(),
        }
    }

    fn client(&self) -> StoreResult<Object> {
        Ok(block(self.pool.get())?)
    }

    /// The global list's epoch (its head is what this node has published).
    pub fn global_epoch(&self) -> &str {
        &self.global_epoch
    }

    /// A scope log's committed epoch and head, if the log exists.
    pub fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        let c = self.client()?;
        block(read::log_info(&c, scope, scope_id))
    }

    /// Allocates the next number of a named counter.
    pub fn next_number(&self, name: &str) -> StoreResult<u64> {
        let c = self.client()?;
        let r = block(c.query_one(
            "INSERT INTO counters (name, value) VALUES ($1, 1)
             ON CONFLICT (name) DO UPDATE SET value = counters.value + 1 RETURNING value",
            &[&name],
        ))?;
        Ok(unsigned(r.get(0)))
    }

    /// Appends one event (creating its log if needed) in one transaction.
    pub fn append(&self, scope: Scope, scope_id: &str, event: &Event) -> StoreResult<Envelope> {
        block(async {
            let mut c = self.pool.get().await?;
            let tx = c.transaction().await?;
            let env = append_in(&tx, scope, scope_id, event, self.holder()).await?;
            tx.commit().await?;
            Ok(env)
        })
    }

    /// Registers a session row.
    pub fn insert_session(&self, session_id: &str, title: &str) -> StoreResult<()> {
        let c = self.client()?;
        block(c.execute(
            "INSERT INTO sessions (session_id, title, created_at) VALUES ($1, $2, $3)",
            &[&session_id, &title, &now_rfc3339()],
        ))?;
        Ok(())
    }

    /// The turn a message started, if that `message_id` was seen before.
    pub fn turn_for_message(
        &self,
        session_id: &str,
        message_id: &str,
    ) -> StoreResult<Option<String>> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT turn_id FROM turns WHERE session_id = $1 AND message_id = $2",
            &[&session_id, &message_id],
        ))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// A queued turn leased to this node and the user's `message.committed`,
    /// in one transaction.
    pub fn accept_message(
        &self,
        session_id: &str,
        turn_id: &str,
        message_id: &str,
        text: &str,
    ) -> StoreResult<Envelope> {
        block(async {
            let mut c = self.pool.get().await?;
            let tx = c.transaction().await?;
            tx.execute(
                "INSERT INTO turns (turn_id, session_id, message_id, text, state, owner, lease_until)
                 VALUES ($1, $2, $3, $4, 'queued', $5, now() + make_interval(secs => $6))",
                &[&turn_id, &session_id, &message_id, &text, &self.owner, &self.lease.as_secs_f64()],
            )
            .await?;
            let event = Event::MessageCommitted(MessageCommitted {
                message_id: message_id.to_owned(),
                turn_id: turn_id.to_owned(),
                role: Role::User,
                text: text.to_owned(),
            });
            let env = append_in(&tx, Scope::Session, session_id, &event, self.holder()).await?;
            tx.commit().await?;
            Ok(env)
        })
    }

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
        let failed = Event::ProcessFailed(replay_core::protocol::WithReason {
            reason: replay_core::protocol::REASON_WORKER_RESTART.into(),
        });
        block(async {
            let mut c = self.pool.get().await?;
            let mut out = Vec::new();
            loop {
                let tx = c.transaction().await?;
                let row = tx
                    .query_opt(
                        "UPDATE processes SET owner = $1 WHERE process_id =
                           (SELECT process_id FROM processes
                             WHERE state = 'running' AND lease_until < now()
                             ORDER BY row_no LIMIT 1 FOR UPDATE SKIP LOCKED)
                         RETURNING process_id",
                        &[&self.owner],
                    )
                    .await?;
                let Some(row) = row else { return Ok(out) };
                let process_id: String = row.get(0);
                let env =
                    append_in(&tx, Scope::Process, &process_id, &failed, self.holder()).await?;
                tx.commit().await?;
                out.push(env);
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
            let mut c = self.pool.get().await?;
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

    /// State of a turn.
    pub fn turn_state(&self, turn_id: &str) -> StoreResult<Option<String>> {
        let c = self.client()?;
        let row = block(c.query_opt("SELECT state FROM turns WHERE turn_id = $1", &[&turn_id]))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Claims the open turns whose lease ran out (their node is gone) for
    /// this node to end: they become `failing`, leased to this boot. Two
    /// nodes never claim one turn: the claim is one UPDATE under row locks.
    pub fn open_turns(&self) -> StoreResult<Vec<OpenTurn>> {
        let c = self.client()?;
        let mut rows = block(c.query(
            "UPDATE turns SET state = 'failing', owner = $1,
                              lease_until = now() + make_interval(secs => $2)
             WHERE turn_id IN (SELECT turn_id FROM turns
                               WHERE state IN ('queued', 'running', 'failing')
                                 AND lease_until < now() FOR UPDATE SKIP LOCKED)
             RETURNING row_no, session_id, turn_id",
            &[&self.owner, &self.lease.as_secs_f64()],
        ))?;
        rows.sort_by_key(|r| r.get::<_, i64>(0));
        Ok(rows
            .iter()
            .map(|r| OpenTurn {
                session_id: r.get(1),
                turn_id: r.get(2),
            })
            .collect())
    }

    /// Unanswered questions of the turns this node claimed to end.
    pub fn open_questions(&self) -> StoreResult<Vec<OpenQuestion>> {
        let c = self.client()?;
        let rows = block(c.query(
            "SELECT q.session_id, q.turn_id, q.question_id FROM questions q
             JOIN turns t ON t.turn_id = q.turn_id
             WHERE q.state = 'pending' AND t.state = 'failing' AND t.owner = $1
             ORDER BY q.row_no",
            &[&self.owner],
        ))?;
        Ok(rows
            .iter()
            .map(|r| OpenQuestion {
                session_id: r.get(0),
                turn_id: r.get(1),
                question_id: r.get(2),
            })
            .collect())
    }

    /// Tool calls never completed, of the turns this node claimed to end.
    pub fn open_tools(&self) -> StoreResult<Vec<OpenTool>> {
        let c = self.client()?;
        let rows = block(c.query(
            "SELECT o.session_id, o.turn_id, o.call_id FROM tools o
             JOIN turns t ON t.turn_id = o.turn_id
             WHERE o.state = 'running' AND t.state = 'failing' AND t.owner = $1
             ORDER BY o.row_no",
            &[&self.owner],
        ))?;
        Ok(rows
            .iter()
            .map(|r| OpenTool {
                session_id: r.get(0),
                turn_id: r.get(1),
                call_id: r.get(2),
            })
            .collect())
    }

    /// State of a persisted question, with its session.
    pub fn question_state(&self, question_id: &str) -> StoreResult<Option<(String, String)>> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT session_id, state FROM questions WHERE question_id = $1",
            &[&question_id],
        ))?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// Appends process output; returns the byte offset it starts at.
    pub fn append_process_log(&self, process_id: &str, text: &str) -> StoreResult<u64> {
        let c = self.client()?;
        let r = block(c.query_one(
            "UPDATE processes SET log = log || $2 WHERE process_id = $1
             RETURNING (octet_length(log) - octet_length($2))::BIGINT",
            &[&process_id, &text],
        ))?;
        Ok(unsigned(r.get(0)))
    }

    /// Replaces the session's task state; returns the new snapshot.
    pub fn put_tasks(
        &self,
        session_id: &str,
        tasks: &[Task],
        background_wait: Option<&BackgroundWait>,
    ) -> StoreResult<TasksSnapshot> {
        block(async {
            let mut c = self.pool.get().await?;
            let tx = c.transaction().await?;
            let ids: Vec<&str> = tasks.iter().map(|t| t.task_id.as_str()).collect();
            tx.execute(
                "DELETE FROM tasks WHERE session_id = $1 AND NOT (task_id = ANY($2))",
                &[&session_id, &ids],
            )
            .await?;
            for (i, t) in tasks.iter().enumerate() {
                // A task keeps the node that started it as its lease holder
                // (a session's turns, and so its tasks, may run on several).
                let open = matches!(t.state, TaskState::Queued | TaskState::Running);
                tx.execute(
                    "INSERT INTO tasks (task_id, session_id, ord, json, open, owner, lease_until)
                     VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
                     ON CONFLICT (task_id) DO UPDATE
                       SET ord = EXCLUDED.ord, json = EXCLUDED.json, open = EXCLUDED.open",
                    &[
                        &t.task_id,
                        &session_id,
                        &big(i as u64),
                        &serde_json::to_string(t)?,
                        &open,
                        &self.owner,
                        &self.lease.as_secs_f64(),
                    ],
                )
                .await?;
            }
            let bg = serde_json::to_string(&background_wait)?;
            tx.execute(
                "UPDATE sessions SET tasks_version = tasks_version + 1, background_wait = $2
                 WHERE session_id = $1",
                &[&session_id, &bg],
            )
            .await?;
            tx.commit().await?;
            read::tasks(&c, session_id).await
        })
    }

    /// Sessions with a queued or running task.
    pub fn sessions_with_open_tasks(&self) -> StoreResult<Vec<String>> {
        let c = self.client()?;
        let rows = block(c.query(
            "SELECT session_id, json FROM tasks ORDER BY session_id",
            &[],
        ))?;
        let mut out: Vec<String> = Vec::new();
        for r in &rows {
            let sid: String = r.get(0);
            let t: Task = serde_json::from_str(r.get(1))?;
            if matches!(t.state, TaskState::Queued | TaskState::Running) && !out.contains(&sid) {
                out.push(sid);
            }
        }
        Ok(out)
    }

    /// Records a new boot.
    pub fn insert_boot(&self, boot_id: &str) -> StoreResult<()> {
        let c = self.client()?;
        block(c.execute(
            "INSERT INTO boots (boot_id, started_at) VALUES ($1, $2)",
            &[&boot_id, &now_rfc3339()],
        ))?;
        Ok(())
    }

    /// Stores what recovery did in this boot.
    pub fn set_recovery(&self, boot_id: &str, report: &serde_json::Value) -> StoreResult<()> {
        let c = self.client()?;
        block(c.execute(
            "UPDATE boots SET recovery = $2 WHERE boot_id = $1",
            &[&boot_id, &serde_json::to_string(report)?],
        ))?;
        Ok(())
    }

    /// Postgres's `synchronous_commit` for this connection.
    pub fn synchronous(&self) -> StoreResult<String> {
        let c = self.client()?;
        let r = block(c.query_one("SHOW synchronous_commit", &[]))?;
        Ok(r.get(0))
    }
}

/// A session's background tasks failed because their node is gone.
pub struct ExpiredTasks {
    /// The session.
    pub session_id: String,
    /// Its tasks afterwards.
    pub snapshot: TasksSnapshot,
    /// The tasks failed.
    pub failed: Vec<String>,
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
        task.detail = Some(replay_core::protocol::REASON_WORKER_RESTART.into());
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
    let mut wait = match bg {
        Some(s) => serde_json::from_str::<Option<BackgroundWait>>(&s)?,
        None => None,
    };
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

/// The lease holder of a node's writes: its boot and lease length.
#[derive(Clone, Copy)]
struct Holder<'a> {
    owner: &'a str,
    lease_secs: f64,
}

/// Inserts one event as the next id and its log's next seq, inside the
/// caller's transaction, and notifies [`CHANNEL`] (delivered at commit).
/// An event of a turn that `owner` no longer holds is refused
/// ([`StoreError::NotHeld`], see [`hold_turn`]).
async fn append_in(
    tx: &Transaction<'_>,
    scope: Scope,
    scope_id: &str,
    event: &Event,
    holder: Holder<'_>,
) -> StoreResult<Envelope> {
    // First: the row lock that orders every append of every node.
    let id: i64 = tx
        .query_one(
            "UPDATE counters SET value = value + 1 WHERE name = '$events' RETURNING value",
            &[],
        )
        .await?
        .get(0);
    let ts = now_rfc3339();
    tx.execute(
        "INSERT INTO logs (scope, scope_id, epoch, head, created_at) VALUES ($1, $2, $3, 0, $4)
         ON CONFLICT DO NOTHING",
        &[&scope.as_str(), &scope_id, &random_id("e"), &ts],
    )
    .await?;
    let seq: i64 = tx
        .query_one(
            "UPDATE logs SET head = head + 1 WHERE scope = $1 AND scope_id = $2 RETURNING head",
            &[&scope.as_str(), &scope_id],
        )
        .await?
        .get(0);
    tx.execute(
        "INSERT INTO events (id, scope, scope_id, seq, type, ts, data) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[&id, &scope.as_str(), &scope_id, &seq, &event.type_name(), &ts, &event.data_json()],
    )
    .await?;
    project(tx, scope, scope_id, event, holder).await?;
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &id.to_string()])
        .await?;
    Ok(Envelope::durable(
        unsigned(id),
        scope,
        scope_id.to_owned(),
        unsigned(seq),
        ts,
        event.clone(),
    ))
}

/// The turn an event of a session belongs to, for the events that name one.
fn turn_of(event: &Event) -> Option<&str> {
    match event {
        Event::TurnStarted(t) => Some(&t.turn_id),
        Event::TurnCompleted(t) | Event::TurnCancelled(t) => Some(&t.turn_id),
        Event::TurnFailed(t) => Some(&t.turn_id),
        Event::MessageCommitted(m) => Some(&m.turn_id),
        Event::ToolStarted(t) => Some(&t.turn_id),
        Event::ToolCompleted(t) => Some(&t.turn_id),
        Event::QuestionAsked(q) => Some(&q.turn_id),
        _ => None,
    }
}

/// Fencing: a node writes a turn's events only while it holds the turn
/// (its `owner`, state still open), and moves it to `state` if given. A
/// lease can run out while its node is alive (Postgres unreachable longer
/// than a lease, or an end pass slower than one): another node then claims
/// the turn and ends it, and the first node's later events (a second end,
/// a reply after the end) are refused here, in the same transaction, under
/// the append lock. A turn the store does not know (an admin append) is
/// not fenced.
async fn hold_turn(
    tx: &Transaction<'_>,
    turn_id: &str,
    owner: &str,
    state: Option<&str>,
) -> StoreResult<()> {
    let held = match state {
        Some(state) => {
            tx.execute(
                "UPDATE turns SET state = $3 WHERE turn_id = $1 AND owner = $2
                   AND state IN ('queued', 'running', 'failing')",
                &[&turn_id, &owner, &state],
            )
            .await?
        }
        None => {
            tx.execute(
                "SELECT 1 FROM turns WHERE turn_id = $1 AND owner = $2
                   AND state IN ('queued', 'running', 'failing') FOR UPDATE",
                &[&turn_id, &owner],
            )
            .await?
        }
    };
    if held == 0
        && tx
            .query_opt("SELECT 1 FROM turns WHERE turn_id = $1", &[&turn_id])
            .await?
            .is_some()
    {
        return Err(StoreError::NotHeld(turn_id.to_owned()));
    }
    Ok(())
}

/// Ends a process as `state`, fenced like a turn (see [`hold_turn`]): only
/// the node holding a running process ends it, so a process failed by
/// another node (its lease ran out) is never ended twice. A process the
/// store does not know (an admin append) is not fenced.
async fn end_process(
    tx: &Transaction<'_>,
    process_id: &str,
    owner: &str,
    state: &str,
    code: Option<i64>,
) -> StoreResult<()> {
    let ended = tx
        .execute(
            "UPDATE processes SET state = $3, exit_code = COALESCE($4, exit_code)
             WHERE process_id = $1 AND owner = $2 AND state = 'running'",
            &[&process_id, &owner, &state, &code],
        )
        .await?;
    if ended == 0
        && tx
            .query_opt(
                "SELECT 1 FROM processes WHERE process_id = $1",
                &[&process_id],
            )
            .await?
            .is_some()
    {
        return Err(StoreError::NotHeld(process_id.to_owned()));
    }
    Ok(())
}

/// Keeps the projections in step with the event just inserted (and fences
/// the events of turns, see [`hold_turn`]).
async fn project(
    tx: &Transaction<'_>,
    scope: Scope,
    scope_id: &str,
    event: &Event,
    holder: Holder<'_>,
) -> StoreResult<()> {
    let owner = holder.owner;
    if scope == Scope::Session {
        if let Some(turn_id) = turn_of(event) {
            let state = match event {
                Event::TurnStarted(_) => Some("running"),
                Event::TurnCompleted(_) => Some("completed"),
                Event::TurnCancelled(_) => Some("cancelled"),
                Event::TurnFailed(_) => Some("failed"),
                _ => None,
            };
            hold_turn(tx, turn_id, owner, state).await?;
        }
    }
    let question = |state: &'static str| {
        (
            "UPDATE questions SET state = $2 WHERE question_id = $1",
            Some(state),
        )
    };
    // (statement, its $1 key, its $2), or a statement of its own.
    let ((sql, second), key): ((&str, Option<&str>), &str) = match event {
        Event::QuestionAnswered(q) => (question("answered"), &q.question_id),
        Event::QuestionDeclined(q) => (question("declined"), &q.question_id),
        Event::ToolCompleted(t) => (
            (
                "UPDATE tools SET state = 'completed' WHERE call_id = $1",
                None,
            ),
            &t.call_id,
        ),
        Event::ProcessFailed(_) if scope == Scope::Process => {
            return end_process(tx, scope_id, owner, "failed", None).await;
        }
        Event::ToolStarted(t) => {
            tx.execute(
                "INSERT INTO tools (call_id, session_id, turn_id, state)
                 VALUES ($1, $2, $3, 'running') ON CONFLICT DO NOTHING",
                &[&t.call_id, &scope_id, &t.turn_id],
            )
            .await?;
            return Ok(());
        }
        Event::QuestionAsked(q) => {
            tx.execute(
                "INSERT INTO questions (question_id, session_id, turn_id, state)
                 VALUES ($1, $2, $3, 'pending') ON CONFLICT DO NOTHING",
                &[&q.question_id, &scope_id, &q.turn_id],
            )
            .await?;
            return Ok(());
        }
        Event::ProcessStarted(p) if scope == Scope::Process => {
            tx.execute(
                "INSERT INTO processes (process_id, command, state, owner, lease_until)
                 VALUES ($1, $2, 'running', $3, now() + make_interval(secs => $4))
                 ON CONFLICT DO NOTHING",
                &[&scope_id, &p.command, &owner, &holder.lease_secs],
            )
            .await?;
            return Ok(());
        }
        Event::ProcessExited(p) if scope == Scope::Process => {
            return end_process(tx, scope_id, owner, "exited", Some(p.code)).await;
        }
        _ => return Ok(()),
    };
    match second {
        Some(v) => tx.execute(sql, &[&key, &v]).await?,
        None => tx.execute(sql, &[&key]).await?,
    };
    Ok(())
}
