//! The JS API: `ReplayClient`, implementing `api.d.ts`.

use std::rc::Rc;

use js_sys::{Function, Object, Promise};
use wasm_bindgen::prelude::*;

use super::client::Client;
use super::error::WasmError;
use super::js;
use super::options::Options;
use super::view::{self, ViewCache};

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
        let options = Options::from_js(&options)?;
        let client = Client::connect(options);
        *client.shared().js_view.borrow_mut() = Some(ViewCache::default());
        Ok(ReplayClient { client })
    }

    /// Calls `listener` after changes (once per animation frame by default);
    /// returns the function that unsubscribes it. `useSyncExternalStore`-compatible.
    #[wasm_bindgen(unchecked_return_type = "() => void")]
    pub fn subscribe(
        &self,
        #[wasm_bindgen(unchecked_param_type = "() => void")] listener: Function,
    ) -> JsValue {
        let shared = self.client.shared();
        // A throwing listener must not keep the others from running.
        let id = shared.subscribe(Rc::new(move || {
            let _ = listener.call0(&JsValue::UNDEFINED);
        }));
        let weak = Rc::downgrade(shared);
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
        let shared = self.client.shared();
        let mut view = shared.js_view.borrow_mut();
        view.get_or_insert_with(ViewCache::default).get(shared)
    }

    /// Connection status.
    #[wasm_bindgen(unchecked_return_type = "Status")]
    pub fn status(&self) -> JsValue {
        view::status_js(&self.client.status())
    }

    /// Status, counters, position and storage in use.
    #[wasm_bindgen(unchecked_return_type = "Diagnostics")]
    pub fn diagnostics(&self) -> JsValue {
        view::diagnostics_js(self.client.shared())
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

    /// Sends a user message; retried with the same `messageId` on network
    /// errors and 5xx, so the turn starts once.
    #[wasm_bindgen(unchecked_return_type = "Promise<{ turnId: string }>")]
    pub fn send(
        &self,
        text: String,
        #[wasm_bindgen(js_name = messageId)] message_id: Option<String>,
    ) -> Promise {
        let sent = self.client.send(&text, message_id);
        js::promise(async move {
            let turn_id = sent.await?;
            let o = Object::new();
            js::set(&o, "turnId", &JsValue::from_str(&turn_id));
            Ok(o.into())
        })
    }

    /// Answers a pending question.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn answer(
        &self,
        #[wasm_bindgen(js_name = questionId)] question_id: String,
        answer: String,
    ) -> Promise {
        let done = self.client.answer(&question_id, &answer);
        js::promise(async move {
            done.await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Stops the running turn.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn cancel(&self) -> Promise {
        let done = self.client.cancel();
        js::promise(async move {
            done.await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Stops everything; nothing is dispatched afterwards. Idempotent.
    pub fn close(&self) {
        self.client.close();
    }
}
