//! Writes (PROTOCOL.md §4.4). Each is answered only after what it wrote is
//! committed; a repeated `message_id` starts nothing.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use replay_core::protocol::{
    AnswerQuestion, CancelAccepted, CancelTurn, CreateSession, Event, MessageAccepted, PostMessage,
    Scope, SessionCreated, SessionCreatedReply,
};
use serde::Serialize;

use super::error::{ApiError, BodyBytes, JsonBody};
use crate::app::App;
use crate::store::QuestionState;
use crate::turns::{self, TurnsError};
use crate::worker::TurnsFull;

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

pub(super) async fn post_message(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PostMessage>,
) -> Result<(StatusCode, Json<MessageAccepted>), ApiError> {
    let turn_id = turns::post_message(&app, &id, &body.message_id, &body.text).await?;
    Ok((StatusCode::ACCEPTED, Json(MessageAccepted { turn_id })))
}

/// `Retry-After` of a message refused by a queue cap, in seconds.
const QUEUE_RETRY_AFTER_S: u64 = 2;

/// `Retry-After` of an answer no node took in time, in seconds.
const ANSWER_RETRY_AFTER_S: u64 = 1;

impl From<TurnsError> for ApiError {
    fn from(e: TurnsError) -> ApiError {
        let message = e.to_string();
        match e {
            TurnsError::InvalidMessageId => ApiError::bad_request("invalid_message_id", message),
            TurnsError::Directive(_) => ApiError::bad_request("directive_limit", message),
            TurnsError::NoSession => ApiError::not_found("session"),
            TurnsError::NoQuestion => ApiError::not_found("question"),
            TurnsError::QuestionClosed(_) => {
                ApiError::new(StatusCode::CONFLICT, "question_closed", message)
            }
            // A session's queue full is the client's doing (`429`); the
            // process's is the server's load (`503`). Nothing was written.
            TurnsError::Full(full) => {
                let status = match full {
                    TurnsFull::Session(_) => StatusCode::TOO_MANY_REQUESTS,
                    TurnsFull::Process(_) => StatusCode::SERVICE_UNAVAILABLE,
                };
                ApiError::new(status, "too_many_turns", message)
                    .retry_after(Some(QUEUE_RETRY_AFTER_S))
            }
            TurnsError::NotDelivered(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "answer_not_delivered",
                message,
            )
            .retry_after(Some(ANSWER_RETRY_AFTER_S)),
            TurnsError::Store(e) => e.into(),
        }
    }
}

pub(super) async fn answer(
    State(app): State<Arc<App>>,
    Path((id, qid)): Path<(String, String)>,
    JsonBody(body): JsonBody<AnswerQuestion>,
) -> Result<Json<AnswerReply>, ApiError> {
    turns::answer(&app, &id, &qid, body.answer).await?;
    Ok(Json(AnswerReply {
        question_id: qid,
        status: QuestionState::Answered,
    }))
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
    let turn_id = turns::cancel(&app, &id, body.turn_id.as_deref()).await?;
    Ok((StatusCode::ACCEPTED, Json(CancelAccepted { turn_id })))
}
