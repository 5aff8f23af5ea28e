//! Read endpoints: replay (§4.1), JSON event pages (§4.2), the transcript
//! (§7) and the process log.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use replay_core::protocol::{EventPage, ReplayPage, Scope};
use serde::Serialize;

use super::budget::Reserved;
use super::error::ApiError;
use super::params::{check_ahead, parse_cursor, Params};
use crate::app::App;
use crate::store::{Budget, LogInfo, Page, ProcessLog, ProcessState, StoreResult};
use crate::transcript;

pub(super) async fn replay(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::parse(q.as_deref());
    let after = params
        .get("after_cursor")
        .map(parse_cursor)
        .transpose()?
        .unwrap_or(0);
    let before = params.get("before_cursor").map(parse_cursor).transpose()?;
    let tail = params.tail()?;
    let budget = page_budget(&app, &params)?;
    let worker = app.worker();
    if !app.log.session_exists(&id)? {
        return Err(ApiError::not_found("session"));
    }
    let live = worker.session(&id);
    let boot_id = app.log.served_boot_id(&worker.boot_id);
    let reserved = reserve_page(&app).await?;
    // History, head, live_turn and tasks from one view (see `read_session`).
    let page = app
        .log
        .read_session(&id.clone(), live, move |snap, live_turn| {
            let Some(info) = snap.log_info(Scope::Session, &id)? else {
                return Ok(Err(ApiError::not_found("session")));
            };
            for c in [Some(after), before].into_iter().flatten() {
                if let Err(e) = check_ahead(c, &info.epoch, info.head) {
                    return Ok(Err(e));
                }
            }
            // The newest page first: from a turn boundary at least `tail`
            // events before the page's end (the head, or `before_cursor`).
            let end = before.unwrap_or(info.head);
            let start = match tail {
                Some(n) => snap.turn_boundary(&id, end, n)?,
                None => after,
            };
            let Page {
                events: history,
                more,
            } = match before {
                // Bounded by `before_cursor`: an older page, read forward.
                Some(end) => {
                    let budget = Budget {
                        events: budget.events.min(end.saturating_sub(start) as usize),
                        ..budget
                    };
                    if budget.events == 0 {
                        Page::default()
                    } else {
                        snap.page_within(Scope::Session, &id, start, budget)?
                    }
                }
                None => snap.page_within(Scope::Session, &id, start, budget)?,
            };
            let cursor = history.last().and_then(|e| e.seq).unwrap_or(start);
            let has_more = match before {
                Some(end) => cursor < end,
                None => more,
            };
            // An older page's end is not the head: the live turn and the
            // tasks belong to the newest page only.
            let (live_turn, tasks) = match before {
                Some(_) => (None, None),
                None => (live_turn, Some(snap.tasks(&id)?)),
            };
            Ok(Ok(ReplayPage {
                epoch: info.epoch,
                boot_id,
                cursor,
                head: info.head,
                has_more,
                history,
                live_turn,
                tasks,
                older_cursor: tail.map(|_| start),
            }))
        })
        .await??;
    reserved.json(&page)
}

/// A JSON event page of one scope log.
pub(super) async fn scope_page(
    app: &App,
    scope: Scope,
    id: String,
    params: &Params,
) -> Result<Response, ApiError> {
    let after = params
        .get("after_seq")
        .map(parse_cursor)
        .transpose()?
        .unwrap_or(0);
    let budget = page_budget(app, params)?;
    let reserved = reserve_page(app).await?;
    let page = app
        .log
        .read(move |snap| {
            let Some(info) = snap.log_info(scope, &id)? else {
                return Ok(Err(ApiError::not_found(scope.as_str())));
            };
            Ok(page_of(after, info, || {
                snap.page_within(scope, &id, after, budget)
            }))
        })
        .await??;
    reserved.json(&page)
}

/// The global JSON list (cursor = row id).
pub(super) async fn global_page(app: &App, params: &Params) -> Result<Response, ApiError> {
    let after = params
        .get("after_id")
        .or_else(|| params.get("after_seq"))
        .map(parse_cursor)
        .transpose()?
        .unwrap_or(0);
    let budget = page_budget(app, params)?;
    let reserved = reserve_page(app).await?;
    let page = app
        .log
        .read(move |snap| {
            let info = snap.global_info()?;
            Ok(page_of(after, info, || {
                snap.global_page_within(after, budget)
            }))
        })
        .await??;
    reserved.json(&page)
}

/// A page's budget: the `limit` asked for, and `--page-max-bytes` (a page
/// of large events stops early and says `has_more`; the client pages on).
fn page_budget(app: &App, params: &Params) -> Result<Budget, ApiError> {
    Ok(Budget {
        events: params.limit()?,
        bytes: app.cfg.page_max_bytes,
    })
}

