//! The machine's requests, carried out: the live stream (bytes in, as they
//! come), JSON pages and writes. Each answer, chunk or failure is delivered
//! to the machine as it is; every retry and classification is the machine's.

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use web_sys::AbortController;

use super::error::WasmError;
use super::http::{Answer, Http, Request};
use super::port::Port;
use crate::core::machine::{CoreError, FetchKind, RequestId};

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Reports a failure of request `id` before any answer, and forgets it.
fn fail(port: &impl Port, id: RequestId, e: WasmError) {
    let error = CoreError::from(e);
    port.finish(id, |m, now| m.handle_request_failed(id, error, now));
}

/// A non-2xx answer goes to the machine with its body (an `ErrorBody`).
fn http_error(port: &impl Port, id: RequestId, a: Answer) {
    port.finish(id, |m, now| {
        m.handle_http_error(id, a.status, a.retry_after.as_deref(), &a.body, now)
    });
}

/// `Action::OpenStream`: every body chunk is copied into wasm and fed to
/// the machine as it arrives; the machine parses SSE.
pub async fn run_stream<P: Port + Clone + 'static>(
    port: P,
    http: &Http,
    id: RequestId,
    path: String,
    last_event_id: Option<String>,
    ctl: AbortController,
) {
    type Open = dyn FnMut(u16, Option<String>, Option<String>) -> bool;
    let open = {
        let port = port.clone();
        Closure::<Open>::new(
            move |status, content_type: Option<String>, retry_after: Option<String>| {
                port.feed(id, |m, now| {
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
        let port = port.clone();
        Closure::<dyn FnMut(Uint8Array) -> bool>::new(move |chunk: Uint8Array| {
            let bytes = chunk.to_vec();
            port.feed(id, |m, now| m.handle_stream_bytes(id, &bytes, now))
        })
    };
    // The closures live until the exchange settled: it never calls them after.
    let req = Request::get(&path, "text/event-stream", last_event_id.as_deref());
    match http.send(req, &ctl, open.as_ref(), chunk.as_ref()).await {
        Err(e) => fail(&port, id, e),
        Ok(a) if !is_success(a.status) => http_error(&port, id, a),
        Ok(a) if a.ended => port.finish(id, |m, now| m.handle_stream_end(id, now)),
        // Stopped: no longer this client's stream, nothing to report.
        Ok(_) => {}
    }
}

/// A request whose answer is read whole: a page (`Action::Fetch`) or one
/// attempt of a write (`Action::Post`, the machine decides on retries).
pub enum Exchange {
    /// A replay or event page; the machine's own fetch timeout covers a slow body.
    Page {
        /// Path and query.
        path: String,
        /// Which handler takes the body.
        kind: FetchKind,
    },
    /// A write's JSON body, POSTed; the deadline covers the whole answer.
    Post {
        /// Path.
        path: String,
        /// The JSON body.
        body: String,
    },
}

/// `Action::Fetch` and `Action::Post`: the whole answer goes to the machine.
pub async fn run_exchange(
    port: impl Port,
    http: &Http,
    id: RequestId,
    exchange: Exchange,
    ctl: AbortController,
) {
    let none = JsValue::UNDEFINED;
    let req = match &exchange {
        Exchange::Page { path, .. } => Request::get(path, "application/json", None),
        Exchange::Post { path, body } => Request {
            method: "POST",
            path,
            accept: "application/json",
            body: Some(body),
            last_event_id: None,
            hold: true,
        },
    };
    match http.send(req, &ctl, &none, &none).await {
        Err(e) => fail(&port, id, e),
        Ok(a) if !is_success(a.status) => http_error(&port, id, a),
        Ok(a) => port.finish(id, |m, now| match exchange {
            Exchange::Page {
                kind: FetchKind::Replay,
                ..
            } => m.handle_replay_page(id, &a.body, now),
            Exchange::Page {
                kind: FetchKind::Events,
                ..
            } => m.handle_event_page(id, &a.body, now),
            Exchange::Post { .. } => m.handle_post_answer(id, &a.body, now),
        }),
    }
}
