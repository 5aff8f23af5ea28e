//! The Rust face of the browser client, for Yew, Leptos and other Rust UIs.
//! The JS `ReplayClient` is a thin wrapper around it.

use std::future::Future;
use std::rc::{Rc, Weak};

use super::driver::{ClientNotice, Shared};
use super::error::WasmError;
use super::options::Options;
use super::requests;
use crate::core::fold::View;
use crate::core::json;
use crate::core::machine::{Counters, Position, Status, Target};
use crate::core::protocol::{AnswerQuestion, MessageAccepted, PostMessage, Transcript};

/// A client following one scope: connected on creation, closed on
/// [`close`](Client::close) or drop.
///
/// ```no_run
/// use replay_client::wasm::{Client, Options};
///
/// let client = Client::connect(Options::session("http://127.0.0.1:8787", "ses_1"));
/// // Re-render whenever something changed (at most once per frame).
/// let weak = client.downgrade();
/// let _sub = client.on_change(move || {
///     if let Some(c) = weak.upgrade() {
///         c.with_view(|view| {
///             if let Some(session) = view.and_then(|v| v.as_session()) {
///                 log(session.items().len());
///             }
///         });
///     }
/// });
/// wasm_bindgen_futures::spawn_local(async move {
///     let turn_id = client.send("hello", None).await.unwrap();
///     log(turn_id.len());
/// });
/// # fn log<T>(_: T) {}
/// ```
pub struct Client {
    shared: Rc<Shared>,
}

/// A non-owning handle to a [`Client`] (for callbacks that must not keep it alive).
#[derive(Clone)]
pub struct WeakClient {
    shared: Weak<Shared>,
}

impl WeakClient {
    /// A temporary handle, if the client still exists. Dropping it does not
    /// close the client.
    pub fn upgrade(&self) -> Option<ClientRef> {
        self.shared.upgrade().map(|shared| ClientRef { shared })
    }
}

/// A borrowed view of a live [`Client`]: reads only, no close on drop.
pub struct ClientRef {
    shared: Rc<Shared>,
}

impl ClientRef {
    /// See [`Client::with_view`].
    pub fn with_view<R>(&self, f: impl FnOnce(Option<&View>) -> R) -> R {
        with_view(&self.shared, f)
    }

    /// See [`Client::status`].
    pub fn status(&self) -> Status {
        self.shared.inner.borrow().status()
    }
}

/// Keeps a change callback registered; dropping it unsubscribes.
pub struct Subscription {
    shared: Weak<Shared>,
    id: u32,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(s) = self.shared.upgrade() {
            s.unsubscribe(self.id);
        }
    }
}

fn with_view<R>(shared: &Shared, f: impl FnOnce(Option<&View>) -> R) -> R {
    let inner = shared.inner.borrow();
    f(inner.machine.as_ref().map(|m| m.view()))
}

impl Client {
    /// Starts following `options.target` at once. With a synchronous storage
    /// the stored state is shown immediately; with IndexedDB or an async
    /// adapter the status stays `connecting` until it is read.
    pub fn connect(options: Options) -> Client {
        Client {
            shared: Shared::connect(options),
        }
    }

    pub(crate) fn shared(&self) -> &Rc<Shared> {
        &self.shared
    }

    /// A handle that does not keep the client alive.
    pub fn downgrade(&self) -> WeakClient {
        WeakClient {
            shared: Rc::downgrade(&self.shared),
        }
    }

    /// Calls `f` after changes, paced by [`Options::notify`]. The callback
    /// runs with no borrow held: it may read the view or close the client.
    pub fn on_change(&self, f: impl Fn() + 'static) -> Subscription {
        Subscription {
            shared: Rc::downgrade(&self.shared),
            id: self.shared.subscribe(Rc::new(f)),
        }
    }

    /// Reads the folded view (`None` until the stored value is read). Do not
    /// call into the client from `f`.
    pub fn with_view<R>(&self, f: impl FnOnce(Option<&View>) -> R) -> R {
        with_view(&self.shared, f)
    }

    /// Connection status.
    pub fn status(&self) -> Status {
        self.shared.inner.borrow().status()
    }