/// One event page read in a snapshot whose head is `info.head`.
fn page_of(
    after: u64,
    info: LogInfo,
    read: impl FnOnce() -> StoreResult<Page>,
) -> Result<EventPage, ApiError> {
    check_ahead(after, &info.epoch, info.head)?;
    let Page { events, more } = read()?;
    Ok(EventPage {
        epoch: info.epoch,
        head: info.head,
        events,
        has_more: more,
    })
}

/// A page's room in the response budget before it is read: its events
/// decoded, then encoded (twice `--page-max-bytes`), and the rest of a
/// replay page (`live_turn`, tasks).
async fn reserve_page(app: &App) -> Result<Reserved, ApiError> {
    let bytes = app.cfg.page_max_bytes.saturating_mul(2) + (64 << 10);
    app.responses.reserve(bytes).await
}

pub(super) async fn transcript(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let max = app.cfg.transcript_max_events;
    let max_bytes = app.cfg.transcript_max_bytes;
    // The fold needs the whole session in memory: bounded, and checked
    // before anything is loaded.
    let sid = id.clone();
    let bytes = app
        .log
        .read(move |snap| {
            let Some(info) = snap.log_info(Scope::Session, &sid)? else {
                return Ok(Err(ApiError::not_found("session")));
            };
            if info.head > max {
                return Ok(Err(too_large(format!(
                    "the session has {} events; a transcript folds at most {max} \
                     (--transcript-max-events); read it with replay pages",
                    info.head
                ))));
            }
            let bytes = snap.log_bytes(Scope::Session, &sid)?;
            if bytes > max_bytes {
                return Ok(Err(too_large(format!(
                    "the session has {bytes} bytes of events; a transcript folds at most \
                     {max_bytes} (--transcript-max-bytes); read it with replay pages"
                ))));
            }
            Ok(Ok(bytes))
        })
        .await??;
    // Loaded, folded and encoded: about three times the events' bytes.
    let reserved = app
        .responses
        .reserve(usize::try_from(bytes.saturating_mul(3)).unwrap_or(usize::MAX) + (64 << 10))
        .await?;
    let transcript = app
        .log
        .read(move |snap| {
            let Some(info) = snap.log_info(Scope::Session, &id)? else {
                return Ok(Err(ApiError::not_found("session")));
            };
            let events = snap.page(Scope::Session, &id, 0, info.head as usize)?;
            let tasks = snap.tasks(&id)?;
            Ok(Ok(transcript::fold(&info.epoch, &events, tasks)))
        })
        .await??;
    reserved.json(&transcript)
}

fn too_large(message: String) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "transcript_too_large",
        message,
    )
}

pub(super) async fn process_log(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<ProcessLogReply>, ApiError> {
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
    let pid = id.clone();
    let log = app
        .log
        .read(move |snap| snap.process_log(&pid))
        .await?
        .ok_or_else(|| ApiError::not_found("process"))?;
    Ok(Json(ProcessLogReply::from_offset(id, log, offset)))
}

/// `GET /v1/processes/{id}/log?offset=N`: the log's bytes from `offset`.
/// The field order is the key order on the wire.
#[derive(Debug, Serialize)]
pub(super) struct ProcessLogReply {
    /// The log's length: the `offset` that reads what follows.
    next_offset: usize,
    /// Where `text` starts: the asked offset, clamped to the log and moved
    /// up to a character boundary.
    offset: usize,
    /// The process.
    process_id: String,
    /// Where it is.
    state: ProcessState,
    /// The log from `offset`.
    text: String,
}

impl ProcessLogReply {
    fn from_offset(process_id: String, log: ProcessLog, offset: usize) -> ProcessLogReply {
        let ProcessLog {
            log: mut text,
            state,
        } = log;
        let next_offset = text.len();
        let mut start = offset.min(next_offset);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text.drain(..start);
        ProcessLogReply {
            next_offset,
            offset: start,
            process_id,
            state,
            text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(log: &str, offset: usize) -> String {
        let log = ProcessLog {
            log: log.to_owned(),
            state: ProcessState::Running,
        };
        serde_json::to_string(&ProcessLogReply::from_offset("p_1".into(), log, offset)).unwrap()
    }

    #[test]
    fn process_log_starts_at_a_char_boundary_within_the_log() {
        // "é" is two bytes: offset 2 falls inside it and moves up to 3.
        assert_eq!(
            reply("aé\"b", 2),
            r#"{"next_offset":5,"offset":3,"process_id":"p_1","state":"running","text":"\"b"}"#
        );
        assert_eq!(
            reply("ab", 9),
            r#"{"next_offset":2,"offset":2,"process_id":"p_1","state":"running","text":""}"#
        );
    }
}
