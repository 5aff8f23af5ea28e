//! `/v1/admin/*`, present only with `--faults`: fault injection, a raw
//! append for load tests and for event types no path of the runtime
//! writes, and the runtime's own paths for team messages and worktrees
//! (what an operator or an agent's tool would drive).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use replay_core::protocol::{Envelope, Event, Scope};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, JsonBody};
use crate::app::App;
use crate::faults::FaultSpec;

pub(super) async fn add_fault(
    State(app): State<Arc<App>>,
    JsonBody(spec): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let spec: FaultSpec = serde_json::from_value(spec)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_fault", e.to_string()))?;
    let reply = match spec {
        FaultSpec::CloseStreams => {
            app.faults.close_streams();
            json!({"kind": "close_streams", "done": true})
        }
        FaultSpec::RestartWorker => {
            let (boot_id, recovered) = app.restart_worker().await?;
            crate::resume::go_on(&app, recovered);
            json!({"kind": "restart_worker", "done": true, "boot_id": boot_id})
        }
        FaultSpec::ProviderResumeFails { session_id } => {
            if !crate::provider::break_resume(&app.log.db(), &session_id)? {
                return Err(ApiError::not_found("session"));
            }
            json!({"kind": "provider_resume_fails", "done": true, "session_id": session_id})
        }
        FaultSpec::LoseWakeups { count } => {
            app.log.lose_wakeups(count);
            json!({"kind": "lose_wakeups", "done": true})
        }
        FaultSpec::Clear => {
            app.faults.add(FaultSpec::Clear);
            json!({"kind": "clear", "done": true})
        }
        spec => {
            let id = app.faults.add(spec);
            json!({"id": id, "active": app.faults.list()})
        }
    };
    Ok((StatusCode::CREATED, Json(reply)))
}

pub(super) async fn list_faults(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({ "faults": app.faults.list() }))
}

#[derive(Deserialize)]
pub(super) struct AppendBody {
    scope: Scope,
    scope_id: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    data: Option<Value>,
}

/// Longest scope id accepted from the admin API (as a `message_id`): it is
/// stored with every event of its log and named in every frame.
const SCOPE_ID_MAX: usize = 200;

/// Longest event type accepted from the admin API.
const TYPE_MAX: usize = 64;

fn valid_type(ty: &str) -> bool {
    (1..=TYPE_MAX).contains(&ty.len())
        && ty
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

pub(super) async fn append_event(
    State(app): State<Arc<App>>,
    JsonBody(body): JsonBody<AppendBody>,
) -> Result<(StatusCode, Json<Envelope>), ApiError> {
    // The type becomes an SSE `event:` line: a newline in it would forge
    // fields for every subscriber, now and on every replay.
    if !valid_type(&body.ty) {
        return Err(ApiError::bad_request(
            "invalid_event",
            format!("type must be 1..={TYPE_MAX} of [a-z0-9_.]"),
        ));
    }
    let data = body.data.unwrap_or_else(|| json!({})).to_string();
    let event = Event::decode(&body.ty, Some(&data))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_event", e.to_string()))?;
    if !(1..=SCOPE_ID_MAX).contains(&body.scope_id.len()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_event",
            format!("scope_id must be 1..={SCOPE_ID_MAX} bytes"),
        ));
    }
    let env = app
        .log
        .append_async(body.scope, &body.scope_id, event)
        .await?;
    Ok((StatusCode::CREATED, Json(env)))
}

/// `POST /v1/admin/teams/{id}/messages`.
#[derive(Deserialize)]
pub(super) struct TeamMessageBody {
    from: String,
    to: String,
    text: String,
}

/// Longest sender or recipient id accepted.
const MEMBER_MAX: usize = 200;

pub(super) async fn team_message(
    State(app): State<Arc<App>>,
    Path(team_id): Path<String>,
    JsonBody(body): JsonBody<TeamMessageBody>,
) -> Result<(StatusCode, Json<crate::deliveries::DeliveryRecord>), ApiError> {
    let bad = |what: &str| ApiError::bad_request("invalid_message", what);
    if !(1..=SCOPE_ID_MAX).contains(&team_id.len()) {
        return Err(bad("the team id must be 1..=200 bytes"));
    }
    if ![&body.from, &body.to]
        .iter()
        .all(|m| (1..=MEMBER_MAX).contains(&m.len()))
    {
        return Err(bad("from and to must be 1..=200 bytes"));
    }
    // The text becomes a message of the member: bounded as one.
    crate::agent::Directives::parse(&body.text)
        .map_err(|e| ApiError::bad_request("directive_limit", e.to_string()))?;
    let record = crate::team::send(&app, &team_id, &body.from, &body.to, &body.text)?;
    Ok((StatusCode::CREATED, Json(record)))
}

/// `POST /v1/admin/worktrees {op, ...}` (`worktrees::Op`).
pub(super) async fn worktree_op(
    State(app): State<Arc<App>>,
    JsonBody(op): JsonBody<Value>,
) -> Result<(StatusCode, Json<crate::worktrees::WorktreeRecord>), ApiError> {
    use crate::worktrees::{apply, Op, WorktreeError};
    let op: Op = serde_json::from_value(op)
        .map_err(|e| ApiError::bad_request("invalid_worktree_op", e.to_string()))?;
    let record = app.log.with_db(|db| {
        let mut envs = Vec::new();
        let out = apply(db, op, &mut envs);
        Ok((out, envs))
    })?;
    let record = record.map_err(|e| match e {
        WorktreeError::Store(e) => ApiError::from(e),
        WorktreeError::NotFound(_) => ApiError::not_found("worktree"),
        WorktreeError::NoSession(_) => {
            ApiError::new(StatusCode::CONFLICT, "no_session", e.to_string())
        }
        WorktreeError::Duplicate { .. } | WorktreeError::Conflict(_) => {
            ApiError::new(StatusCode::CONFLICT, "worktree_conflict", e.to_string())
        }
        WorktreeError::InvalidPath => ApiError::bad_request("invalid_worktree_op", e.to_string()),
    })?;
    Ok((StatusCode::CREATED, Json(record)))
}

#[cfg(test)]
mod tests {
    use super::valid_type;

    #[test]
    fn event_types_are_a_safe_alphabet() {
        for ok in ["team.message", "x.custom_2", "a"] {
            assert!(valid_type(ok), "{ok}");
        }
        for bad in ["", "a\nb", "A", "a b", "a:b", "é", &"a".repeat(65)] {
            assert!(!valid_type(bad), "{bad:?}");
        }
    }
}
