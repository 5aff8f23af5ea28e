//! Writes (PROTOCOL.md §4.4). Each is answered only after what it wrote is
//! committed; a repeated `message_id` starts nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use replay_core::protocol::{
    AnswerQuestion, CancelAccepted, CancelTurn, CreateSession, Event, MessageAccepted, PostMessage,
    Scope, SessionCreated, SessionCreatedReply,
};
use serde::Serialize;
use tokio::sync::oneshot;

use super::error::{ApiError, BodyBytes, JsonBody};
use crate::agent;
use crate::app::App;
use crate::cluster;
use crate::store::QuestionState;
use crate::worker::{TurnSlot, TurnsFull};

pub(super) async fn create_session(
    State(app): State<Arc<App>>,
    JsonBody(body): JsonBody<CreateSession>,
) -> Result<(StatusCode, Json<SessionCreatedReply>), ApiError> {
    let reply = app.log.with_db(|db| {
        let n = db.next_number("session")?;
        let session_id = format!("ses_{n}");
        db.insert_session(&session_id, &body.title)?;
        crate::provider::attach(db, &session_id)?;
        let env = db.append(
            Scope::Session,
            &session_id,
            &Event::SessionCreated(SessionCreated { title: body.title }),
        )?;
        let epoch = db
            .log_info(Scope::Session, &session_id)?
            .map(|i| i.epoch)
            .unwrap_or_default();
        Ok((SessionCreatedReply { session_id, epoch }, vec![env]))
    })?;
    Ok((StatusCode::CREATED, Json(reply)))
}

fn invalid(code: &str, msg: &str) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, msg)
}

