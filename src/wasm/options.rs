//! What `connect` takes: the Rust [`Options`] and their parsing from the JS
//! `ConnectOptions` object of `api.d.ts`.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use js_sys::{Array, Function, Object};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::error::WasmError;
use super::js;
pub use crate::core::machine::Notify;
use crate::core::machine::Target;
use crate::core::protocol::Scope;

/// A future of a bearer token.
pub type TokenFuture = Pin<Box<dyn Future<Output = Result<String, WasmError>>>>;

/// Called before every request for a bearer token (again after a 401).
pub type TokenSource = Rc<dyn Fn() -> TokenFuture>;

/// Where the persisted `{epoch, cursor, state}` value lives.
#[derive(Clone, Debug)]
pub enum StorageChoice {
    /// `localStorage` (the default).
    Local,
    /// `sessionStorage`.
    Session,
    /// IndexedDB (asynchronous).
    IndexedDb,
    /// Nothing persisted across page loads.
    Memory,
    /// A JS object with `get`, `set`, `remove` (each sync or Promise).
    Custom(Object),
}

/// Options of [`Client::connect`](super::Client::connect).
#[derive(Clone)]
pub struct Options {
    /// Runtime base URL without a trailing slash, e.g. `http://127.0.0.1:8787`.
    pub base_url: String,
    /// What to follow.
    pub target: Target,
    /// Static headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Bearer token source, called for every request.
    pub get_token: Option<TokenSource>,
    /// Where the state is kept between page loads.
    pub storage: StorageChoice,
    /// Subscriber notification pacing.
    pub notify: Notify,
    /// A request without its first byte after this long is aborted.
    pub connect_timeout_ms: u32,
    /// Backlog pages requested ahead while restoring (`Config::prefetch_depth`);
    /// each holds one of the browser's ~6 HTTP/1.1 connections per origin.
    pub prefetch_depth: u8,
    /// Seed of the reconnect jitter; random when `None`.
    pub seed: Option<u64>,
}

impl Options {
    /// Defaults for following one session.
    pub fn session(base_url: &str, session_id: &str) -> Self {
        Options::new(base_url, Target::session(session_id))
    }

    /// Defaults for any target.
    pub fn new(base_url: &str, target: Target) -> Self {
        Options {
            base_url: base_url.trim_end_matches('/').to_owned(),
            target,
            headers: Vec::new(),
            get_token: None,
            storage: StorageChoice::Local,
            notify: Notify::Frame,
            connect_timeout_ms: 10_000,
            prefetch_depth: 2,
            seed: None,
        }
    }

    /// Parses a JS `ConnectOptions` object (checked by `connectOptions` in
    /// `browser.js`, then read by name).
    pub fn from_js(o: &JsValue) -> Result<Options, WasmError> {
        let o = connect_options(o).map_err(|e| invalid(&js::error_text(&e)))?;
        let target = match o.scope().as_str() {
            "global" => Target::Global,
            name => {
                let scope = SCOPES
                    .into_iter()
                    .find(|s| s.as_str() == name)
                    .ok_or_else(|| invalid("unknown scope"))?;
                Target::Scoped {
                    scope,
                    scope_id: o.scope_id(),
                }
            }
        };
        let mut opts = Options::new(&o.base_url(), target);
        for pair in o.headers().iter() {
            let pair: Array = pair.unchecked_into();
            opts.headers.push((
                pair.get(0).as_string().unwrap_or_default(),
                pair.get(1).as_string().unwrap_or_default(),
            ));
        }
        opts.get_token = o.get_token().map(js_token_source);
        // `connectOptions` has checked every value; the arms that reject
        // keep a disagreement between it and this reader from passing silently.
        let storage = o.storage();
        opts.storage = match storage.as_string().as_deref() {
            Some("local") => StorageChoice::Local,
            Some("session") => StorageChoice::Session,
            Some("indexeddb") => StorageChoice::IndexedDb,
            Some("memory") => StorageChoice::Memory,
            Some(_) => return Err(invalid("unknown storage kind")),
            None if storage.is_undefined() => StorageChoice::Local,
            None => StorageChoice::Custom(storage.unchecked_into()),
        };
        let notify = o.notify();
        opts.notify = match (notify.as_string().as_deref(), notify.as_f64()) {
            (Some("frame"), _) => Notify::Frame,
            (Some("sync"), _) => Notify::Sync,
            (None, Some(ms)) if ms >= 0.0 => Notify::Every(ms as u32),
            (None, None) if notify.is_undefined() => Notify::Frame,
            _ => return Err(invalid("notify must be \"frame\", \"sync\" or a number")),
        };
        if let Some(ms) = o.connect_timeout_ms() {
            opts.connect_timeout_ms = ms.clamp(1.0, u32::MAX as f64) as u32;
        }
        if let Some(n) = o.prefetch_depth() {
            opts.prefetch_depth = n.min(8.0) as u8;
        }
        opts.seed = o.seed().map(|s| s as u64);
        Ok(opts)
    }
}

