//! Read endpoints: replay (§4.1), JSON event pages (§4.2), the transcript
//! (§7) and the process log.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use replay_client::core::protocol::{EventPage, ReplayPage, Scope};
use serde_json::json;

use super::{check_ahead, parse_cursor, ApiError, Params};
use crate::app::App;
use crate::transcript;

pub(super) async fn replay(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<ReplayPage>, ApiError> {
    let params = Params::parse(q.as_deref());
    let after = params
        .get("after_cursor")
        .map(parse_cursor)
        .transpose()?
        .unwrap_or(0);
    let limit = params.limit()?;
    let worker = app.worker();
    if !app.log.db().session_exists(&id) {
        return Err(ApiError::not_found("session"));
    }
    // The session lock, then the store lock (the order every writer uses):
    // the agent commits its reply and clears the overlay under the session
    // lock, so history and live_turn are read as one consistent view.
    let live = worker.session(&id);
    let st = live.lock();
    let live_turn = st.live_turn.clone();
    let db = app.log.db();
    let info = db
        .log_info(Scope::Session, &id)
        .ok_or_else(|| ApiError::not_found("session"))?;
    check_ahead(after, &info.epoch, info.head)?;
    let mut history = db.page(Scope::Session, &id, after, limit + 1)?;
    let has_more = history.len() > limit;
    history.truncate(limit);
    let cursor = history.last().and_then(|e| e.seq).unwrap_or(after);
    let tasks = db.tasks(&id)?;
    Ok(Json(ReplayPage {
        epoch: info.epoch,
        boot_id: worker.boot_id.clone(),
        cursor,
        head: info.head,
        has_more,
        history,
        live_turn,
        tasks: Some(tasks),
    }))
}

/// A JSON event page of one scope log.
pub(super) fn scope_page(
    app: &App,
    scope: Scope,
    id: &str,
    params: &Params,
) -> Result<Json<EventPage>, ApiError> {
    let after = params
        .get("after_seq")
        .map(parse_cursor)
        .transpose()?
        .unwrap_or(0);
    let limit = params.limit()?;
    let db = app.log.db();
    let info = db
        .log_info(scope, id)
        .ok_or_else(|| ApiError::not_found(scope.as_str()))?;
    check_ahead(after, &info.epoch, info.head)?;
    let mut events = db.page(scope, id, after, limit + 1)?;
    let has_more = events.len() > limit;
    events.truncate(limit);
    Ok(Json(EventPage {
        epoch: info.epoch,
        head: info.head,
        events,
        has_more,
    }))
}

/// The global JSON list (cursor = row id).
pub(super) fn global_page(app: &App, params: &Params) -> Result<Json<EventPage>, ApiError> {
    let after = params
        .get("after_id")
        .or_else(|| params.get("after_seq"))
        .map(parse_cursor)
        .transpose()?
        .unwrap_or(0);
    let limit = params.limit()?;
    let db = app.log.db();
    let info = db.global_info();
    check_ahead(after, &info.epoch, info.head)?;
    let mut events = db.global_page(after, limit + 1)?;
    let has_more = events.len() > limit;
    events.truncate(limit);
    Ok(Json(EventPage {
        epoch: info.epoch,
        head: info.head,
        events,
        has_more,
    }))
}

pub(super) async fn transcript(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<replay_client::core::protocol::Transcript>, ApiError> {
    let db = app.log.db();
    let info = db
        .log_info(Scope::Session, &id)
        .ok_or_else(|| ApiError::not_found("session"))?;
    let events = db.page(Scope::Session, &id, 0, usize::MAX >> 1)?;
    let tasks = db.tasks(&id)?;
    Ok(Json(transcript::fold(&info.epoch, &events, tasks)))
}

pub(super) async fn process_log(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let params = Params::parse(q.as_deref());
    let offset = match params.get("offset") {
        None => 0,
        Some(v) => v.parse::<usize>().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_offset",
                format!("offset {v:?}"),
            )
        })?,
    };
    let (log, state) = app
        .log
        .db()
        .process_log(&id)?
        .ok_or_else(|| ApiError::not_found("process"))?;
    let mut start = offset.min(log.len());
    while !log.is_char_boundary(start) {
        start += 1;
    }
    Ok(Json(json!({
        "process_id": id,
        "state": state,
        "offset": start,
        "next_offset": log.len(),
        "text": &log[start..],
    })))
}
