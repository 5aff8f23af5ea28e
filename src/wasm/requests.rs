//! The machine's requests, carried out: the live stream, JSON pages and
//! writes alike. A request is started and then forgotten until `browser.js`
//! reports on it by id; the executor delivers each fact of the answer
//! (head, body chunks, end, failure) to the machine's one response handler,
//! which decides what it is. A client connected with `multiplex` gets its
//! scoped stream from the hub's multiplexed connection instead (`Req` in
//! `browser_io.rs`).

use web_sys::AbortController;

use super::http::{abort_request, Http, Request};
use crate::core::machine::{Action, RequestId};

/// A `fetch` in flight; dropping it aborts it (a no-op once answered).
pub struct Fetch {
    ctl: AbortController,
}

impl Drop for Fetch {
    fn drop(&mut self) {
        abort_request(&self.ctl);
    }
}

/// Starts the request an `OpenStream`, `Fetch` or `Post` asks for; other
/// actions are not requests.
pub fn start(http: &Http, action: &Action) -> Option<Fetch> {
    let json = "application/json";
    let (id, request) = match action {
        Action::OpenStream {
            id,
            path_and_query,
            last_event_id,
            ..
        } => {
            let request = Request {
                last_event_id: last_event_id.as_deref(),
                stream: true,
                ..Request::get(path_and_query, "text/event-stream")
            };
            (*id, request)
        }
        Action::Fetch {
            id, path_and_query, ..
        } => (*id, Request::get(path_and_query, json)),
        Action::Post {
            id,
            path_and_query,
            body,
            claim,
        } => {
            let request = Request {
                method: "POST",
                body: Some(body),
                claim: claim.as_deref(),
                ..Request::get(path_and_query, json)
            };
            (*id, request)
        }
        _ => return None,
    };
    Some(fetch(http, id, request))
}

/// Starts request `id`.
pub fn fetch(http: &Http, id: RequestId, request: Request<'_>) -> Fetch {
    Fetch {
        ctl: http.start(id, request),
    }
}
