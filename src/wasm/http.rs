//! `fetch` with headers, credentials, an `AbortSignal` and a connect
//! timeout; body readers for streams and JSON pages.

use std::cell::Cell;
use std::rc::Rc;

use gloo_timers::callback::Timeout;
use js_sys::{Function, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortController, ReadableStreamDefaultReader, Response};

use super::error::WasmError;
use super::js;
use super::options::{Options, TokenSource};

/// How requests are addressed and authenticated.
pub struct Http {
    base_url: String,
    headers: Vec<(String, String)>,
    get_token: Option<TokenSource>,
    /// First-byte timeout of every request.
    pub connect_timeout_ms: u32,
}

impl Http {
    /// From the connect options.
    pub fn new(o: &Options) -> Self {
        Http {
            base_url: o.base_url.clone(),
            headers: o.headers.clone(),
            get_token: o.get_token.clone(),
            connect_timeout_ms: o.connect_timeout_ms,
        }
    }

    /// Sends one request; resolves at the response headers. `getToken()` is
    /// awaited for every request, so a refreshed token is always used.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        accept: &str,
        body: Option<&str>,
        last_event_id: Option<&str>,
        ctl: &AbortController,
    ) -> Result<Response, WasmError> {
        let token = match &self.get_token {
            Some(f) => Some(f().await?),
            None => None,
        };
        let headers = web_sys::Headers::new().map_err(net)?;
        for (k, v) in &self.headers {
            headers
                .set(k, v)
                .map_err(|e| WasmError::InvalidOptions(js::error_text(&e)))?;
        }
        headers.set("Accept", accept).map_err(net)?;
        if let Some(t) = token {
            headers
                .set("Authorization", &("Bearer ".to_owned() + &t))
                .map_err(|e| WasmError::Credentials(js::error_text(&e)))?;
        }
        if let Some(id) = last_event_id {
            headers.set("Last-Event-ID", id).map_err(net)?;
        }
        let init = web_sys::RequestInit::new();
        init.set_method(method);
        init.set_headers(&headers);
        init.set_signal(Some(&ctl.signal()));
        if let Some(b) = body {
            headers
                .set("Content-Type", "application/json")
                .map_err(net)?;
            init.set_body(&JsValue::from_str(b));
        }
        let url = self.base_url.clone() + path;
        let resp = JsFuture::from(js::fetch(&url, &init)).await.map_err(net)?;
        Ok(resp.unchecked_into())
    }
}

/// Aborts a request that has produced nothing after `ms`: a fetch queued
/// behind the browser's per-origin connection limit neither fails nor
/// resolves on its own. Dropping it disarms it.
pub struct Deadline {
    fired: Rc<Cell<bool>>,
    _timer: Timeout,
}

impl Deadline {
    /// Arms the deadline for `ctl`'s request.
    pub fn start(ms: u32, ctl: &AbortController) -> Self {
        let fired = Rc::new(Cell::new(false));
        let (flag, ctl) = (fired.clone(), ctl.clone());
        let timer = Timeout::new(ms, move || {
            flag.set(true);
            ctl.abort();
        });
        Deadline {
            fired,
            _timer: timer,
        }
    }

    /// Maps a failure of the guarded request: a timeout if the deadline
    /// aborted it.
    pub fn explain(&self, e: WasmError, ms: u32) -> WasmError {
        if self.fired.get() {
            WasmError::Timeout(ms)
        } else {
            e
        }
    }
}

fn net(e: JsValue) -> WasmError {
    WasmError::Network(js::error_text(&e))
}

/// A response header, if present.
pub fn header(resp: &Response, name: &str) -> Option<String> {
    resp.headers().get(name).ok().flatten()
}

/// The whole body as bytes.
pub async fn read_body(resp: &Response) -> Result<Vec<u8>, WasmError> {
    let buf = JsFuture::from(resp.array_buffer().map_err(net)?)
        .await
        .map_err(net)?;
    Ok(Uint8Array::new(&buf).to_vec())
}

/// A reader of the body stream, if there is a body.
pub fn reader(resp: &Response) -> Option<ReadableStreamDefaultReader> {
    resp.body().map(|b| b.get_reader().unchecked_into())
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[wasm_bindgen(js_name = pumpBody)]
    fn pump_body(reader: &ReadableStreamDefaultReader, on_chunk: &Function) -> Promise;
}

/// How a body that was read chunk by chunk ended.
pub enum BodyEnd {
    /// The server closed it.
    Done,
    /// `on_chunk` asked to stop (the body was cancelled).
    Stopped,
}

/// Reads the body of `r` to its end, calling `on_chunk` with each chunk
/// (copied into wasm memory) as it arrives; it returns false to stop. The
/// reading loop runs in JS (`pumpBody` in `browser.js`): one crossing per chunk.
pub async fn read_chunks(
    r: &ReadableStreamDefaultReader,
    mut on_chunk: impl FnMut(Vec<u8>) -> bool + 'static,
) -> Result<BodyEnd, WasmError> {
    let callback = Closure::<dyn FnMut(Uint8Array) -> bool>::new(move |chunk: Uint8Array| {
        on_chunk(chunk.to_vec())
    });
    // The pump never calls back once its promise settled: `callback` lives
    // until then.
    let ended = JsFuture::from(pump_body(r, callback.as_ref().unchecked_ref()))
        .await
        .map_err(net)?;
    Ok(if ended.is_truthy() {
        BodyEnd::Done
    } else {
        BodyEnd::Stopped
    })
}

/// Resolves after `ms` (a write's retry pause).
pub async fn sleep(ms: u32) {
    let p = Promise::new(&mut |resolve, _| {
        let _ = js::set_timeout(&resolve, ms as i32);
    });
    let _ = JsFuture::from(p).await;
}
