//! The Rust face of the browser client, for Yew, Leptos and other Rust UIs.
//! The JS `ReplayClient` is a thin wrapper around it.

use std::future::Future;
use std::rc::{Rc, Weak};

use wasm_bindgen::JsValue;

use super::driver::Driver;
use super::error::WasmError;
use super::options::{self, Options};
use crate::core::fold::View;
use crate::core::machine::{
    ClientNotice, Counters, Machine, PendingMessage, Position, Status, Target, Write, WriteOutcome,
};
use crate::core::protocol::Transcript;
use crate::exec::WriteFuture;

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
    driver: Rc<Driver>,
}

/// A non-owning handle to a [`Client`] (for callbacks that must not keep it alive).
#[derive(Clone)]
pub struct WeakClient {
    driver: Weak<Driver>,
}

impl WeakClient {
    /// A temporary handle, if the client still exists. Dropping it does not
    /// close the client.
    pub fn upgrade(&self) -> Option<ClientRef> {
        self.driver.upgrade().map(|driver| ClientRef { driver })
    }
}

/// A borrowed view of a live [`Client`]: reads only, no close on drop.
pub struct ClientRef {
    driver: Rc<Driver>,
}

impl ClientRef {
    /// See [`Client::with_view`].
    pub fn with_view<R>(&self, f: impl FnOnce(Option<&View>) -> R) -> R {
        with_view(&self.driver, f)
    }

    /// See [`Client::status`].
    pub fn status(&self) -> Status {
        self.driver.with_machine(Machine::status)
    }
}

/// Keeps a change callback registered; dropping it unsubscribes.
pub struct Subscription {
    driver: Weak<Driver>,
    id: u32,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(d) = self.driver.upgrade() {
            d.unsubscribe(self.id);
        }
    }
}

fn with_view<R>(driver: &Driver, f: impl FnOnce(Option<&View>) -> R) -> R {
    driver.with_machine(|m| f((!m.is_loading()).then(|| m.view())))
}

impl Client {
    /// Starts following `options.target` at once. With a synchronous storage
    /// the stored state is shown immediately; with IndexedDB or an async
    /// adapter the status stays `connecting` until it is read.
    pub fn connect(options: Options) -> Client {
        let get_token = options
            .get_token
            .as_ref()
            .map_or(JsValue::NULL, options::token_function);
        Client {
            driver: Driver::connect(options, &get_token, false),
        }
    }

    /// A client whose driver also keeps the JS snapshot (`ReplayClient`);
    /// `get_token` is the caller's JS function, or null.
    pub(crate) fn connect_for_js(options: Options, get_token: &JsValue) -> Client {
        Client {
            driver: Driver::connect(options, get_token, true),
        }
    }

    pub(crate) fn driver(&self) -> &Rc<Driver> {
        &self.driver
    }

    /// A handle that does not keep the client alive.
    pub fn downgrade(&self) -> WeakClient {
        WeakClient {
            driver: Rc::downgrade(&self.driver),
        }
    }

    /// Calls `f` after changes, paced by [`Options::notify`]. The callback
    /// runs with no borrow held: it may read the view or close the client.
    pub fn on_change(&self, f: impl Fn() + 'static) -> Subscription {
        Subscription {
            driver: Rc::downgrade(&self.driver),
            id: self.driver.subscribe(Rc::new(f)),
        }
    }

    /// Reads the folded view (`None` until the stored value is read). Do not
    /// call into the client from `f`.
    pub fn with_view<R>(&self, f: impl FnOnce(Option<&View>) -> R) -> R {
        with_view(&self.driver, f)
    }

    /// Connection status (a 401's message says how to send credentials
    /// when none were: `Options::unauthorized_hint`).
    pub fn status(&self) -> Status {
        let hint = self.driver.io().hint();
        hint.status(self.driver.with_machine(Machine::status))
    }

    /// Running totals.
    pub fn counters(&self) -> Counters {
        self.driver.with_machine(|m| m.counters().clone())
    }

    /// Epoch, cursor and last applied event.
    pub fn position(&self) -> Position {
        self.driver.with_machine(|m| m.position().clone())
    }

    /// The canonical transcript (session targets).
    pub fn transcript(&self) -> Option<Transcript> {
        self.driver.with_machine(Machine::transcript)
    }

    /// Notices so far (the last 50).
    pub fn notices(&self) -> Vec<ClientNotice> {
        let hint = self.driver.io().hint();
        self.driver.with_machine(|m| {
            let notices = m.recent_notices().iter();
            notices.map(|n| hint.notice(n).into_owned()).collect()
        })
    }

    /// What is followed.
    pub fn target(&self) -> &Target {
        self.driver.target()
    }

