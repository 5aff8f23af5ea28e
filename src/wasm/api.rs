//! The JS API: `ReplayClient`, implementing `api.d.ts`.

use std::rc::Rc;

use js_sys::{Function, Object, Promise};
use wasm_bindgen::prelude::*;

use super::client::{self, Client};
use super::error::{UnauthorizedHint, WasmError};
use super::js;
use super::options::Options;
use super::view;
use crate::core::machine::{Write, WriteOutcome};

/// A client following one scope of an agent runtime (see `ConnectOptions`).
#[wasm_bindgen]
pub struct ReplayClient {
    client: Client,
}

#[wasm_bindgen]
impl ReplayClient {
    /// Connects at once; with `"local"`, `"session"` or `"memory"` storage
    /// the stored state is in the first `view()`.
    pub fn connect(
        #[wasm_bindgen(unchecked_param_type = "ConnectOptions")] options: JsValue,
    ) -> Result<ReplayClient, JsValue> {
        let (options, get_token) = Options::from_js_parts(&options)?;
        let get_token = get_token.map_or(JsValue::NULL, JsValue::from);
        Ok(ReplayClient {
            client: Client::connect_for_js(options, &get_token),
        })
    }

    /// Calls `listener` after changes (once per animation frame by default);
    /// returns the function that unsubscribes it. `useSyncExternalStore`-compatible.
    #[wasm_bindgen(unchecked_return_type = "() => void")]
    pub fn subscribe(
        &self,
        #[wasm_bindgen(unchecked_param_type = "() => void")] listener: Function,
    ) -> JsValue {
        let driver = self.client.driver();
        // A throwing listener must not keep the others from running.
        let id = driver.subscribe(Rc::new(move || {
            let _ = listener.call0(&JsValue::UNDEFINED);
        }));
        let weak = Rc::downgrade(driver);
        Closure::<dyn FnMut()>::new(move || {
            if let Some(s) = weak.upgrade() {
                s.unsubscribe(id);
            }
        })
        .into_js_value()
    }

    /// The current immutable snapshot; the same object until something changed.
    #[wasm_bindgen(unchecked_return_type = "View")]
    pub fn view(&self) -> JsValue {
        self.client.driver().js_view()
    }

    /// Connection status.
    #[wasm_bindgen(unchecked_return_type = "Status")]
    pub fn status(&self) -> JsValue {
        let hint = self.client.driver().io().hint();
        view::status_js(&hint.status(self.client.status()))
    }

    /// Status, counters, position, storage in use and the live stream's
    /// transport.
    #[wasm_bindgen(unchecked_return_type = "Diagnostics")]
    pub fn diagnostics(&self) -> JsValue {
        let driver = self.client.driver();
        let (storage, transport) = (driver.storage_label(), driver.transport());
        let hint = driver.io().hint();
        driver.with_machine(|m| view::diagnostics_js(m, storage, transport, hint))
    }

    /// The canonical transcript (PROTOCOL.md §7); throws for non-session scopes.
    #[wasm_bindgen(unchecked_return_type = "Transcript")]
    pub fn transcript(&self) -> Result<JsValue, JsValue> {
        if !self.client.target().is_session() {
            return Err(WasmError::InvalidOptions(
                "transcript() needs a session client".to_owned(),
            )
            .into());
        }
        Ok(js::to_js(&self.client.transcript().unwrap_or_default()))
    }

    /// Sends a user message through the outbox: shown in `view.pending` at
    /// once, stored with the state before its request, sent with the same
    /// `messageId` until the runtime accepts it (so the turn starts once).
    /// Resolves when accepted; rejects only when it becomes `failed`.
    #[wasm_bindgen(unchecked_return_type = "Promise<{ turnId: string }>")]
    pub fn send(
        &self,
        text: String,
        #[wasm_bindgen(js_name = messageId)] message_id: Option<String>,
    ) -> Promise {
        self.write(client::send_write(&text, message_id), sent_js)
    }

    /// Sends a failed message of `view.pending` again (`id`: its
    /// `message_id`), or a failed answer (`id`: its question's id); settles
    /// as `send` (`{ turnId }`) or `answer` (`undefined`) does. Rejects with
    /// `invalid_options` when nothing of that id is pending.
    #[wasm_bindgen(unchecked_return_type = "Promise<{ turnId: string } | undefined>")]
    pub fn retry(&self, id: String) -> Promise {
        let mut settle = None;
        let promise = Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
        if let Some((resolve, reject)) = settle {
            let hint = self.client.driver().io().hint().clone();
            let done = settle_with(hint, resolve, reject.clone(), retried_js);
            if !self.client.driver().retry_pending(&id, done) {
                let e = WasmError::InvalidOptions(format!("nothing pending with id {id}"));
                drop(reject.call1(&JsValue::UNDEFINED, &e.into()));
            }
        }
        promise
    }

    /// Removes a message of `view.pending` (`id`: its `message_id`) or an
    /// answer (`id`: its question's id) that the runtime has not accepted:
    /// it is never sent again (one in flight is aborted). Returns whether
    /// it was removed; its `send` (`answer`) rejects with `discarded`.
    pub fn discard(&self, id: String) -> bool {
        self.client.driver().discard_pending(&id)
    }

