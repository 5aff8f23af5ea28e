//! What the nodes of a cluster (the Postgres store) do for each other. A
//! turn's live state (its answer channels, its cancel switch) lives on the
//! node running it, while a client's request may reach any node: an answer
//! or a cancel that finds no turn here is sent to every node as a
//! [`Command`] (`NOTIFY`), and the node holding the turn carries it out. And
//! turns of one session run one at a time in the order they were accepted,
//! whichever nodes accepted them ([`wait_for_earlier_turns`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};

use crate::app::App;
use crate::store::pg;
use crate::store::pg::cluster::{self as sql, TurnGate};
use crate::store::StoreResult;

/// How often a forwarded answer looks at the log for its question's state.
pub const POLL: Duration = Duration::from_millis(50);
/// How often a turn waiting for an earlier turn looks at the log when no
/// turn's end woke it.
pub const GATE_POLL: Duration = Duration::from_millis(500);
/// How long a node waits for a forwarded answer to be committed by the
/// node running its turn before it answers `503` (the client retries).
pub const FORWARD_WAIT: Duration = Duration::from_secs(10);

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

/// Sends `cmd` to every node (the one holding the turn carries it out).
pub async fn send(app: &App, cmd: &Command) -> StoreResult<()> {
    let Some(pool) = app.log.pg_pool().cloned() else {
        return Ok(());
    };
    let payload =
        serde_json::to_string(cmd).map_err(|e| crate::store::StoreError::Backend(e.to_string()))?;
    pg::on_runtime(async move { sql::notify_nodes(&pool, &payload).await }).await
}

/// The running turn of `session_id` on any node (Postgres), if any.
pub async fn running_turn(app: &App, session_id: &str) -> StoreResult<Option<String>> {
    let Some(pool) = app.log.pg_pool().cloned() else {
        return Ok(None);
    };
    let session_id = session_id.to_owned();
    pg::on_runtime(async move { sql::running_turn(&pool, &session_id).await }).await
}

/// Waits until no turn of `session_id` accepted before `turn_id` is open on
/// any node, then says whether `turn_id` may run: `false` when it is no
/// longer queued (its lease ran out while this node could not reach
/// Postgres, and another node ended it). At once `true` on SQLite: one
/// process, whose per-session lock already orders its turns. A turn of a
/// node that died is ended by another once its lease runs out, so the wait
/// ends; a store error (Postgres restarting) is waited out.
pub async fn wait_for_earlier_turns(app: &App, session_id: &str, turn_id: &str) -> bool {
    let (Some(pool), Some(ended)) = (app.log.pg_pool().cloned(), app.log.turn_ended()) else {
        return true;
    };
    loop {
        // Armed before the look, so an end published meanwhile still wakes.
        let woken = ended.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let (pool, sid, tid) = (pool.clone(), session_id.to_owned(), turn_id.to_owned());
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

/// Carries out the commands other nodes send, for as long as the app lives.
pub async fn serve(app: Weak<App>, mut commands: broadcast::Receiver<String>) {
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
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(app) = app.upgrade() else { return };
        match serde_json::from_str::<Command>(&payload) {
            Ok(cmd) => apply(&app, cmd).await,
            Err(e) => tracing::warn!(error = %e, "a cluster command this node cannot read"),
        }
    }
}

/// Carries out `cmd` if this node holds the turn it is for.
async fn apply(app: &App, cmd: Command) {
    let worker = app.worker();
    match cmd {
        Command::Answer {
            session_id,
            question_id,
            answer,
        } => {
            let waiter = worker
                .session(&session_id)
                .lock()
                .questions
                .get(&question_id)
                .cloned();
            if let Some(waiter) = waiter {
                // The sender watches the log for `question.answered`.
                let (ack, _) = oneshot::channel();
                let _ = waiter.send((answer, ack)).await;
            }
        }
        Command::Cancel {
            session_id,
            turn_id,
        } => {
            let running = worker.session(&session_id).lock().running.clone();
            if let Some(r) = running.filter(|r| r.turn_id == turn_id) {
                r.cancel.notify_one();
            }
        }
    }
}

/// Starts [`serve`] when the store is Postgres.
pub fn start(app: &Arc<App>) {
    if let Some(commands) = app.log.cluster_commands() {
        tokio::spawn(serve(Arc::downgrade(app), commands));
    }
}
