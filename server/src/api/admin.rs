//! `/v1/admin/*`, present only with `--faults`: fault injection and a raw
//! append for driving scopes the scripted agent does not write (team,
//! worktree) and for load tests.

use std::sync::Arc;

use axum::extract::State;
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
            let boot_id = app.restart_worker().await?;
            json!({"kind": "restart_worker", "done": true, "boot_id": boot_id})
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
