//! What `connect` takes: the Rust [`Options`] and their parsing from the JS
//! `ConnectOptions` object of `api.d.ts`.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use js_sys::{Array, Function, Object};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use super::error::WasmError;
use super::js;
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

/// When subscribers are told about a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// At most once per animation frame (`setTimeout(0)` where there is none).
    Frame,
    /// Right after the input that changed something.
    Sync,
    /// At most once per this many milliseconds.
    Every(u32),
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

    /// Parses a JS `ConnectOptions` object.
    pub fn from_js(o: &JsValue) -> Result<Options, WasmError> {
        if !o.is_object() {
            return Err(invalid("options must be an object"));
        }
        let base_url = js::get(o, "baseUrl")
            .as_string()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid("baseUrl must be a non-empty string"))?;
        let mut opts = Options::new(&base_url, target_from_js(o)?);
        let headers = js::get(o, "headers");
        if headers.is_object() {
            for entry in Object::entries(headers.unchecked_ref()).iter() {
                let pair: Array = entry.unchecked_into();
                let (k, v) = (pair.get(0).as_string(), pair.get(1).as_string());
                match (k, v) {
                    (Some(k), Some(v)) => opts.headers.push((k, v)),
                    _ => return Err(invalid("headers values must be strings")),
                }
            }
        } else if !headers.is_undefined() {
            return Err(invalid("headers must be an object"));
        }
        let get_token = js::get(o, "getToken");
        if let Some(f) = get_token.dyn_ref::<Function>() {
            opts.get_token = Some(js_token_source(f.clone()));
        } else if !get_token.is_undefined() {
            return Err(invalid("getToken must be a function"));
        }
        opts.storage = storage_from_js(&js::get(o, "storage"))?;
        let notify = js::get(o, "notify");
        opts.notify = match (notify.as_string().as_deref(), notify.as_f64()) {
            (Some("frame"), _) => Notify::Frame,
            (Some("sync"), _) => Notify::Sync,
            (_, Some(ms)) if ms >= 0.0 => Notify::Every(ms as u32),
            _ if notify.is_undefined() => Notify::Frame,
            _ => return Err(invalid("notify must be \"frame\", \"sync\" or a number")),
        };
        if let Some(ms) = optional_number(o, "connectTimeoutMs")? {
            opts.connect_timeout_ms = ms.clamp(1.0, u32::MAX as f64) as u32;
        }
        if let Some(n) = optional_number(o, "prefetchDepth")? {
            opts.prefetch_depth = n.min(8.0) as u8;
        }
        opts.seed = optional_number(o, "seed")?.map(|s| s as u64);
        Ok(opts)
    }
}

fn invalid(msg: &str) -> WasmError {
    WasmError::InvalidOptions(msg.to_owned())
}

fn optional_number(o: &JsValue, name: &'static str) -> Result<Option<f64>, WasmError> {
    let v = js::get(o, name);
    match v.as_f64() {
        Some(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
        _ if v.is_undefined() => Ok(None),
        _ => Err(WasmError::InvalidOptions(
            name.to_owned() + " must be a number >= 0",
        )),
    }
}

fn target_from_js(o: &JsValue) -> Result<Target, WasmError> {
    let session_id = js::get(o, "sessionId").as_string();
    let scope = js::get(o, "scope").as_string();
    let scope_id = js::get(o, "scopeId").as_string();
    let scope = match scope.as_deref() {
        None | Some("session") => Scope::Session,
        Some("team") => Scope::Team,
        Some("process") => Scope::Process,
        Some("worktree") => Scope::Worktree,
        Some("system") => Scope::System,
        Some("global") => return Ok(Target::Global),
        Some(_) => return Err(invalid("unknown scope")),
    };
    let id = match scope {
        Scope::Session => session_id.or(scope_id),
        Scope::System => Some(scope_id.unwrap_or_else(|| "runtime".to_owned())),
        _ => scope_id,
    };
    match id {
        Some(scope_id) if !scope_id.is_empty() => Ok(Target::Scoped { scope, scope_id }),
        _ => Err(invalid("sessionId or scopeId is required for this scope")),
    }
}

fn storage_from_js(v: &JsValue) -> Result<StorageChoice, WasmError> {
    if v.is_undefined() {
        return Ok(StorageChoice::Local);
    }
    if let Some(s) = v.as_string() {
        return match s.as_str() {
            "local" => Ok(StorageChoice::Local),
            "session" => Ok(StorageChoice::Session),
            "indexeddb" => Ok(StorageChoice::IndexedDb),
            "memory" => Ok(StorageChoice::Memory),
            _ => Err(invalid("unknown storage kind")),
        };
    }
    let complete = ["get", "set", "remove"]
        .iter()
        .all(|m| js::get(v, m).is_function());
    if v.is_object() && complete {
        Ok(StorageChoice::Custom(v.clone().unchecked_into()))
    } else {
        Err(invalid(
            "storage must be a kind or an object with get, set and remove",
        ))
    }
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