    /// Running totals.
    pub fn counters(&self) -> Counters {
        let inner = self.shared.inner.borrow();
        inner
            .machine
            .as_ref()
            .map(|m| m.counters().clone())
            .unwrap_or_default()
    }

    /// Epoch, cursor and last applied event.
    pub fn position(&self) -> Position {
        let inner = self.shared.inner.borrow();
        inner
            .machine
            .as_ref()
            .map(|m| m.position().clone())
            .unwrap_or_default()
    }

    /// The canonical transcript (session targets).
    pub fn transcript(&self) -> Option<Transcript> {
        let inner = self.shared.inner.borrow();
        inner.machine.as_ref().and_then(|m| m.transcript())
    }

    /// Notices so far (the last 50).
    pub fn notices(&self) -> Vec<ClientNotice> {
        self.shared.inner.borrow().notices.iter().cloned().collect()
    }

    /// What is followed.
    pub fn target(&self) -> &Target {
        &self.shared.target
    }

    /// `local`, `session`, `indexeddb`, `memory`, `custom` or `memory-fallback`.
    pub fn storage_label(&self) -> &'static str {
        self.shared.store.borrow().label()
    }

    /// Sends a user message; resolves to the turn id. `message_id` defaults
    /// to a fresh random id; retries reuse it, so the server starts the turn
    /// once however often the request is repeated.
    pub fn send(
        &self,
        text: &str,
        message_id: Option<String>,
    ) -> impl Future<Output = Result<String, WasmError>> + 'static {
        let body = PostMessage {
            message_id: message_id.unwrap_or_else(fresh_message_id),
            text: text.to_owned(),
        };
        let path = self.session_path("/messages");
        let shared = self.shared.clone();
        async move {
            let body = json::to_string(&body).map_err(|e| WasmError::BadJson(e.to_string()))?;
            let answer = requests::post(shared, path?, body).await?;
            let accepted: MessageAccepted =
                json::from_slice(&answer).map_err(|e| WasmError::BadJson(e.to_string()))?;
            Ok(accepted.turn_id)
        }
    }

    /// Answers a pending question.
    pub fn answer(
        &self,
        question_id: &str,
        answer: &str,
    ) -> impl Future<Output = Result<(), WasmError>> + 'static {
        let path = self
            .session_path("/questions/")
            .map(|p| p + &encode(question_id) + "/answer");
        let body = json::to_string(&AnswerQuestion {
            answer: answer.to_owned(),
        });
        let shared = self.shared.clone();
        async move {
            let body = body.map_err(|e| WasmError::BadJson(e.to_string()))?;
            requests::post(shared, path?, body).await.map(|_| ())
        }
    }

    /// Stops the running turn (closing a stream never does).
    pub fn cancel(&self) -> impl Future<Output = Result<(), WasmError>> + 'static {
        let path = self.session_path("/cancel");
        let shared = self.shared.clone();
        async move {
            requests::post(shared, path?, "{}".to_owned())
                .await
                .map(|_| ())
        }
    }

    /// Stops everything; the last state is flushed to storage and nothing is
    /// dispatched afterwards. Idempotent.
    pub fn close(&self) {
        self.shared.close();
    }

    /// `/v1/sessions/{id}` + `suffix`, or an error for other scopes.
    fn session_path(&self, suffix: &str) -> Result<String, WasmError> {
        match &self.shared.target {
            Target::Scoped { scope_id, .. } if self.shared.target.is_session() => {
                Ok("/v1/sessions/".to_owned() + &encode(scope_id) + suffix)
            }
            _ => Err(WasmError::InvalidOptions(
                "writes need a session client".to_owned(),
            )),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shared.close();
    }
}

fn encode(segment: &str) -> String {
    String::from(js_sys::encode_uri_component(segment))
}

/// `msg_` and 64 random bits in hex.
fn fresh_message_id() -> String {
    let hi = (js_sys::Math::random() * 4_294_967_296.0) as u64;
    let lo = (js_sys::Math::random() * 4_294_967_296.0) as u64;
    let n = (hi << 32) | lo;
    let mut id = String::from("msg_");
    for shift in (0..16).rev() {
        let d = ((n >> (shift * 4)) & 0xf) as u32;
        id.push(char::from_digit(d, 16).unwrap_or('0'));
    }
    id
}
