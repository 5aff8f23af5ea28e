//! What the nodes of a cluster (the Postgres store) do for each other. A
//! turn's live state (its answer channels, its cancel switch) lives on the
//! node running it, while a client's request may reach any node: an answer
//! or a cancel that finds no turn here is sent to every node as a
//! [`Command`] (`NOTIFY`), and the node holding the turn carries it out
//! (`crate::turns`). And turns of one session run one at a time in the
//! order they were accepted, whichever nodes accepted them
//! ([`Cluster::wait_for_earlier_turns`]). A node keeps renewing the leases
//! of what it runs ([`Cluster::renew_leases`]): what a node leaves to run
//! out is ended by another (`crate::recovery::reap`).
//!
//! The app holds one [`Cluster`] when the store is Postgres and none on
//! SQLite (one process: its worker holds every turn).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::follow::Publisher;
use crate::log::Log;
use crate::store::pg::cluster::{self as sql, TurnGate};
use crate::store::pg::{self, PgDb};
use crate::store::{QuestionState, StoreError, StoreResult};

/// How often a turn waiting for an earlier turn looks at the log when no
/// turn's end woke it.
pub const GATE_POLL: Duration = Duration::from_millis(500);
/// How long a forwarded answer waits for the node running its turn to
/// commit it before the node that took it answers `503` (the client
/// retries).
pub const FORWARD_WAIT: Duration = Duration::from_secs(10);
/// How long a forwarded answer waits for a question the log does not know
/// (it may live only in its turn's overlay for a moment) before `404`.
pub const UNKNOWN_QUESTION_WAIT: Duration = Duration::from_secs(1);
/// Question ids a node started waiting on again, not yet taken by a
/// forwarded answer, before the oldest are dropped (a lag resends).
const WAITERS_BUFFERED: usize = 256;

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
    /// A node started waiting on a question again (it adopted the turn
    /// of a lost node): an answer forwarded meanwhile is sent again.
    Waiting {
        /// The question.
        question_id: String,
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

/// When the last lease renewal that succeeded began (`None`: none yet).
pub type Renewed = Arc<Mutex<Option<Instant>>>;

/// This node's link to the others: the shared store's pool and what its
/// follower hears (commands, turns' ends).
pub struct Cluster {
    pool: deadpool_postgres::Pool,
    publisher: Arc<Publisher>,
    /// Question ids a node announced waiting on again ([`Command::Waiting`]).
    waiters: broadcast::Sender<String>,
}

impl Cluster {
    /// The link when `log` is a cluster's shared log (Postgres), else `None`.
    pub fn of(log: &Log) -> Option<Cluster> {
        let (pool, publisher) = log.cluster_links()?;
        Some(Cluster {
            pool,
            publisher,
            waiters: broadcast::channel(WAITERS_BUFFERED).0,
        })
    }

    /// Renews, every third of a lease, the leases of the turns, processes
    /// and background tasks this node runs, as long as `held` gives their
    /// owner (this node's boot) and the turns it gave up (whose leases run
    /// out now); returns when the last renewal that succeeded began. On a
    /// connection of its own to `url` (reconnected when lost) and on the
    /// Postgres runtime: never behind the pool, appends or reaping.
    pub fn renew_leases(
        &self,
        url: &str,
        lease: Duration,
        held: impl Fn() -> Option<(String, Vec<String>)> + Send + 'static,
    ) -> Renewed {
        let renewed = Renewed::default();
        pg::runtime().spawn(renew_leases(
            url.to_owned(),
            lease,
            held,
            Arc::clone(&renewed),
        ));
        renewed
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

    /// Tells every node that this one waits on `question_id` again (in
    /// the background: the waiter is already in place).
    pub fn announce_waiter(&self, question_id: &str) {
        let pool = self.pool.clone();
        let cmd = Command::Waiting {
            question_id: question_id.to_owned(),
        };
        let Ok(payload) = serde_json::to_string(&cmd) else {
            return;
        };
        pg::runtime().spawn(async move {
            if let Err(e) = sql::notify_nodes(&pool, &payload).await {
                tracing::warn!(error = %e, "announcing a waiting question failed");
            }
        });
    }

    /// A node announced that it waits on `question_id` again: the answers
    /// forwarded for it here are sent again.
    pub fn waiter_started(&self, question_id: String) {
        // No receiver is the usual case: nothing forwarded waits.
        let _ = self.waiters.send(question_id);
    }

    /// Sends an answer for a question this node's worker is not waiting on
    /// to every node (the node running its turn may be), then waits on the
    /// question's state, woken by the question's events as this node
    /// publishes them: returns once the log shows the question answered or
    /// closed, or after [`FORWARD_WAIT`] ([`Forwarded::NotDelivered`]). A
    /// question the log does not know gets [`UNKNOWN_QUESTION_WAIT`] to
    /// appear. A node drops an answer it has no waiter for: a turn kept
    /// waiting across its node's loss has none until a node adopts it
    /// (once its lease ran out), so the answer is sent again when a node
    /// announces it waits on the question ([`Command::Waiting`]).
    pub async fn forward_answer(
        &self,
        log: &Log,
        session_id: &str,
        question_id: &str,
        answer: String,
    ) -> StoreResult<Forwarded> {
        // Subscribed before the first look: a change after it still wakes.
        let mut notices = Notices {
            moved: self.publisher.questions(),
            waiting: self.waiters.subscribe(),
        };
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
        loop {
            let known = match state()? {
                Some(QuestionState::Answered) => return Ok(Forwarded::Answered),
                Some(QuestionState::Pending) => true,
                Some(_) => return Ok(Forwarded::Closed),
                None => false,
            };
            let (wait, gone) = if known {
                (FORWARD_WAIT, Forwarded::NotDelivered)
            } else {
                (UNKNOWN_QUESTION_WAIT, Forwarded::Unknown)
            };
            let deadline = started + wait;
            if Instant::now() >= deadline {
                return Ok(gone);
            }
            if notices.next(question_id, deadline).await == Notice::Waiting {
                self.send(&command).await?;
            }
        }
    }
}

/// What a forwarded answer waits on.
struct Notices {
    /// Question ids of the question events published here.
    moved: broadcast::Receiver<String>,
    /// Question ids a node announced waiting on again.
    waiting: broadcast::Receiver<String>,
}

/// What woke a forwarded answer.
#[derive(Debug, PartialEq, Eq)]
enum Notice {
    /// Its question's state may have moved: look at the log.
    Moved,
    /// A node waits on its question again: send the answer again.
    Waiting,
    /// Its deadline passed.
    Deadline,
}

impl Notices {
    /// The next notice about `question_id`, or [`Notice::Deadline`]. A
    /// receiver that lagged counts as a notice (what it missed may have
    /// been about this question).
    async fn next(&mut self, question_id: &str, deadline: Instant) -> Notice {
        use broadcast::error::RecvError;
        let sleep = tokio::time::sleep_until(deadline.into());
        tokio::pin!(sleep);
        loop {
            let (got, notice) = tokio::select! {
                got = self.moved.recv() => (got, Notice::Moved),
                got = self.waiting.recv() => (got, Notice::Waiting),
                () = &mut sleep => return Notice::Deadline,
            };
            match got {
                Ok(q) if q != question_id => {}
                Ok(_) | Err(RecvError::Lagged(_)) => return notice,
                // Never while the cluster lives (it holds both senders).
                Err(RecvError::Closed) => {
                    (&mut sleep).await;
                    return Notice::Deadline;
                }
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

/// [`Cluster::renew_leases`]'s task.
async fn renew_leases(
    url: String,
    lease: Duration,
    held: impl Fn() -> Option<(String, Vec<String>)>,
    renewed: Renewed,
) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client: Option<tokio_postgres::Client> = None;
    loop {
        tick.tick().await;
        let Some((owner, abandoned)) = held() else {
            return;
        };
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                Ok((c, conn)) => {
                    tokio::spawn(conn);
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "connecting to renew leases failed");
                    continue;
                }
            };
        }
        let Some(c) = client.as_ref() else { continue };
        let began = Instant::now();
        match PgDb::renew_leases(c, &owner, lease, &abandoned).await {
            Ok(()) => *renewed.lock().unwrap_or_else(|e| e.into_inner()) = Some(began),
            Err(e) => tracing::warn!(error = %e, "renewing leases failed"),
        }
    }
}
