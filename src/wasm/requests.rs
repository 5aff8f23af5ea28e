//! The machine's requests, carried out: the live stream (bytes in, as they
//! come), JSON pages and writes. A request is started and then forgotten
//! until `browser.js` reports on it by id; each answer, chunk or failure is
//! delivered to the machine as it is, and every retry and classification
//! is the machine's.

use js_sys::Uint8Array;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::AbortController;

use super::error::WasmError;
use super::http::{Http, Request};
use crate::core::machine::{Action, CoreError, FetchKind, Machine, RequestId};

/// Which machine input a request's answer becomes.
#[derive(Clone, Copy)]
enum Purpose {
    /// `Action::OpenStream`: the body went to the machine chunk by chunk.
    Stream,
    /// `Action::Fetch`: a replay or event page, read whole.
    Page(FetchKind),
    /// `Action::Post`: one attempt of a write, read whole (the machine
    /// decides on retries).
    Post,
}

/// An in-flight request; dropping it aborts the fetch (a no-op once answered).
pub struct Req {
    /// The machine's id for it.
    pub id: RequestId,
    purpose: Purpose,
    ctl: AbortController,
}

impl Drop for Req {
    fn drop(&mut self) {
        self.ctl.abort();
    }
}

/// Starts the request an `OpenStream`, `Fetch` or `Post` asks for; other
/// actions are not requests.
pub fn start(http: &Http, action: &Action) -> Option<Req> {
    let json = "application/json";
    let (id, purpose, request) = match action {
        Action::OpenStream {
            id,
            path_and_query,
            last_event_id,
        } => {
            let request = Request {
                last_event_id: last_event_id.as_deref(),
                stream: true,
                ..Request::get(path_and_query, "text/event-stream")
            };
            (*id, Purpose::Stream, request)
        }
        Action::Fetch {
            id,
            path_and_query,
            kind,
        } => (
            *id,
            Purpose::Page(*kind),
            Request::get(path_and_query, json),
        ),
        Action::Post {
            id,
            path_and_query,
            body,
        } => {
            let request = Request {
                method: "POST",
                body: Some(body),
                hold: true,
                ..Request::get(path_and_query, json)
            };
            (*id, Purpose::Post, request)
        }
        _ => return None,
    };
    let ctl = http.start(id, request);
    Some(Req { id, purpose, ctl })
}

impl Req {
    /// `settled(id, status, retryAfter, body)`, delivered: a non-2xx answer
    /// with its body (an `ErrorBody`), else by purpose.
    pub fn settled(
        &self,
        m: &mut Machine,
        status: u16,
        retry_after: Option<String>,
        body: JsValue,
        now: u64,
    ) {
        let id = self.id;
        // A body read whole is bytes; a streamed one is true at its end.
        let bytes = || {
            if body.is_object() {
                body.unchecked_ref::<Uint8Array>().to_vec()
            } else {
                Vec::new()
            }
        };
        if !(200..300).contains(&status) {
            return m.handle_http_error(id, status, retry_after.as_deref(), &bytes(), now);
        }
        match self.purpose {
            Purpose::Stream if body.is_truthy() => m.handle_stream_end(id, now),
            // Stopped: no longer this client's stream, nothing to report.
            Purpose::Stream => {}
            Purpose::Page(FetchKind::Replay) => m.handle_replay_page(id, &bytes(), now),
            Purpose::Page(FetchKind::Events) => m.handle_event_page(id, &bytes(), now),
            Purpose::Post => m.handle_post_answer(id, &bytes(), now),
        }
    }

    /// A failure before any answer, delivered.
    pub fn failed(&self, m: &mut Machine, error: WasmError, now: u64) {
        m.handle_request_failed(self.id, CoreError::from(error), now);
    }
}
