//! The machine's requests, executed: the live stream (bytes in, as they
//! come), JSON pages, and the application's writes (send, answer, cancel).

use std::rc::Rc;

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use web_sys::AbortController;

use super::driver::Shared;
use super::error::WasmError;
use super::http::{self, Answer, Request};
use crate::core::json;
use crate::core::machine::{CoreError, FetchKind, RequestId};
use crate::core::protocol::ErrorBody;

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Reports a failure of request `id` before any answer, and forgets it.
fn fail(s: &Rc<Shared>, id: RequestId, e: WasmError) {
    let error = match e {
        WasmError::Timeout(ms) => CoreError::Timeout {
            after_ms: ms.into(),
        },
        WasmError::Credentials(why) => CoreError::Credentials(why),
        WasmError::Network(why) => CoreError::Network(why),
        e => CoreError::Network(e.to_string()),
    };
    s.finish(id, |m, now| m.handle_request_failed(id, error, now));
}

/// A non-2xx answer goes to the machine with its body (an `ErrorBody`).
fn http_error(s: &Rc<Shared>, id: RequestId, a: Answer) {
    s.finish(id, |m, now| {
        m.handle_http_error(id, a.status, a.retry_after.as_deref(), &a.body, now)
    });
}

/// A GET of `path` accepting `accept`.
fn get<'a>(path: &'a str, accept: &'a str, last_event_id: Option<&'a str>) -> Request<'a> {
    Request {
        method: "GET",
        path,
        accept,
        body: None,
        last_event_id,
        hold: false,
    }
}

/// `Action::OpenStream`: every body chunk is copied into wasm and fed to
/// the machine as it arrives; the machine parses SSE.
pub async fn run_stream(
    s: Rc<Shared>,
    id: RequestId,
    path: String,
    last_event_id: Option<String>,
    ctl: AbortController,
) {
    type Open = dyn FnMut(u16, Option<String>, Option<String>) -> bool;
    let open = {
        let s = s.clone();
        Closure::<Open>::new(
            move |status, content_type: Option<String>, retry_after: Option<String>| {
                s.feed(id, |m, now| {
                    m.handle_stream_opened(
                        id,
                        status,
                        content_type.as_deref(),
                        retry_after.as_deref(),
                        now,
                    )
                })
            },
        )
    };
    let chunk = {
        let s = s.clone();
        Closure::<dyn FnMut(Uint8Array) -> bool>::new(move |chunk: Uint8Array| {
            let bytes = chunk.to_vec();
            s.feed(id, |m, now| m.handle_stream_bytes(id, &bytes, now))
        })
    };
    // The closures live until the exchange settled: it never calls them after.
    let req = get(&path, "text/event-stream", last_event_id.as_deref());
    match s.http.send(req, &ctl, open.as_ref(), chunk.as_ref()).await {
        Err(e) => fail(&s, id, e),
        Ok(a) if !is_success(a.status) => http_error(&s, id, a),
        Ok(a) if a.ended => s.finish(id, |m, now| m.handle_stream_end(id, now)),
        // Stopped: no longer this client's stream, nothing to report.
        Ok(_) => {}
    }
}

/// `Action::Fetch`: a replay or event page, handed over whole. The
/// machine's own fetch timeout covers a slow body.
pub async fn run_fetch(
    s: Rc<Shared>,
    id: RequestId,
    path: String,
    kind: FetchKind,
    ctl: AbortController,
) {
    let none = JsValue::UNDEFINED;
    match s
        .http
        .send(get(&path, "application/json", None), &ctl, &none, &none)
        .await
    {
        Err(e) => fail(&s, id, e),
        Ok(a) if !is_success(a.status) => http_error(&s, id, a),
        Ok(a) => s.finish(id, |m, now| match kind {
            FetchKind::Replay => m.handle_replay_page(id, &a.body, now),
            FetchKind::Events => m.handle_event_page(id, &a.body, now),
        }),
    }
}

/// Attempts of one write before its error is returned.
const WRITE_ATTEMPTS: u32 = 5;

/// POSTs `body` to `path` and returns the answer's body. Network errors,
/// timeouts, 5xx and 429 are retried with the same body (writes carry
/// client-chosen ids, so a retry is idempotent); a 401/403 refreshes the
/// credentials once.
pub async fn post(s: Rc<Shared>, path: String, body: String) -> Result<Vec<u8>, WasmError> {
    let mut refreshed = false;
    let mut attempt = 0;
    loop {
        if s.is_closed() {
            return Err(WasmError::Closed);
        }
        let result = post_once(&s, &path, &body).await;
        if s.is_closed() {
            return Err(WasmError::Closed);
        }
        match result {
            Ok(bytes) => return Ok(bytes),
            Err(WasmError::Unauthorized(_)) if !refreshed => refreshed = true,
            Err(e) if e.is_transient() && attempt + 1 < WRITE_ATTEMPTS => {
                // Full jitter over an exponential bound: 250 ms, 500 ms, ...
                let bound = 250u32 << attempt;
                http::sleep((js_sys::Math::random() * bound as f64) as u32).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn post_once(s: &Rc<Shared>, path: &str, body: &str) -> Result<Vec<u8>, WasmError> {
    let ctl = AbortController::new().map_err(|e| WasmError::Network(super::js::error_text(&e)))?;
    let req = Request {
        method: "POST",
        path,
        accept: "application/json",
        body: Some(body),
        last_event_id: None,
        hold: true,
    };
    let none = JsValue::UNDEFINED;
    let a = s.http.send(req, &ctl, &none, &none).await?;
    if is_success(a.status) {
        return Ok(a.body);
    }
    if a.status == 401 || a.status == 403 {
        return Err(WasmError::Unauthorized(a.status));
    }
    let err: ErrorBody = json::from_slice(&a.body).unwrap_or_default();
    Err(WasmError::Http {
        status: a.status,
        code: err.error,
        message: err.message,
    })
}