/// The scopes a `ConnectOptions.scope` may name, besides `"global"`.
const SCOPES: [Scope; 5] = [
    Scope::Session,
    Scope::Team,
    Scope::Process,
    Scope::Worktree,
    Scope::System,
];

fn invalid(why: &str) -> WasmError {
    WasmError::InvalidOptions(why.to_owned())
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    /// A `ConnectOptions` checked and normalised by `connectOptions`: names
    /// resolved, what the caller left out undefined (see `browser.js`).
    type CheckedOptions;

    #[wasm_bindgen(js_name = connectOptions, catch)]
    fn connect_options(options: &JsValue) -> Result<CheckedOptions, JsValue>;

    #[wasm_bindgen(method, getter, js_name = baseUrl)]
    fn base_url(this: &CheckedOptions) -> String;
    #[wasm_bindgen(method, getter)]
    fn scope(this: &CheckedOptions) -> String;
    /// Present for every scope but `"global"`.
    #[wasm_bindgen(method, getter, js_name = scopeId)]
    fn scope_id(this: &CheckedOptions) -> String;
    /// `[name, value]` pairs.
    #[wasm_bindgen(method, getter)]
    fn headers(this: &CheckedOptions) -> Array;
    #[wasm_bindgen(method, getter, js_name = getToken)]
    fn get_token(this: &CheckedOptions) -> Option<Function>;
    /// A kind name, a `{get, set, remove}` adapter, or undefined.
    #[wasm_bindgen(method, getter)]
    fn storage(this: &CheckedOptions) -> JsValue;
    /// `"frame"`, `"sync"`, milliseconds, or undefined.
    #[wasm_bindgen(method, getter)]
    fn notify(this: &CheckedOptions) -> JsValue;
    #[wasm_bindgen(method, getter, js_name = connectTimeoutMs)]
    fn connect_timeout_ms(this: &CheckedOptions) -> Option<f64>;
    #[wasm_bindgen(method, getter, js_name = prefetchDepth)]
    fn prefetch_depth(this: &CheckedOptions) -> Option<f64>;
    #[wasm_bindgen(method, getter)]
    fn seed(this: &CheckedOptions) -> Option<f64>;
}

/// Wraps a JS `getToken` (returning a string or a Promise of one).
fn js_token_source(f: Function) -> TokenSource {
    Rc::new(move || {
        let result = f.call0(&JsValue::UNDEFINED);
        Box::pin(async move {
            let mut v = result.map_err(|e| WasmError::Credentials(js::error_text(&e)))?;
            if js::is_thenable(&v) {
                v = JsFuture::from(js_sys::Promise::resolve(&v))
                    .await
                    .map_err(|e| WasmError::Credentials(js::error_text(&e)))?;
            }
            v.as_string()
                .ok_or_else(|| WasmError::Credentials("getToken must return a string".to_owned()))
        })
    })
}
