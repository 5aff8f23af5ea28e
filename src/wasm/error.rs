//! The browser layer's one error type, and its JS form (`ReplayError`).

use std::borrow::Cow;

use wasm_bindgen::JsValue;

use super::js;
use crate::core::machine::{ClientNotice, CoreError, ErrorInfo, Status};

/// Everything the browser layer itself can fail with. Protocol failures of
/// the followed stream are the core's [`CoreError`](crate::core::machine::CoreError)
/// and reach the application through the status and notices instead.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum WasmError {
    /// `connect` options were missing or malformed.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// The client was closed; nothing more is sent.
    #[error("the client is closed")]
    Closed,
    /// `fetch` rejected or the body failed (DNS, CORS, reset, offline).
    #[error("network error: {0}")]
    Network(String),
    /// No answer within the connect timeout.
    #[error("no answer after {0} ms")]
    Timeout(u32),
    /// 401 or 403 after refreshing the credentials once: the status and the
    /// core's text of it (with the server's reason).
    #[error("{1}")]
    Unauthorized(u16, String),
    /// Any other non-2xx answer.
    #[error("HTTP {status}: {message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The body's `error` code, if it was JSON.
        code: String,
        /// The body's `message`, if any.
        message: String,
    },
    /// A 2xx answer whose body was not what the protocol says.
    #[error("bad json: {0}")]
    BadJson(String),
    /// `getToken()` threw or rejected.
    #[error("getToken failed: {0}")]
    Credentials(String),
    /// The server answered without CORS headers for this page's origin.
    #[error("{}", CoreError::Cors(.0.clone()))]
    Cors(String),
}

impl WasmError {
    /// The stable code carried by the JS `ReplayError`: for an HTTP error,
    /// the server's own (`not_found`, ...), `http_status` when it named none.
    pub fn code(&self) -> &str {
        match self {
            WasmError::Http { code, .. } if !code.is_empty() => code,
            WasmError::InvalidOptions(_) => "invalid_options",
            WasmError::Closed => "closed",
            WasmError::Network(_) => "network",
            WasmError::Timeout(_) => "timeout",
            WasmError::Unauthorized(..) | WasmError::Credentials(_) => "unauthorized",
            WasmError::Http { .. } => "http_status",
            WasmError::BadJson(_) => "bad_json",
            WasmError::Cors(_) => "cors",
        }
    }

    /// The HTTP status behind the error, if any.
    pub fn status(&self) -> Option<u16> {
        match self {
            WasmError::Unauthorized(s, _) | WasmError::Http { status: s, .. } => Some(*s),
            _ => None,
        }
    }

    /// A `ReplayError` instance for JS.
    pub fn to_js(&self) -> JsValue {
        js::make_replay_error(self.code(), &self.to_string(), self.status())
    }
}

/// What the IO layer reports to the machine about a request that failed
/// before any answer.
impl From<WasmError> for CoreError {
    fn from(e: WasmError) -> CoreError {
        match e {
            WasmError::Timeout(ms) => CoreError::Timeout {
                after_ms: ms.into(),
            },
            WasmError::Credentials(why) => CoreError::Credentials(why),
            WasmError::Network(why) => CoreError::Network(why),
            WasmError::Cors(origin) => CoreError::Cors(origin),
            e => CoreError::Network(e.to_string()),
        }
    }
}

/// How a write that the machine ended in error reaches the application.
impl From<CoreError> for WasmError {
    fn from(e: CoreError) -> WasmError {
        match e {
            CoreError::Closed => WasmError::Closed,
            CoreError::NotASession => WasmError::InvalidOptions(e.to_string()),
            CoreError::Network(why) => WasmError::Network(why),
            CoreError::Cors(origin) => WasmError::Cors(origin),
            CoreError::Timeout { after_ms } => {
                WasmError::Timeout(after_ms.min(u32::MAX.into()) as u32)
            }
            CoreError::Credentials(why) => WasmError::Credentials(why),
            CoreError::Unauthorized { status, .. } => {
                WasmError::Unauthorized(status, e.to_string())
            }
            CoreError::HttpStatus {
                status,
                code,
                message,
            } => WasmError::Http {
                status,
                code,
                message,
            },
            CoreError::BadJson(why) => WasmError::BadJson(why),
            e => WasmError::Network(e.to_string()),
        }
    }
}

/// How a 401 reaches the application: its message followed by `hint`
/// (`Options::unauthorized_hint`: how to send credentials, when none were).
/// Codes stay as they are.
#[derive(Clone, Debug, Default)]
pub struct UnauthorizedHint(pub Option<String>);

impl UnauthorizedHint {
    /// A 401 whatever it refused (the stream, a restore's page, a write).
    fn add(&self, status: Option<u16>, message: &mut String) {
        if let (Some(hint), Some(401)) = (&self.0, status) {
            message.push_str(hint);
        }
    }

    /// A status whose last error may be a 401.
    pub fn status(&self, mut s: Status) -> Status {
        if let Some(e) = s.last_error.as_mut() {
            self.info(e);
        }
        s
    }

    /// An error's summary.
    pub fn info(&self, e: &mut ErrorInfo) {
        self.add(e.status, &mut e.message);
    }

    /// A notice (copied only when a hint may apply: the view lists every
    /// notice kept at each change).
    pub fn notice<'a>(&self, n: &'a ClientNotice) -> Cow<'a, ClientNotice> {
        if self.0.is_none() || n.status != Some(401) {
            return Cow::Borrowed(n);
        }
        let mut n = n.clone();
        self.add(n.status, &mut n.message);
        Cow::Owned(n)
    }

    /// A write's failure.
    pub fn error(&self, mut e: WasmError) -> WasmError {
        if let WasmError::Unauthorized(status, message) = &mut e {
            self.add(Some(*status), message);
        }
        e
    }
}

impl From<WasmError> for JsValue {
    fn from(e: WasmError) -> JsValue {
        e.to_js()
    }
}
