//! HTTP for the browser layer: one call per exchange into `exchange` of
//! `browser.js`, which does `fetch`, headers, credentials, the first-byte
//! deadline and the body. Rust gets the outcome: through web-sys the same
//! calls cost several KB of wasm (docs/size.md).

use js_sys::{Array, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::AbortController;

use super::error::WasmError;
use super::js;
use super::options::{Options, TokenSource};

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        http: &JsValue,
        method: &str,
        path: &str,
        accept: &str,
        body: Option<&str>,
        last_event_id: Option<&str>,
        ctl: &AbortController,
        hold: bool,
        open: &JsValue,
        chunk: &JsValue,
    ) -> Promise;
}

/// How requests are addressed and authenticated.
pub struct Http {
    /// `[baseUrl, headers, getToken, timeoutMs]` as `exchange` takes it.
    config: JsValue,
    /// First-byte timeout of every request.
    pub connect_timeout_ms: u32,
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
    /// The deadline also covers the whole body (writes); otherwise it ends
    /// at the headers, or at a stream's first byte.
    pub hold: bool,
}

impl<'a> Request<'a> {
    /// A GET of `path` accepting `accept`.
    pub fn get(path: &'a str, accept: &'a str, last_event_id: Option<&'a str>) -> Self {
        Request {
            method: "GET",
            path,
            accept,
            body: None,
            last_event_id,
            hold: false,
        }
    }
}

/// What came back (a stream's content type goes to `open`).
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// `Retry-After`.
    pub retry_after: Option<String>,
    /// The whole body; empty when it was streamed.
    pub body: Vec<u8>,
    /// A streamed body reached its end (false: the stream was stopped).
    pub ended: bool,
}

impl Http {
    /// From the connect options.
    pub fn new(o: &Options) -> Self {
        let headers: Array = o
            .headers
            .iter()
            .map(|(k, v)| JsValue::from(Array::of2(&k.into(), &v.into())))
            .collect();
        let token = o.get_token.clone().map_or(JsValue::NULL, token_fn);
        let config = Array::of4(
            &o.base_url.as_str().into(),
            &headers,
            &token,
            &o.connect_timeout_ms.into(),
        );
        Http {
            config: config.into(),
            connect_timeout_ms: o.connect_timeout_ms,
        }
    }

    /// Sends one request. With `open` and `chunk` (JS functions, else
    /// `undefined`) a 2xx body is streamed to them: `open(status,
    /// contentType, retryAfter)` and `chunk(bytes)` return false to stop.
    pub async fn send(
        &self,
        req: Request<'_>,
        ctl: &AbortController,
        open: &JsValue,
        chunk: &JsValue,
    ) -> Result<Answer, WasmError> {
        let sent = exchange(
            &self.config,
            req.method,
            req.path,
            req.accept,
            req.body,
            req.last_event_id,
            ctl,
            req.hold,
            open,
            chunk,
        );
        let out: Array = JsFuture::from(sent)
            .await
            .map_err(|e| self.failure(e.unchecked_ref()))?
            .unchecked_into();
        let last = out.get(3);
        let (body, ended) = if last.is_object() {
            (last.unchecked_into::<Uint8Array>().to_vec(), true)
        } else {
            (Vec::new(), last.is_truthy())
        };
        Ok(Answer {
            status: out.get(0).as_f64().unwrap_or(0.0) as u16,
            retry_after: out.get(2).as_string(),
            body,
            ended,
        })
    }

    /// `exchange` rejects with `[kind, message]`.
    fn failure(&self, e: &Array) -> WasmError {
        let text = e.get(1).as_string().unwrap_or_default();
        match e.get(0).as_string().as_deref() {
            Some("timeout") => WasmError::Timeout(self.connect_timeout_ms),
            Some("credentials") => WasmError::Credentials(text),
            Some("options") => WasmError::InvalidOptions(text),
            _ => WasmError::Network(text),
        }
    }
}

/// A token source as the JS function `exchange` awaits: resolves to the
/// token, rejects with the reason's text.
fn token_fn(f: TokenSource) -> JsValue {
    Closure::<dyn Fn() -> Promise>::new(move || {
        let token = f();
        js::promise(async move {
            token.await.map(JsValue::from).map_err(|e| {
                JsValue::from(match e {
                    WasmError::Credentials(text) => text,
                    e => e.to_string(),
                })
            })
        })
    })
    .into_js_value()
}
