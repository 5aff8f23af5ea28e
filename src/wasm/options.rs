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
use crate::core::machine::{Config, Target};
use crate::core::protocol::Scope;

/// A future of a bearer token.
pub type TokenFuture = Pin<Box<dyn Future<Output = Result<String, WasmError>>>>;

/// What a [`TokenSource`] is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenRequest {
    /// The server refused the last token (401/403): a cached token must not
    /// be handed back. True for one call after each refusal.
    pub refresh: bool,
}

/// Called before every request for a bearer token; after a 401 the next
/// call asks for a fresh one ([`TokenRequest::refresh`]).
pub type TokenSource = Rc<dyn Fn(TokenRequest) -> TokenFuture>;

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

/// Whether the browser sends cookies (and HTTP authentication) with the
/// client's requests: fetch's `RequestCredentials`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    /// Never.
    Omit,
    /// To the page's own origin only (fetch's default).
    #[default]
    SameOrigin,
    /// To any origin; the runtime must allow it (CORS with credentials).
    Include,
}

impl Credentials {
    /// fetch's name of it.
    pub fn as_str(self) -> &'static str {
        match self {
            Credentials::Omit => "omit",
            Credentials::SameOrigin => "same-origin",
            Credentials::Include => "include",
        }
    }
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
    /// Whether cookies go with every request (fetch's `credentials`).
    pub credentials: Credentials,
    /// Called instead of the global `fetch` for every request, with
    /// `fetch`'s arguments.
    pub fetch: Option<Function>,
    /// The base URL is not the page's origin: a 401 without
    /// [`Credentials::Include`] or a token says how to send some. Read
    /// from the page by `ReplayClient.connect`; false unless a Rust caller
    /// sets it.
    pub cross_origin: bool,
    /// Where the state is kept between page loads.
    pub storage: StorageChoice,
    /// Subscriber notification pacing.
    pub notify: Notify,
    /// A request without its first byte after this long is aborted.
    pub connect_timeout_ms: u32,
    /// Backlog pages requested ahead while restoring (`Config::prefetch_depth`);
    /// each holds one of the browser's ~6 HTTP/1.1 connections per origin.
    pub prefetch_depth: u8,
    /// A first visit reads the session's newest page of at least this many
    /// events first, older ones on `load_older` (`Config::tail`; default
    /// `Config::DEFAULT_TAIL`); 0: the whole history forward.
    pub tail: u32,
    /// Seed of the reconnect jitter; random when `None`.
    pub seed: Option<u64>,
    /// A queued message older than this is `failed` `expired`, never sent
    /// (`Config::outbox_max_age_ms`).
    pub outbox_max_age_ms: u64,
    /// The live stream comes over the one multiplexed stream (PROTOCOL
    /// §4.6) this context holds for the base URL, shared with every other
    /// client connected so (the stream is sent with the first one's
    /// headers and token). The global list keeps a stream of its own.
    pub multiplex: bool,
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
            credentials: Credentials::SameOrigin,
            fetch: None,
            cross_origin: false,
            storage: StorageChoice::Local,
            notify: Notify::Frame,
            connect_timeout_ms: Config::DEFAULT_CONNECT_TIMEOUT_MS as u32,
            prefetch_depth: Config::DEFAULT_PREFETCH_DEPTH,
            seed: None,
            tail: Config::DEFAULT_TAIL,
            outbox_max_age_ms: Config::DEFAULT_OUTBOX_MAX_AGE_MS,
            multiplex: false,
        }
    }

    /// What a 401 answer's message adds: how to send credentials to a
    /// runtime at another origin, when none were (no cookies with fetch's
    /// default `same-origin`, no token). `has_token`: a `getToken` is set
    /// (`get_token` is not read).
    pub fn unauthorized_hint(&self, has_token: bool) -> Option<String> {
        let bearer = self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"));
        let sent_none = self.credentials != Credentials::Include && !has_token && !bearer;
        (self.cross_origin && sent_none).then(|| {
            format!(
                "; the runtime {} is at another origin than this page, which sends it no cookies \
                 unless connected with credentials: \"include\" (the runtime must allow them, \
                 e.g. replay-server --allow-credentials --allow-origin <this page's origin>), \
                 or pass getToken for a bearer token",
                self.base_url
            )
        })
    }

    /// Parses a JS `ConnectOptions` object (checked by `connectOptions` in
    /// `browser.js`, then read by name).
    pub fn from_js(o: &JsValue) -> Result<Options, WasmError> {
        let (mut opts, get_token) = Options::from_js_parts(o)?;
        opts.get_token = get_token.map(js_token_source);
        Ok(opts)
    }

    /// [`from_js`](Self::from_js) with `getToken` left a JS function, as
    /// the `ReplayClient` hands it to `exchange` (no Rust future between
    /// two JS promises).
    pub(crate) fn from_js_parts(o: &JsValue) -> Result<(Options, Option<Function>), WasmError> {
        let o = connect_options(o).map_err(|e| invalid(&js::error_text(&e)))?;
        let target = match text(&o, "scope").as_str() {
            "global" => Target::Global,
            name => {
                let scope = SCOPES
                    .into_iter()
                    .find(|s| s.as_str() == name)
                    .ok_or_else(|| invalid("unknown scope"))?;
                Target::Scoped {
                    scope,
                    scope_id: text(&o, "scopeId"),
                }
            }
        };
        let mut opts = Options::new(&text(&o, "baseUrl"), target);
        for pair in Array::from(&js::get(&o, "headers")).iter() {
            let pair: Array = pair.unchecked_into();
            opts.headers.push((
                pair.get(0).as_string().unwrap_or_default(),
                pair.get(1).as_string().unwrap_or_default(),
            ));
        }
        let get_token = js::get(&o, "getToken").dyn_into::<Function>().ok();
        opts.credentials = match text(&o, "credentials").as_str() {
            "omit" => Credentials::Omit,
            "include" => Credentials::Include,
            _ => Credentials::SameOrigin,
        };
        opts.fetch = js::get(&o, "fetch").dyn_into::<Function>().ok();
        opts.cross_origin = js::get(&o, "crossOrigin").is_truthy();
        // `connectOptions` has checked every value; the arms that reject
        // keep a disagreement between it and this reader from passing silently.
        let storage = js::get(&o, "storage");
        opts.storage = match storage.as_string().as_deref() {
            Some("local") => StorageChoice::Local,
            Some("session") => StorageChoice::Session,
            Some("indexeddb") => StorageChoice::IndexedDb,
            Some("memory") => StorageChoice::Memory,
            Some(_) => return Err(invalid("unknown storage kind")),
            None if storage.is_undefined() => StorageChoice::Local,
            None => StorageChoice::Custom(storage.unchecked_into()),
        };
        let notify = js::get(&o, "notify");
        opts.notify = match (notify.as_string().as_deref(), notify.as_f64()) {
            (Some("frame"), _) => Notify::Frame,
            (Some("sync"), _) => Notify::Sync,
            (None, Some(ms)) if ms >= 0.0 => Notify::Every(ms as u32),
            (None, None) if notify.is_undefined() => Notify::Frame,
            _ => return Err(invalid("notify must be \"frame\", \"sync\" or a number")),
        };
        if let Some(ms) = js::get(&o, "connectTimeoutMs").as_f64() {
            opts.connect_timeout_ms = ms.clamp(1.0, u32::MAX as f64) as u32;
        }
        if let Some(n) = js::get(&o, "prefetchDepth").as_f64() {
            opts.prefetch_depth = n.min(8.0) as u8;
        }
        if let Some(n) = js::get(&o, "tail").as_f64() {
            // The runtime's own bound (docs/protocol.md §4.1).
            opts.tail = n.clamp(0.0, 5000.0) as u32;
        }
        opts.seed = js::get(&o, "seed").as_f64().map(|s| s as u64);
        if let Some(ms) = js::get(&o, "outboxMaxAgeMs").as_f64() {
            opts.outbox_max_age_ms = ms as u64;
        }
        opts.multiplex = js::get(&o, "multiplex").is_truthy();
        Ok((opts, get_token))
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

/// A string option by name (checked by `connectOptions`).
fn text(o: &JsValue, name: &'static str) -> String {
    js::get(o, name).as_string().unwrap_or_default()
}

fn invalid(why: &str) -> WasmError {
    WasmError::InvalidOptions(why.to_owned())
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    /// Checks a `ConnectOptions` and returns it normalised (names resolved,
    /// what the caller left out undefined; see `browser.js`), to be read
    /// by name.
    #[wasm_bindgen(js_name = connectOptions, catch)]
    fn connect_options(options: &JsValue) -> Result<JsValue, JsValue>;
}

/// Wraps a JS `getToken` (returning a string or a Promise of one).
fn js_token_source(f: Function) -> TokenSource {
    Rc::new(move |request: TokenRequest| {
        let arg = js_sys::Object::new();
        js::set(&arg, "refresh", &request.refresh.into());
        let result = f.call1(&JsValue::UNDEFINED, &arg);
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

/// A Rust token source as the JS function `exchange` awaits: resolves to
/// the token, rejects with the reason's text. Only Rust clients
/// ([`Client::connect`](super::Client::connect)) take this path, so the JS
/// package links no futures executor.
pub fn token_function(source: &TokenSource) -> JsValue {
    let source = source.clone();
    Closure::<dyn Fn(JsValue) -> js_sys::Promise>::new(move |request: JsValue| {
        let refresh = js::get(&request, "refresh").is_truthy();
        let token = source(TokenRequest { refresh });
        wasm_bindgen_futures::future_to_promise(async move {
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