    /// Answers a pending question through the outbox, keyed by the
    /// question: shown at once on its prompt (`pendingPrompts[i].answer`),
    /// stored before it is sent, sent in order with messages until the
    /// runtime takes it (by whichever client next follows the session, after
    /// a reload). Resolves when the runtime accepted it; rejects with the
    /// server's code (e.g. `question_closed`), `question_closed` when the
    /// question ended before it went out, `answer_pending` when another
    /// answer to it is on its way.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn answer(
        &self,
        #[wasm_bindgen(js_name = questionId)] question_id: String,
        answer: String,
    ) -> Promise {
        let write = Write::Answer {
            question_id,
            answer,
        };
        self.write(write, |_| Ok(JsValue::UNDEFINED))
    }

    /// Stops `turnId`, or the turn the view shows live. Never queued: sent
    /// at once, retried only while that turn has not ended in the view (a
    /// cancel naming no turn, none being live, is sent once); resolves when
    /// the runtime took it or the turn ended, rejects after the writes'
    /// attempts.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn cancel(&self, #[wasm_bindgen(js_name = turnId)] turn_id: Option<String>) -> Promise {
        self.write(Write::Cancel { turn_id }, |_| Ok(JsValue::UNDEFINED))
    }

    /// Sessions read newest first (`tail`): reads the page before the
    /// oldest item and puts its items first, once. Resolves when they are in
    /// the view (at once when `view.hasOlder` is false); rejects with the
    /// error that ended the read (asking again reads it again).
    #[wasm_bindgen(js_name = loadOlder, unchecked_return_type = "Promise<void>")]
    pub fn load_older(&self) -> Promise {
        let mut settle = None;
        let promise = Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
        if let Some((resolve, reject)) = settle {
            let hint = self.client.driver().io().hint().clone();
            let done = settle_with(hint, resolve, reject, |_| Ok(JsValue::UNDEFINED));
            self.client.driver().load_older(done);
        }
        promise
    }

    /// Stops everything; nothing is dispatched afterwards. Idempotent.
    pub fn close(&self) {
        self.client.close();
    }

    /// For a worker host: page `viewer`, which shows this client's view,
    /// is hidden or visible, or went away (`undefined`). The client counts
    /// as hidden only while every page that said so is (the core decides:
    /// `Machine::handle_viewer`). Not part of the typed API.
    #[wasm_bindgen(js_name = setViewer, skip_typescript)]
    pub fn set_viewer(&self, viewer: u32, hidden: Option<bool>) {
        let driver = self.client.driver();
        driver.input(|m, now| m.handle_viewer(u64::from(viewer), hidden, now));
    }

    /// For a worker host: what its pages get next, as a number (the core
    /// decides: `Machine::page_update`): -1 when nothing changed since the
    /// last; else bits 0-15 the view's parts that changed (bit `i`: its
    /// `i`th key, `PAGE_PARTS`), bit 16 whether the diagnostics go, and
    /// from bit 17 on, 1 + the offset (UTF-16) from which the live text is
    /// new to the pages (0: `live` goes whole). Every part and the
    /// diagnostics (2 ** 17 - 1, `PageUpdate::WHOLE`) go to a page that has
    /// none of the updates, once the others got what changed. Not part of
    /// the typed API.
    #[wasm_bindgen(js_name = pageUpdate, skip_typescript)]
    pub fn page_update(&self) -> f64 {
        let driver = self.client.driver();
        let now = crate::exec::Io::now(driver.io());
        let u = driver.with_machine_mut(|m| m.page_update(now));
        u.map_or(-1.0, |u| {
            f64::from(u.parts | u32::from(u.diagnostics) << 16) + u.live_from as f64 * 131_072.0
        })
    }
}

impl ReplayClient {
    /// Starts `write`; the Promise settles with `resolved(outcome)`, or
    /// rejects with the machine's error as a `ReplayError`.
    fn write(
        &self,
        write: Write,
        resolved: fn(WriteOutcome) -> Result<JsValue, WasmError>,
    ) -> Promise {
        let mut settle = None;
        let promise = Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
        if let Some((resolve, reject)) = settle {
            let hint = self.client.driver().io().hint().clone();
            self.client
                .driver()
                .write(write, settle_with(hint, resolve, reject, resolved));
        }
        promise
    }
}

/// A write's callback that settles a Promise with `resolved(outcome)`, or
/// rejects it with the machine's error as a `ReplayError` (a 401 naming
/// the fix: `hint`).
fn settle_with(
    hint: UnauthorizedHint,
    resolve: js_sys::Function,
    reject: js_sys::Function,
    resolved: fn(WriteOutcome) -> Result<JsValue, WasmError>,
) -> crate::exec::Done {
    Box::new(move |outcome: Result<WriteOutcome, _>| {
        let outcome = outcome.map_err(|e| hint.error(WasmError::from(e)));
        let settled = match outcome.and_then(resolved) {
            Ok(v) => resolve.call1(&JsValue::UNDEFINED, &v),
            Err(e) => reject.call1(&JsValue::UNDEFINED, &e.into()),
        };
        // Settling a promise runs no code now: it cannot throw.
        drop(settled);
    })
}

/// A `retry`'s outcome: a message's `{ turnId }`, an answer's nothing.
fn retried_js(outcome: WriteOutcome) -> Result<JsValue, WasmError> {
    match outcome {
        WriteOutcome::Answered => Ok(JsValue::UNDEFINED),
        sent => sent_js(sent),
    }
}

/// `send`'s value: `{ turnId }`.
fn sent_js(outcome: WriteOutcome) -> Result<JsValue, WasmError> {
    let o = Object::new();
    js::set(
        &o,
        "turnId",
        &JsValue::from_str(&client::sent_turn(outcome)?),
    );
    Ok(o.into())
}