pub(super) async fn post_message(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PostMessage>,
) -> Result<(StatusCode, Json<MessageAccepted>), ApiError> {
    if body.message_id.is_empty() || body.message_id.len() > 200 {
        return Err(invalid(
            "invalid_message_id",
            "message_id must be 1..=200 bytes",
        ));
    }
    // Refused before anything is written: a message asks for bounded work.
    agent::Directives::parse(&body.text)
        .map_err(|e| ApiError::bad_request("directive_limit", e.to_string()))?;
    // A place in the queue caps, taken before the lock; a retry of an
    // accepted message gets its turn even when the queue is full.
    let slot = app.worker().reserve_turn(
        &id,
        app.cfg.max_queued_turns,
        app.cfg.max_queued_turns_total,
    );
    // Check and insert under one lock: two concurrent retries start one turn.
    // The user's message is committed before the `202`, so a crash before
    // its turn starts loses nothing (recovery then fails the queued turn).
    let accepted = app.log.with_db(|db| {
        if !db.session_exists(&id)? {
            return Ok((Accepted::NoSession, vec![]));
        }
        if let Some(turn_id) = db.turn_for_message(&id, &body.message_id)? {
            return Ok((Accepted::Existing(turn_id), vec![]));
        }
        let mut slot = match slot {
            Ok(slot) => slot,
            Err(full) => return Ok((Accepted::Full(full), vec![])),
        };
        let n = db.next_number("turn")?;
        let turn_id = format!("turn_{n}");
        let committed = db
            .accept_message(&id, &turn_id, &body.message_id, &body.text)
            .and_then(|committed| {
                if app.faults.take_lost_commit_reply() {
                    return Err(crate::store::StoreError::Backend(
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
    let turn_id = match accepted {
        Accepted::NoSession => return Err(ApiError::not_found("session")),
        Accepted::Existing(turn_id) => turn_id,
        Accepted::Full(full) => return Err(queue_full(full)),
        Accepted::New(turn_id, slot) => {
            agent::spawn_turn(&app, slot, &id, &turn_id, &body.message_id, &body.text);
            turn_id
        }
    };
    Ok((StatusCode::ACCEPTED, Json(MessageAccepted { turn_id })))
}

/// What `post_message` did under the store lock.
enum Accepted {
    NoSession,
    Existing(String),
    Full(TurnsFull),
    New(String, TurnSlot),
}

/// `Retry-After` of a message refused by a queue cap, in seconds.
const QUEUE_RETRY_AFTER_S: u64 = 2;

/// A session's queue full is the client's doing (`429`); the process's is
/// the server's load (`503`). Nothing was written.
fn queue_full(full: TurnsFull) -> ApiError {
    let status = match full {
        TurnsFull::Session(_) => StatusCode::TOO_MANY_REQUESTS,
        TurnsFull::Process(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, "too_many_turns", full.to_string()).retry_after(Some(QUEUE_RETRY_AFTER_S))
}

pub(super) async fn answer(
    State(app): State<Arc<App>>,
    Path((id, qid)): Path<(String, String)>,
    JsonBody(body): JsonBody<AnswerQuestion>,
) -> Result<Json<AnswerReply>, ApiError> {
    if !app.log.session_exists(&id)? {
        return Err(ApiError::not_found("session"));
    }
    let waiter = app
        .worker()
        .session(&id)
        .lock()
        .questions
        .get(&qid)
        .cloned();
    let closed = || question_closed(&qid);
    let Some(waiter) = waiter else {
        if app.log.pg_pool().is_some() {
            return forward_answer(&app, &id, &qid, body.answer).await;
        }
        return match app.log.db().question_state(&qid)? {
            Some((sid, _)) if sid == id => Err(closed()),
            _ => Err(ApiError::not_found("question")),
        };
    };
    let (ack_tx, ack_rx) = oneshot::channel();
    waiter
        .send((body.answer, ack_tx))
        .await
        .map_err(|_| closed())?;
    // Answered only once `question.answered` is committed.
    ack_rx.await.map_err(|_| closed())?;
    Ok(AnswerReply::answered(qid))
}

/// The `200` answer to `POST .../questions/{qid}/answer`, sent once
/// `question.answered` is committed: `{"question_id": ..., "status":
/// "answered"}`. The field order is the key order on the wire.
#[derive(Debug, Serialize)]
pub(super) struct AnswerReply {
    /// The answered question.
    question_id: String,
    /// Always [`QuestionState::Answered`].
    status: QuestionState,
}

impl AnswerReply {
    fn answered(question_id: impl Into<String>) -> Json<AnswerReply> {
        Json(AnswerReply {
            question_id: question_id.into(),
            status: QuestionState::Answered,
        })
    }
}

/// An answer for a question this node's worker is not waiting on, on a
/// cluster: the node running its turn may be. Sent to every node; answered
/// once the log shows the question answered (or closed, or after
/// [`cluster::FORWARD_WAIT`]: `503`, retry). A question the log does not
/// know may live only in its turn's overlay for a moment: it gets
/// [`UNKNOWN_QUESTION_WAIT`] to appear.
async fn forward_answer(
    app: &App,
    session_id: &str,
    question_id: &str,
    answer: String,
) -> Result<Json<AnswerReply>, ApiError> {
    // The question's state, if it is one of this session's.
    let state = |app: &App| -> Result<Option<QuestionState>, ApiError> {
        let found = app.log.db().question_state(question_id)?;
        Ok(found
            .filter(|(sid, _)| sid == session_id)
            .map(|(_, state)| state))
    };
    let known = state(app)?;
    if known.is_some_and(|s| s != QuestionState::Pending) {
        return Err(question_closed(question_id));
    }
    let command = cluster::Command::Answer {
        session_id: session_id.to_owned(),
        question_id: question_id.to_owned(),
        answer,
    };
    cluster::send(app, &command).await?;
    let started = Instant::now();
    let mut sent = Instant::now();
    loop {
        tokio::time::sleep(cluster::POLL).await;
        // Sent again while the question waits: a turn kept waiting across
        // a node's restart has no waiter until a node adopts it (once its
        // lease ran out), and a node drops an answer it has no waiter for.
        if sent.elapsed() >= ANSWER_RESEND {
            cluster::send(app, &command).await?;
            sent = Instant::now();
        }
        match state(app)? {
            Some(QuestionState::Answered) => return Ok(AnswerReply::answered(question_id)),
            Some(QuestionState::Pending) => {}
            Some(_) => return Err(question_closed(question_id)),
            None if started.elapsed() >= UNKNOWN_QUESTION_WAIT => {
                return Err(ApiError::not_found("question"))
            }
            None => {}
        }
        if started.elapsed() >= cluster::FORWARD_WAIT {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "answer_not_delivered",
                format!("no node took the answer to {question_id} in time"),
            )
            .retry_after(Some(1)));
        }
    }
}

/// How often a forwarded answer is sent again while its question waits.
const ANSWER_RESEND: Duration = Duration::from_secs(1);

/// How long a forwarded answer waits for a question the log does not know.
const UNKNOWN_QUESTION_WAIT: Duration = Duration::from_secs(1);

fn question_closed(question_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "question_closed",
        format!("question {question_id} is not waiting for an answer"),
    )
}

pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    BodyBytes(body): BodyBytes,
) -> Result<(StatusCode, Json<CancelAccepted>), ApiError> {
    // The body is optional (PROTOCOL.md §4.4 had none): empty = `{}`.
    let body: CancelTurn = if body.is_empty() {
        CancelTurn::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))?
    };
    if !app.log.session_exists(&id)? {
        return Err(ApiError::not_found("session"));
    }
    let running = app.worker().session(&id).lock().running.clone();
    // A named turn is the only one stopped: a retried cancel of a turn that
    // already ended must not stop the next one.
    let named = |turn: &str| body.turn_id.as_deref().is_none_or(|t| t == turn);
    let mut turn_id = running.filter(|r| named(&r.turn_id)).map(|r| {
        r.cancel.notify_one();
        r.turn_id
    });
    if turn_id.is_none() {
        // On a cluster the turn may run on another node: it stops it.
        if let Some(remote) = cluster::running_turn(&app, &id).await?.filter(|t| named(t)) {
            cluster::send(
                &app,
                &cluster::Command::Cancel {
                    session_id: id.clone(),
                    turn_id: remote.clone(),
                },
            )
            .await?;
            turn_id = Some(remote);
        }
    }
    Ok((StatusCode::ACCEPTED, Json(CancelAccepted { turn_id })))
}
