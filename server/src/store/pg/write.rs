//! The Postgres writer: appends and projection updates, each in one
//! transaction (see the module docs of `pg` for how seqs are assigned).
//! Callers need no lock: Postgres orders concurrent writes.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use replay_core::protocol::{
    BackgroundWait, Envelope, Event, MessageCommitted, Role, Scope, Task, TasksSnapshot,
};
use tokio_postgres::Row;

use super::append::{stage, Holder};
use super::group::{GroupStats, Grouped, Groups, Node};
use super::tx::WriteTx;
use super::{big, block, read, unsigned};
use crate::store::rows::{sessions_with_open_tasks, task_is_open};
use crate::store::{
    LogInfo, OpenQuestion, OpenTool, OpenTurn, QuestionState, StoreResult, TurnState,
};
use crate::util::{now_rfc3339, random_id};

/// The store of one node: a pool on the shared database.
pub struct PgDb {
    pool: Pool,
    /// The boot that owns the turns this node accepts (their lease holder);
    /// replaced at an in-process restart while appends run.
    owner: RwLock<Arc<str>>,
    /// How long a turn's lease lasts unless renewed.
    lease: Duration,
    global_epoch: String,
    /// This node's tag: the payload of its wake-ups, which its own
    /// follower skips.
    node: Arc<str>,
    /// Appends waiting to be committed together.
    groups: Groups,
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
            owner: RwLock::new(Arc::from("")),
            lease,
            global_epoch,
            node: Arc::from(random_id("n")),
            groups: Groups::default(),
        })
    }

    /// This node's tag (see [`PgDb::append_grouped`]'s wake-up).
    pub fn node_tag(&self) -> &str {
        &self.node
    }

    /// Append transactions committed so far and the events they held.
    pub fn group_stats(&self) -> &GroupStats {
        &self.groups.stats
    }

    /// A write transaction of this node.
    pub(super) async fn begin(&self) -> StoreResult<WriteTx> {
        WriteTx::begin(&self.pool, &self.node).await
    }

    /// The pool (readers and the follower use it too).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Sets the boot that leases the turns accepted from now on.
    pub fn set_owner(&self, boot_id: &str) {
        *self.owner.write().unwrap_or_else(PoisonError::into_inner) = Arc::from(boot_id);
    }

    /// The boot that leases what this node writes now.
    pub fn owner(&self) -> Arc<str> {
        Arc::clone(&self.owner.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// What `owner`'s writes are leased as.
    pub(super) fn holder<'a>(&self, owner: &'a str) -> Holder<'a> {
        Holder {
            owner,
            lease_secs: self.lease.as_secs_f64(),
        }
    }

    pub(super) fn client(&self) -> StoreResult<Object> {
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

    /// Appends one event (creating its log if needed), committed in one
    /// transaction with the other appends this node makes meanwhile
    /// (`group`); returns once it is committed.
    pub fn append(&self, scope: Scope, scope_id: &str, event: &Event) -> StoreResult<Envelope> {
        // The store's interface lends the event; `Log::append` hands its own.
        let grouped = block(self.append_grouped(scope, scope_id, event.clone()))?;
        Ok(grouped.own().0.clone())
    }

    /// [`PgDb::append`], with the whole group it committed in (what the
    /// node publishes without reading it back), for async code running on
    /// the Postgres runtime ([`super::on_runtime`]): no thread blocks while
    /// it waits.
    pub async fn append_grouped(
        &self,
        scope: Scope,
        scope_id: &str,
        event: Event,
    ) -> StoreResult<Grouped> {
        let node = Node {
            pool: &self.pool,
            tag: &self.node,
            lease_secs: self.lease.as_secs_f64(),
        };
        self.groups
            .append(&node, scope, scope_id, event, self.owner())
            .await
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
        let owner = self.owner();
        let event = Event::MessageCommitted(MessageCommitted {
            message_id: message_id.to_owned(),
            turn_id: turn_id.to_owned(),
            role: Role::User,
            text: text.to_owned(),
        });
        block(async {
            let mut tx = self.begin().await?;
            let staged = async {
                tx.execute(
                    "INSERT INTO turns (turn_id, session_id, message_id, text, state, owner,
                                        lease_until)
                     VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))",
                    &[
                        &turn_id,
                        &session_id,
                        &message_id,
                        &text,
                        &TurnState::Queued.as_str(),
                        &&*owner,
                        &self.lease.as_secs_f64(),
                    ],
                )
                .await?;
                stage(
                    &mut tx,
                    Scope::Session,
                    session_id,
                    &event,
                    self.holder(&owner),
                )
                .await
            }
            .await;
            match staged {
                Ok(staged) => Ok(tx.commit(vec![staged]).await?.remove(0)),
                Err(e) => {
                    tx.rollback().await;
                    Err(e)
                }
            }
        })
    }

    /// State of a turn.
    pub fn turn_state(&self, turn_id: &str) -> StoreResult<Option<TurnState>> {
        let c = self.client()?;
        let row = block(c.query_opt("SELECT state FROM turns WHERE turn_id = $1", &[&turn_id]))?;
        row.map(|r| TurnState::parse(r.get(0))).transpose()
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
            &[&&*self.owner(), &self.lease.as_secs_f64()],
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
        self.of_claimed_turns(
            "SELECT q.session_id, q.turn_id, q.question_id FROM questions q
             JOIN turns t ON t.turn_id = q.turn_id
             WHERE q.state = 'pending' AND t.state = 'failing' AND t.owner = $1
             ORDER BY q.row_no",
            |r| OpenQuestion {
                session_id: r.get(0),
                turn_id: r.get(1),
                question_id: r.get(2),
            },
        )
    }

    /// Tool calls never completed, of the turns this node claimed to end.
    pub fn open_tools(&self) -> StoreResult<Vec<OpenTool>> {
        self.of_claimed_turns(
            "SELECT o.session_id, o.turn_id, o.call_id FROM tools o
             JOIN turns t ON t.turn_id = o.turn_id
             WHERE o.state = 'running' AND t.state = 'failing' AND t.owner = $1
             ORDER BY o.row_no",
            |r| OpenTool {
                session_id: r.get(0),
                turn_id: r.get(1),
                call_id: r.get(2),
            },
        )
    }

    /// The rows of `sql`, whose `$1` is this node's boot (the owner of the
    /// turns it claimed with [`open_turns`](PgDb::open_turns)), each mapped.
    fn of_claimed_turns<T>(&self, sql: &str, map: impl Fn(&Row) -> T) -> StoreResult<Vec<T>> {
        let c = self.client()?;
        let rows = block(c.query(sql, &[&&*self.owner()]))?;
        Ok(rows.iter().map(map).collect())
    }

    /// State of a persisted question, with its session.
    pub fn question_state(
        &self,
        question_id: &str,
    ) -> StoreResult<Option<(String, QuestionState)>> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT session_id, state FROM questions WHERE question_id = $1",
            &[&question_id],
        ))?;
        row.map(|r| Ok((r.get(0), QuestionState::parse(r.get(1))?)))
            .transpose()
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
            let owner = self.owner();
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
                let open = task_is_open(t);
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
                        &&*owner,
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
        sessions_with_open_tasks(rows.iter().map(|r| (r.get(0), r.get::<_, &str>(1))))
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