    /// `local`, `session`, `indexeddb`, `memory`, `custom` or `memory-fallback`.
    pub fn storage_label(&self) -> &'static str {
        self.driver.storage_label()
    }

    /// Sends a user message; resolves to the turn id. `message_id` defaults
    /// to a fresh random id; retries reuse it, so the server starts the turn
    /// once however often the request is repeated.
    pub fn send(
        &self,
        text: &str,
        message_id: Option<String>,
    ) -> impl Future<Output = Result<String, WasmError>> + 'static {
        let done = self.write(send_write(text, message_id));
        async move { sent_turn(done.await?) }
    }

    /// The outbox: messages sent and not yet committed, in send order.
    pub fn pending(&self) -> Vec<PendingMessage> {
        self.driver.with_machine(Machine::pending_messages)
    }

    /// Sends a `failed` message of [`pending`](Self::pending) again (`id`:
    /// its `message_id`), or a failed answer (`id`: its question's id);
    /// resolves as [`send`](Self::send) does, with its turn (`None` for an
    /// answer). `None` when nothing of that id is pending.
    pub fn retry(
        &self,
        id: &str,
    ) -> Option<impl Future<Output = Result<Option<String>, WasmError>> + 'static> {
        let (future, done) = WriteFuture::new();
        self.driver
            .retry_pending(id, done)
            .then_some(async move { retried_turn(future.await?) })
    }

    /// Removes a message (`id`: its `message_id`) or an answer (`id`: its
    /// question's id) the runtime has not accepted from the outbox: it is
    /// never sent again. Whether it was removed.
    pub fn discard(&self, id: &str) -> bool {
        self.driver.discard_pending(id)
    }

    /// Answers a pending question. A retry whose first try was committed
    /// (its reply lost) resolves too.
    pub fn answer(
        &self,
        question_id: &str,
        answer: &str,
    ) -> impl Future<Output = Result<(), WasmError>> + 'static {
        let done = self.write(Write::Answer {
            question_id: question_id.to_owned(),
            answer: answer.to_owned(),
        });
        async move { done.await.map(|_| ()).map_err(WasmError::from) }
    }

    /// Stops the turn the view shows live (closing a stream never does); see
    /// [`cancel_turn`](Self::cancel_turn).
    pub fn cancel(&self) -> impl Future<Output = Result<Option<String>, WasmError>> + 'static {
        self.cancel_turn(None)
    }

    /// Stops `turn_id` (or, with `None`, the turn the view shows live).
    /// Resolves to the turn that was stopped (`None`: it was no longer
    /// running). The turn is named, so a retry never stops the next one.
    pub fn cancel_turn(
        &self,
        turn_id: Option<String>,
    ) -> impl Future<Output = Result<Option<String>, WasmError>> + 'static {
        let done = self.write(Write::Cancel { turn_id });
        async move {
            match done.await? {
                WriteOutcome::Cancelled { turn_id } => Ok(turn_id),
                other => Err(unexpected(other)),
            }
        }
    }

    /// Reads the page before the oldest item of a session read newest first
    /// (`Options::tail`) and puts its items first; resolves at once when
    /// nothing is older.
    pub fn load_older(&self) -> impl Future<Output = Result<(), WasmError>> + 'static {
        let (future, done) = WriteFuture::new();
        self.driver.load_older(done);
        async move { future.await.map(|_| ()).map_err(WasmError::from) }
    }

    fn write(&self, write: Write) -> WriteFuture {
        let (future, done) = WriteFuture::new();
        self.driver.write(write, done);
        future
    }

    /// Stops everything; the last state is flushed to storage and nothing is
    /// dispatched afterwards. Idempotent.
    pub fn close(&self) {
        self.driver.close();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.driver.close();
    }
}

/// The write of [`Client::send`]: `message_id` defaults to a fresh one.
pub(crate) fn send_write(text: &str, message_id: Option<String>) -> Write {
    Write::Send {
        message_id: message_id.unwrap_or_else(fresh_message_id),
        text: text.to_owned(),
    }
}

/// The turn a send started (the JS and Rust APIs both resolve to it).
pub(crate) fn sent_turn(outcome: WriteOutcome) -> Result<String, WasmError> {
    match outcome {
        WriteOutcome::Sent { turn_id } => Ok(turn_id),
        other => Err(unexpected(other)),
    }
}

/// What a `retry` resolves to: a message's turn, nothing for an answer.
pub(crate) fn retried_turn(outcome: WriteOutcome) -> Result<Option<String>, WasmError> {
    match outcome {
        WriteOutcome::Sent { turn_id } => Ok(Some(turn_id)),
        WriteOutcome::Answered => Ok(None),
        other => Err(unexpected(other)),
    }
}

/// A write resolved with another kind's outcome: cannot happen.
fn unexpected(_: WriteOutcome) -> WasmError {
    WasmError::BadJson("a write resolved with another kind's outcome".to_owned())
}

/// `msg_` and 64 random bits in hex: the randomness is the browser's, so
/// two tabs never pick the same id.
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
