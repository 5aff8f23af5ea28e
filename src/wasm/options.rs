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
    /// `browser.js`).
    pub fn from_js(o: &JsValue) -> Result<Options, WasmError> {
        let a = connect_options(o).map_err(|e| WasmError::InvalidOptions(js::error_text(&e)))?;
        let text = |i| a.get(i).as_string().unwrap_or_default();
        let number = |i| a.get(i).as_f64();
        const SCOPES: [Scope; 5] = [
            Scope::Session,
            Scope::Team,
            Scope::Process,
            Scope::Worktree,
            Scope::System,
        ];
        let target = match SCOPES.get(number(1).unwrap_or(0.0) as usize) {
            Some(&scope) => Target::Scoped {
                scope,
                scope_id: text(2),
            },
            None => Target::Global,
        };
        let mut opts = Options::new(&text(0), target);
        let pairs: Array = a.get(3).unchecked_into();
        for pair in pairs.iter() {
            let pair: Array = pair.unchecked_into();
            opts.headers.push((
                pair.get(0).as_string().unwrap_or_default(),
                pair.get(1).as_string().unwrap_or_default(),
            ));
        }
        if let Some(f) = a.get(4).dyn_ref::<Function>() {
            opts.get_token = Some(js_token_source(f.clone()));
        }
        let storage = a.get(5);
        opts.storage = match storage.as_f64() {
            Some(n) => [
                StorageChoice::Local,
                StorageChoice::Session,
                StorageChoice::IndexedDb,
                StorageChoice::Memory,
            ][(n as usize).min(3)]
            .clone(),
            None => StorageChoice::Custom(storage.unchecked_into()),
        };
        opts.notify = match number(6) {
            Some(ms) if ms >= 0.0 => Notify::Every(ms as u32),
            Some(-2.0) => Notify::Sync,
            _ => Notify::Frame,
        };
        if let Some(ms) = number(7) {
            opts.connect_timeout_ms = ms.clamp(1.0, u32::MAX as f64) as u32;
        }
        if let Some(n) = number(8) {
            opts.prefetch_depth = n.min(8.0) as u8;
        }
        opts.seed = number(9).map(|s| s as u64);
        Ok(opts)
    }
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[wasm_bindgen(js_name = connectOptions, catch)]
    fn connect_options(options: &JsValue) -> Result<Array, JsValue>;
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
