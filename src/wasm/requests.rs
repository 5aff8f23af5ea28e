//! The machine's requests, carried out: the live stream, JSON pages and
//! writes alike. A request is started and then forgotten until `browser.js`
//! reports on it by id; the driver delivers each fact of the answer (head,
//! body chunks, end, failure) to the machine's one response handler, which
//! decides what it is.

use web_sys::AbortController;

use super::http::{Http, Request};
use crate::core::machine::{Action, RequestId};

/// An in-flight request; dropping it aborts the fetch (a no-op once answered).
pub struct Req {
    /// The machine's id for it.
    pub id: RequestId,
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
    let (id, request) = match action {
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
            (*id, request)
        }
        Action::Fetch {
            id, path_and_query, ..
        } => (*id, Request::get(path_and_query, json)),
        Action::Post {
            id,
            path_and_query,
            body,
        } => {
            let request = Request {
                method: "POST",
                body: Some(body),
                ..Request::get(path_and_query, json)
            };
            (*id, request)
        }
        _ => return None,
    };
    let ctl = http.start(id, request);
    Some(Req { id, ctl })
}
