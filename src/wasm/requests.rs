//! The machine's requests, executed: the live stream (bytes in, as they
//! come), JSON pages, and the application's writes (send, answer, cancel).

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::JsValue;
use web_sys::{AbortController, Response};

use super::driver::Shared;
use super::error::WasmError;
use super::http::{self, BodyEnd, Deadline};
use crate::core::json;
use crate::core::machine::{FetchKind, RequestId};
use crate::core::protocol::ErrorBody;

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Reports a transport failure of request `id` and forgets it.
fn fail(s: &Rc<Shared>, id: RequestId, e: WasmError) {
    let msg = e.to_string();
    s.finish(id, |m, now| m.handle_network_error(id, &msg, now));
}

/// A non-2xx answer goes to the machine with its body (an `ErrorBody`).
async fn http_error(s: &Rc<Shared>, id: RequestId, resp: &Response) {
    let status = resp.status();
    let retry_after = http::header(resp, "retry-after");
    let body = http::read_body(resp).await.unwrap_or_default();
    s.finish(id, |m, now| {
        m.handle_http_error(id, status, retry_after.as_deref(), &body, now)
    });
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
    let ms = s.http.connect_timeout_ms;
    let deadline = Deadline::start(ms, &ctl);
    let sent = s
        .http
        .send(
            "GET",
            &path,
            "text/event-stream",
            None,
            last_event_id.as_deref(),
            &ctl,
        )
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return fail(&s, id, deadline.explain(e, ms)),
    };
    if !is_success(resp.status()) {
        drop(deadline);
        return http_error(&s, id, &resp).await;
    }
    let status = resp.status();
    let content_type = http::header(&resp, "content-type");
    let retry_after = http::header(&resp, "retry-after");
    let opened = s.feed(id, |m, now| {
        m.handle_stream_opened(
            id,
            status,
            content_type.as_deref(),
            retry_after.as_deref(),
            now,
        )
    });
    if !opened {
        return;
    }
    let Some(reader) = http::reader(&resp) else {
        return s.finish(id, |m, now| m.handle_stream_end(id, now));
    };
    // Armed until the first body byte: headers alone do not prove liveness.
    let first_byte = Rc::new(RefCell::new(Some(deadline)));
    let on_chunk = {
        let (s, first_byte) = (s.clone(), first_byte.clone());
        move |bytes: Vec<u8>| {
            first_byte.borrow_mut().take();
            s.feed(id, |m, now| m.handle_stream_bytes(id, &bytes, now))
        }
    };
    match http::read_chunks(&reader, on_chunk).await {
        Ok(BodyEnd::Done) => s.finish(id, |m, now| m.handle_stream_end(id, now)),
        // No longer this client's stream: nothing to report.
        Ok(BodyEnd::Stopped) => {}
        Err(e) => {
            let e = match first_byte.borrow_mut().take() {
                Some(d) => d.explain(e, ms),
                None => e,
            };
            fail(&s, id, e);
        }
    }
}

/// `Action::Fetch`: a replay or event page, handed over whole.
pub async fn run_fetch(
    s: Rc<Shared>,
    id: RequestId,
    path: String,
    kind: FetchKind,
    ctl: AbortController,
) {
    let ms = s.http.connect_timeout_ms;
    let deadline = Deadline::start(ms, &ctl);
    let sent = s
        .http
        .send("GET", &path, "application/json", None, None, &ctl)
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return fail(&s, id, deadline.explain(e, ms)),
    };
    // The machine's own fetch timeout covers a slow body.
    drop(deadline);
    if !is_success(resp.status()) {
        return http_error(&s, id, &resp).await;
    }
    match http::read_body(&resp).await {
        Ok(body) => s.finish(id, |m, now| match kind {
            FetchKind::Replay => m.handle_replay_page(id, &body, now),
            FetchKind::Events => m.handle_event_page(id, &body, now),
        }),
        Err(e) => fail(&s, id, e),
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
    let ctl = AbortController::new().map_err(|e| WasmError::Network(js_text(&e)))?;
    let ms = s.http.connect_timeout_ms;
    let deadline = Deadline::start(ms, &ctl);
    let resp = s
        .http
        .send("POST", path, "application/json", Some(body), None, &ctl)
        .await
        .map_err(|e| deadline.explain(e, ms))?;
    let status = resp.status();
    let bytes = http::read_body(&resp)
        .await
        .map_err(|e| deadline.explain(e, ms))?;
    if is_success(status) {
        return Ok(bytes);
    }
    if status == 401 || status == 403 {
        return Err(WasmError::Unauthorized(status));
    }
    let err: ErrorBody = json::from_slice(&bytes).unwrap_or_default();
    Err(WasmError::Http {
        status,
        code: err.error,
        message: err.message,
    })
}

fn js_text(e: &JsValue) -> String {
    super::js::error_text(e)
}
