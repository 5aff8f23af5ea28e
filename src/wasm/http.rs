//! HTTP for the browser layer: one call per request into `request` of
//! `browser.js`, which does `fetch`, headers, credentials and the body, and
//! reports the answer's raw facts to the client's [`Reports`] (every
//! deadline and every reading of a status is the machine's). Through web-sys the same calls cost several KB of wasm, and
//! a Rust future per request several more (docs/size.md).

use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;
use web_sys::AbortController;

use super::error::WasmError;
use super::options::Options;
use crate::core::machine::{CoreError, RequestId};

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn request(
        http: &JsValue,
        to: &Array,
        id: f64,
        method: &str,
        path: &str,
        accept: &str,
        body: Option<&str>,
        last_event_id: Option<&str>,
        stream: bool,
        claim: Option<&str>,
    ) -> AbortController;

    #[wasm_bindgen(js_name = releaseClaim)]
    fn release_claim(http: &JsValue, name: Option<&str>);

    #[wasm_bindgen(js_name = refreshToken)]
    fn refresh_token(http: &JsValue);

    #[wasm_bindgen(js_name = paceHold)]
    fn pace_hold(http: &JsValue, max_bytes: usize);

    #[wasm_bindgen(js_name = releaseChunks)]
    fn release_chunks(http: &JsValue);

    /// Aborts a request, after the body's write callback returned when it
    /// is called from inside one (`browser.js`, WebKit's `AbortError`).
    #[wasm_bindgen(js_name = abortRequest)]
    pub fn abort_request(ctl: &AbortController);
}

/// The functions of one client that `request` reports to, each called
/// with the request's id (a JS number: ids count up from 1, far below 2^53).
pub struct Reports {
    /// `opened(id, status, contentType, retryAfter) -> bool`: the answer's
    /// head, whatever its status; false stops it.
    pub opened: Function,
    /// `chunk(id, chunks) -> bool`: chunks of the body (an array of
    /// `Uint8Array`s), each as it comes or, for a stream while held
    /// ([`Http::hold_chunks`]), those that waited, when released; false
    /// stops it.
    pub chunk: Function,
    /// `settled(id, ended)`: the body ended (true) or was stopped (false).
    pub settled: Function,
    /// `failed(id, kind, message)`: no answer (see [`Http::failure`]).
    pub failed: Function,
    /// `held(id)`: a first chunk of the stream waits for
    /// [`Http::release_chunks`].
    pub held: Function,
}

/// How requests are addressed, authenticated and reported.
pub struct Http {
    /// `[baseUrl, headers, getToken, credentials, fetch]` as `request` (`browser.js`) takes
    /// it; `paceHold` keeps the body's holding beside it.
    config: JsValue,
    /// `[opened, chunk, settled, failed, held]`.
    reports: Array,
}

/// One request.
pub struct Request<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// Appended to the base URL.
    pub path: &'a str,
    /// The `Accept` header.
    pub accept: &'a str,
    /// A JSON body.
    pub body: Option<&'a str>,
    /// The `Last-Event-ID` header.
    pub last_event_id: Option<&'a str>,
    /// The live stream: its chunks may be held (`Pace::HoldChunks`).
    pub stream: bool,
    /// Sent only while this client holds this Web Lock (`Action::Post`'s
    /// `claim`).
    pub claim: Option<&'a str>,
}

impl<'a> Request<'a> {
    /// A GET of `path` accepting `accept`.
    pub fn get(path: &'a str, accept: &'a str) -> Self {
        Request {
            method: "GET",
            path,
            accept,
            body: None,
            last_event_id: None,
            stream: false,
            claim: None,
        }
    }
}

impl Http {
    /// From the connect options; `get_token` is a JS function (or null)
    /// awaited before every request; every request goes through
    /// `o.fetch` when set, with `o.credentials`; outcomes go to `reports`.
    pub fn new(o: &Options, get_token: &JsValue, reports: Reports) -> Self {
        let headers: Array = o
            .headers
            .iter()
            .map(|(k, v)| JsValue::from(Array::of2(&k.into(), &v.into())))
            .collect();
        let fetch = o.fetch.as_ref().map_or(JsValue::UNDEFINED, JsValue::from);
        let config = Array::of5(
            &o.base_url.as_str().into(),
            &headers,
            get_token,
            &o.credentials.as_str().into(),
            &fetch,
        );
        Http {
            config: config.into(),
            reports: Array::of5(
                &reports.opened,
                &reports.chunk,
                &reports.settled,
                &reports.failed,
                &reports.held,
            ),
        }
    }

    /// `Pace::HoldChunks`: the stream's chunks wait for
    /// [`release_chunks`](Self::release_chunks) until they reach
    /// `max_bytes` (reporting the first to `held`), or go to `chunk` as
    /// they come (0).
    pub fn hold_chunks(&self, max_bytes: usize) {
        pace_hold(&self.config, max_bytes);
    }

    /// `Pace::ReleaseChunks`: the chunks that wait go to `chunk` now.
    pub fn release_chunks(&self) {
        release_chunks(&self.config);
    }

    /// `Action::RefreshCredentials`: the next `getToken` call is told to
    /// return a fresh token (`{ refresh: true }`), once.
    pub fn refresh_credentials(&self) {
        refresh_token(&self.config);
    }

    /// Starts request `id`; dropping or aborting the controller stops it.
    pub fn start(&self, id: RequestId, req: Request<'_>) -> AbortController {
        request(
            &self.config,
            &self.reports,
            id.0 as f64,
            req.method,
            req.path,
            req.accept,
            req.body,
            req.last_event_id,
            req.stream,
            req.claim,
        )
    }

    /// `Action::Release`: lets go of a claim this client holds; `None`:
    /// of every one (the client closed).
    pub fn release(&self, claim: Option<&str>) {
        release_claim(&self.config, claim);
    }

    /// What `failed(id, kind, message)` means to the machine.
    pub fn failure(kind: &str, message: String) -> CoreError {
        let error = match kind {
            // Another client holds the request's claim: nothing was sent.
            "claimed" => return CoreError::Claimed,
            "credentials" => WasmError::Credentials(message),
            "options" => WasmError::InvalidOptions(message),
            "cors" => WasmError::Cors(message),
            _ => WasmError::Network(message),
        };
        error.into()
    }
}
