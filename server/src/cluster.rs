//! What the nodes of a cluster (the Postgres store) do for each other. A
//! turn's live state (its answer channels, its cancel switch) lives on the
//! node running it, while a client's request may reach any node: an answer
//! or a cancel that finds no turn here is sent to every node as a
//! [`Command`] (`NOTIFY`), and the node holding the turn carries it out
//! (`crate::turns`). And turns of one session run one at a time in the
//! order they were accepted, whichever nodes accepted them
//! ([`Cluster::wait_for_earlier_turns`]).
//!
//! The app holds one [`Cluster`] when the store is Postgres and none on
//! SQLite (one process: its worker holds every turn).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::follow::Publisher;
use crate::log::Log;
use crate::store::pg;
use crate::store::pg::cluster::{self as sql, TurnGate};
use crate::store::{QuestionState, StoreError, StoreResult};

/// How often a forwarded answer looks at the log for its question's state.
pub const POLL: Duration = Duration::from_millis(50);
/// How often a turn waiting for an earlier turn looks at the log when no
/// turn's end woke it.
pub const GATE_POLL: Duration = Duration::from_millis(500);
/// How long a node waits for a forwarded answer to be committed by the
/// node running its turn before it answers `503` (the client retries).
pub const FORWARD_WAIT: Duration = Duration::from_secs(10);
/// How often a forwarded answer is sent again while its question waits.
const ANSWER_RESEND: Duration = Duration::from_secs(1);
/// How long a forwarded answer waits for a question the log does not know.
const UNKNOWN_QUESTION_WAIT: Duration = Duration::from_secs(1);

/// A request for the node that runs a session's turn.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Command {
    /// Answer a question the turn waits on.
    Answer {
        /// The session.
        session_id: String,
        /// The question.
        question_id: String,
        /// The answer.
        answer: String,
    },
    /// Stop the running turn `turn_id`.
    Cancel {
        /// The session.
        session_id: String,
        /// The turn.
        turn_id: String,
    },
}

/// What became of an answer sent to every node ([`Cluster::forward_answer`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// The question is answered.
    Answered,
    /// The question is not waiting for an answer.
    Closed,
    /// No such question in the session.
    Unknown,
    /// No node took the answer within [`FORWARD_WAIT`] (retry).
    NotDelivered,
}

/// This node's link to the others: the shared store's pool and what its
/// follower hears (commands, turns' ends).
pub struct Cluster {
    pool: deadpool_postgres::Pool,
    publisher: Arc<Publisher>,
}

impl Cluster {
    /// The link when `log` is a cluster's shared log (Postgres), else `None`.
    pub fn of(log: &Log) -> Option<Cluster> {
        let (pool, publisher) = log.cluster_links()?;
        Some(Cluster { pool, publisher })
    }

    /// The commands other nodes send from now on.
    pub fn commands(&self) -> broadcast::Receiver<String> {
        self.publisher.commands()
    }

    /// Sends `cmd` to every node (the one holding the turn carries it out).
    pub async fn send(&self, cmd: &Command) -> StoreResult<()> {
        let pool = self.pool.clone();
        let payload = serde_json::to_string(cmd).map_err(|e| StoreError::Backend(e.to_string()))?;
        pg::on_runtime(async move { sql::notify_nodes(&pool, &payload).await }).await
    }

    /// The running turn of `session_id` on any node, if any.
    pub async fn running_turn(&self, session_id: &str) -> StoreResult<Option<String>> {
        let pool = self.pool.clone();
        let session_id = session_id.to_owned();
        pg::on_runtime(async move { sql::running_turn(&pool, &session_id).await }).await
    }

    /// Asks the node running `turn_id` to stop it.
    pub async fn cancel(&self, session_id: &str, turn_id: &str) -> StoreResult<()> {
        self.send(&Command::Cancel {
            session_id: session_id.to_owned(),
            turn_id: turn_id.to_owned(),
        })
        .await
    }

    /// Waits until no turn of `session_id` accepted before `turn_id` is open
    /// on any node, then says whether `turn_id` may run: `false` when it is
    /// no longer queued (its lease ran out while this node could not reach
    /// Postgres, and another node ended it). A turn of a node that died is
    /// ended by another once its lease runs out, so the wait ends; a store
    /// error (Postgres restarting) is waited out.
    pub async fn wait_for_earlier_turns(&self, session_id: &str, turn_id: &str) -> bool {
        let ended = self.publisher.turn_ended();
        loop {
            // Armed before the look, so an end published meanwhile still wakes.
            let woken = ended.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let (pool, sid, tid) = (self.pool.clone(), session_id.to_owned(), turn_id.to_owned());
            match pg::on_runtime(async move { sql::turn_gate(&pool, &sid, &tid).await }).await {
                Ok(TurnGate::Go) => return true,
                Ok(TurnGate::Gone) => return false,
                Ok(TurnGate::Wait) => {}
                Err(e) => {
                    tracing::warn!(turn = %turn_id, error = %e, "a queued turn cannot reach the log; retrying")
                }
            }
            // The poll is the safety net; the wake-up is the usual path.
            let _ = tokio::time::timeout(GATE_POLL, woken).await;
        }
    }

    /// Sends an answer for a question this node's worker is not waiting on
    /// to every node (the node running its turn may be); returns once the
    /// log shows the question answered, or closed, or after
    /// [`FORWARD_WAIT`]. A question the log does not know may live only in
    /// its turn's overlay for a moment: it gets [`UNKNOWN_QUESTION_WAIT`]
    /// to appear.
    pub async fn forward_answer(
        &self,
        log: &Log,
        session_id: &str,
        question_id: &str,
        answer: String,
    ) -> StoreResult<Forwarded> {
        // The question's state, if it is one of this session's.
        let state = || -> StoreResult<Option<QuestionState>> {
            let found = log.db().question_state(question_id)?;
            Ok(found
                .filter(|(sid, _)| sid == session_id)
                .map(|(_, state)| state))
        };
        if state()?.is_some_and(|s| s != QuestionState::Pending) {
            return Ok(Forwarded::Closed);
        }
        let command = Command::Answer {
            session_id: session_id.to_owned(),
            question_id: question_id.to_owned(),
            answer,
        };
        self.send(&command).await?;
        let started = Instant::now();
        let mut sent = Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            // Sent again while the question waits: a turn kept waiting across
            // a node's restart has no waiter until a node adopts it (once its
            // lease ran out), and a node drops an answer it has no waiter for.
            if sent.elapsed() >= ANSWER_RESEND {
                self.send(&command).await?;
                sent = Instant::now();
            }
            match state()? {
                Some(QuestionState::Answered) => return Ok(Forwarded::Answered),
                Some(QuestionState::Pending) => {}
                Some(_) => return Ok(Forwarded::Closed),
                None if started.elapsed() >= UNKNOWN_QUESTION_WAIT => {
                    return Ok(Forwarded::Unknown)
                }
                None => {}
            }
            if started.elapsed() >= FORWARD_WAIT {
                return Ok(Forwarded::NotDelivered);
            }
        }
    }
}

/// The next command another node sent (`None` once the node stops
/// hearing them); a command dropped for lag or unreadable is skipped (its
/// sender times out).
pub async fn next_command(commands: &mut broadcast::Receiver<String>) -> Option<Command> {
    loop {
        let payload = match commands.recv().await {
            Ok(p) => p,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    dropped = n,
                    "cluster commands dropped (their senders time out)"
                );
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        match serde_json::from_str::<Command>(&payload) {
            Ok(cmd) => return Some(cmd),
            Err(e) => tracing::warn!(error = %e, "a cluster command this node cannot read"),
        }
    }
}
