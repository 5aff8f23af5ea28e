//! A session's turns as clients drive them (PROTOCOL.md §4.4): a message's
//! acceptance (once per `message_id`, within the queue caps) and its turn's
//! start, an answer's way to the question that waits for it, and a cancel.
//! Wherever the turn runs: on a cluster the node holding it carries out
//! what another node was asked ([`crate::cluster`]).

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::agent::{self, DirectiveError};
use crate::app::App;
use crate::cluster::{self, Command, Forwarded};
use crate::store::StoreError;
use crate::worker::{TurnSlot, TurnsFull};

/// Longest `message_id`, in bytes.
pub const MAX_MESSAGE_ID: usize = 200;

/// Why a request about a session's turns was refused.
#[derive(Debug, thiserror::Error)]
pub enum TurnsError {
    /// The `message_id` is empty or longer than [`MAX_MESSAGE_ID`].
    #[error("message_id must be 1..={MAX_MESSAGE_ID} bytes")]
    InvalidMessageId,
    /// The message asks for more work than a turn may do.
    #[error(transparent)]
    Directive(#[from] DirectiveError),
    /// No such session.
    #[error("session not found")]
    NoSession,
    /// No such question in the session.
    #[error("question not found")]
    NoQuestion,
    /// The question is not waiting for an answer.
    #[error("question {0} is not waiting for an answer")]
    QuestionClosed(String),
    /// A queue cap: nothing was written.
    #[error(transparent)]
    Full(#[from] TurnsFull),
    /// On a cluster, no node took the answer in time (retry).
    #[error("no node took the answer to {0} in time")]
    NotDelivered(String),
    /// The store failed (or was unreachable).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Accepts a message once per `message_id` and starts its turn; returns the
/// turn (the one a retry of the same message started before, if any).
///
/// The message is committed before this returns, so a crash before its turn
/// starts loses nothing (recovery then fails the queued turn).
pub async fn post_message(
    app: &Arc<App>,
    session_id: &str,
    message_id: &str,
    text: &str,
) -> Result<String, TurnsError> {
    if message_id.is_empty() || message_id.len() > MAX_MESSAGE_ID {
        return Err(TurnsError::InvalidMessageId);
    }
    // Refused before anything is written: a message asks for bounded work.
    agent::Directives::parse(text)?;
    let _no_restart = app.turn_start().await;
    // A place in the queue caps, taken before the lock; a retry of an
    // accepted message gets its turn even when the queue is full.
    let slot = app.worker().reserve_turn(
        session_id,
        app.cfg.max_queued_turns,
        app.cfg.max_queued_turns_total,
    );
    // Check and insert under one lock: two concurrent retries start one turn.
    let accepted = app.log.with_db(|db| {
        if !db.session_exists(session_id)? {
            return Ok((Accepted::NoSession, vec![]));
        }
        if let Some(turn_id) = db.turn_for_message(session_id, message_id)? {
            return Ok((Accepted::Existing(turn_id), vec![]));
        }
        let mut slot = match slot {
            Ok(slot) => slot,
            Err(full) => return Ok((Accepted::Full(full), vec![])),
        };
        let n = db.next_number("turn")?;
        let turn_id = format!("turn_{n}");
        let committed = db
            .accept_message(session_id, &turn_id, message_id, text)
            .and_then(|committed| {
                if app.faults.take_lost_commit_reply() {
                    return Err(StoreError::Backend(
                        "the commit's reply was lost (fault lose_commit_reply)".into(),
                    ));
                }
                Ok(committed)
            })
            .inspect_err(|_| {
                // The commit may have landed with its reply lost (Postgres
                // restarting): the turn is then in the log, leased to this
                // node, with no task to run it, and a retry finds it there.
                // Its lease runs out instead, and it is ended like a lost
                // node's turn, so the session's later turns are not held up.
                app.worker().abandon(&turn_id);
            })?;
        slot.enqueue(&turn_id);
        Ok((Accepted::New(turn_id, slot), vec![committed]))
    })?;
    match accepted {
        Accepted::NoSession => Err(TurnsError::NoSession),
        Accepted::Existing(turn_id) => Ok(turn_id),
        Accepted::Full(full) => Err(full.into()),
        Accepted::New(turn_id, slot) => {
            if let Some(wait) = app.faults.take_slow_turn_start() {
                tokio::time::sleep(wait).await;
            }
            agent::spawn_turn(app, slot, session_id, &turn_id, message_id, text);
            Ok(turn_id)
        }
    }
}

/// What [`post_message`] did under the store lock.
enum Accepted {
    NoSession,
    Existing(String),
    Full(TurnsFull),
    New(String, TurnSlot),
}

/// Gives `answer` to the turn waiting on `question_id`; returns once
/// `question.answered` is committed. A question no turn of this node waits
/// on is, on a cluster, forwarded to the node that runs its turn
/// ([`crate::cluster::Cluster::forward_answer`]).
pub async fn answer(
    app: &App,
    session_id: &str,
    question_id: &str,
    answer: String,
) -> Result<(), TurnsError> {
    if !app.log.session_exists(session_id)? {
        return Err(TurnsError::NoSession);
    }
    let waiter = app
        .worker()
        .session(session_id)
        .lock()
        .questions
        .get(question_id)
        .cloned();
    let closed = || TurnsError::QuestionClosed(question_id.to_owned());
    let Some(waiter) = waiter else {
        if let Some(cluster) = &app.cluster {
            let forwarded = cluster
                .forward_answer(&app.log, session_id, question_id, answer)
                .await?;
            return match forwarded {
                Forwarded::Answered => Ok(()),
                Forwarded::Closed => Err(closed()),
                Forwarded::Unknown => Err(TurnsError::NoQuestion),
                Forwarded::NotDelivered => Err(TurnsError::NotDelivered(question_id.to_owned())),
            };
        }
        return match app.log.db().question_state(question_id)? {
            Some((sid, _)) if sid == session_id => Err(closed()),
            _ => Err(TurnsError::NoQuestion),
        };
    };
    let (ack_tx, ack_rx) = oneshot::channel();
    waiter.send((answer, ack_tx)).await.map_err(|_| closed())?;
    // Answered only once `question.answered` is committed.
    ack_rx.await.map_err(|_| closed())
}

/// Stops the session's running turn (only `turn_id` when given: a retried
/// cancel of a turn that already ended must not stop the next one), on
/// whichever node it runs; returns the turn stopped, if any.
pub async fn cancel(
    app: &App,
    session_id: &str,
    turn_id: Option<&str>,
) -> Result<Option<String>, TurnsError> {
    if !app.log.session_exists(session_id)? {
        return Err(TurnsError::NoSession);
    }
    let running = app.worker().session(session_id).lock().running.clone();
    let named = |turn: &str| turn_id.is_none_or(|t| t == turn);
    if let Some(r) = running.filter(|r| named(&r.turn_id)) {
        r.cancel.notify_one();
        return Ok(Some(r.turn_id));
    }
    let Some(cluster) = &app.cluster else {
        return Ok(None);
    };
    // On a cluster the turn may run on another node: it stops it.
    let Some(remote) = cluster.running_turn(session_id).await?.filter(|t| named(t)) else {
        return Ok(None);
    };
    cluster.cancel(session_id, &remote).await?;
    Ok(Some(remote))
}

/// Carries out, while the app lives, the commands other nodes send (on a
/// cluster; nothing on SQLite).
pub fn serve_cluster(app: &Arc<App>) {
    let Some(cluster) = &app.cluster else {
        return;
    };
    let mut commands = cluster.commands();
    let app = Arc::downgrade(app);
    tokio::spawn(async move {
        while let Some(cmd) = cluster::next_command(&mut commands).await {
            let Some(app) = app.upgrade() else { return };
            carry_out(&app, cmd).await;
        }
    });
}

/// Carries out `cmd` if this node holds the turn it is for.
async fn carry_out(app: &App, cmd: Command) {
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
        Command::Waiting { question_id } => {
            if let Some(cluster) = &app.cluster {
                cluster.waiter_started(question_id);
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
