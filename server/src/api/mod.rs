//! The HTTP surface (PROTOCOL.md §4): routing, errors, body and query
//! parsing, authentication and the request-level faults.

mod admin;
mod diag;
mod multiplex;
mod read;
mod stream;
mod write;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use replay_client::core::protocol::{ErrorBody, Scope};
use serde::de::DeserializeOwned;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::app::App;
use crate::faults::Route;
use crate::store::StoreError;

/// Largest accepted request body.
pub const MAX_BODY: usize = 64 * 1024;

/// An error answer: `{"error": CODE, "message": TEXT}` with a status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: code.to_owned(),
                message: message.into(),
                epoch: None,
                head: None,
            },
            retry_after: None,
        }
    }

    fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    fn invalid_cursor(raw: &str) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
            format!("cursor {raw:?} is not a base-10 integer >= 0"),
        )
    }

    fn cursor_ahead(cursor: u64, epoch: &str, head: u64) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::CONFLICT,
            "cursor_ahead",
            format!("cursor {cursor} is above the head {head}"),
        );
        e.body.epoch = Some(epoch.to_owned());
        e.body.head = Some(head);
        e
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        tracing::error!(error = %e, "store error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_error",
            e.to_string(),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// A JSON body whose every failure is a JSON error (413 when too large).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!("request bodies are limited to {MAX_BODY} bytes"),
                )
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", r.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.to_string()))
    }
}

/// Query parameters, raw (values we read are numbers; no decoding needed).
pub struct Params(Vec<(String, String)>);

impl Params {
    fn parse(raw: Option<&str>) -> Params {
        Params(
            raw.unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (p.to_owned(), String::new()),
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A page size: default 500, at most 5000, at least 1.
    fn limit(&self) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(500),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
                .map(|n| n.clamp(1, 5000) as usize)
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_limit",
                        format!("limit {v:?} is not an integer"),
                    )
                }),
        }
    }
}

/// Parses a cursor value: base-10 digits only. Digits too large for a u64 are
/// a valid cursor that is above any head.
pub fn parse_cursor(raw: &str) -> Result<u64, ApiError> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid_cursor(raw));
    }
    Ok(raw.parse::<u64>().unwrap_or(u64::MAX))
}

/// Checks a cursor against a head.
pub fn check_ahead(cursor: u64, epoch: &str, head: u64) -> Result<(), ApiError> {
    if cursor > head {
        Err(ApiError::cursor_ahead(cursor, epoch, head))
    } else {
        Ok(())
    }
}

/// Builds the whole router: `/v1` API plus static files.
pub fn router(app: Arc<App>) -> Router {
    let mut v1 = Router::new()
        .route("/sessions", post(write::create_session))
        .route("/sessions/{id}/messages", post(write::post_message))
        .route("/sessions/{id}/questions/{qid}/answer", post(write::answer))
        .route("/sessions/{id}/cancel", post(write::cancel))
        .route("/sessions/{id}/replay", get(read::replay))
        .route("/sessions/{id}/transcript", get(read::transcript))
        .route(
            "/sessions/{id}/events",
            stream::scoped_events(Scope::Session),
        )
        .route("/teams/{id}/events", stream::scoped_events(Scope::Team))
        .route(
            "/processes/{id}/events",
            stream::scoped_events(Scope::Process),
        )
        .route("/processes/{id}/log", get(read::process_log))
        .route(
            "/worktrees/{id}/events",
            stream::scoped_events(Scope::Worktree),
        )
        .route("/system/events", get(stream::system_events))
        .route("/events", get(stream::global_events))
        .route("/stream", get(multiplex::multiplexed))
        .route("/diagnostics", get(diag::overview))
        .route("/diagnostics/recovery", get(diag::recovery))
        .route("/diagnostics/processes", get(diag::processes))
        .route("/diagnostics/comms", get(diag::comms));
    if app.faults.enabled() {
        v1 = v1
            .route(
                "/admin/faults",
                post(admin::add_fault).get(admin::list_faults),
            )
            .route("/admin/events", post(admin::append_event));
    }
    let v1 = v1
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed here",
            )
        })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            faults_layer,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), auth_layer))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        // The default predicate never compresses text/event-stream.
        .layer(CompressionLayer::new());
    let mut root = Router::new().nest("/v1", v1);
    if let Some(dir) = &app.cfg.static_dir {
        root = root.fallback_service(
            tower_http::services::ServeDir::new(dir).append_index_html_on_directories(true),
        );
    }
    if !app.cfg.allow_origins.is_empty() {
        root = root.layer(cors(&app.cfg.allow_origins));
    }
    root.with_state(app)
}

fn cors(origins: &[String]) -> CorsLayer {
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::CACHE_CONTROL,
            header::HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([header::CONTENT_TYPE, header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
}

async fn auth_layer(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(token) = &app.cfg.token {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| t == token);
        if !ok {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Which fault route a request belongs to (`None`: admin, never faulted).
fn classify(req: &Request) -> Option<Route> {
    let path = req.uri().path();
    let path = path.strip_prefix("/v1").unwrap_or(path);
    if path.starts_with("/admin") {
        return None;
    }
    let sse = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    Some(if path.ends_with("/replay") {
        Route::Replay
    } else if path.ends_with("/events") || path == "/stream" {
        // The multiplexed stream has no JSON form: it is always a stream.
        if sse || path == "/stream" {
            Route::Stream
        } else {
            Route::Events
        }
    } else if path.ends_with("/messages") {
        Route::Messages
    } else if path.ends_with("/answer") {
        Route::Answer
    } else if path.ends_with("/cancel") {
        Route::Cancel
    } else if path == "/sessions" {
        Route::Sessions
    } else if path.ends_with("/transcript") {
        Route::Transcript
    } else if path.starts_with("/diagnostics") {
        Route::Diagnostics
    } else {
        Route::Any
    })
}

async fn faults_layer(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(route) = classify(&req) {
        if let Some(d) = app.faults.take_delay(route) {
            tokio::time::sleep(d).await;
        }
        if let Some(f) = app.faults.take_failure(route) {
            let status =
                StatusCode::from_u16(f.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut e = ApiError::new(
                status,
                f.error.as_deref().unwrap_or("injected_fault"),
                format!("fault injection: {}", f.status),
            );
            e.retry_after = f.retry_after;
            return e.into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_parsing_follows_the_table() {
        assert_eq!(parse_cursor("0").unwrap(), 0);
        assert_eq!(parse_cursor("42").unwrap(), 42);
        assert_eq!(parse_cursor("99999999999999999999999").unwrap(), u64::MAX);
        for bad in ["", "-1", "+1", "1.5", "abc", " 1", "0x10"] {
            assert_eq!(
                parse_cursor(bad).unwrap_err().body.error,
                "invalid_cursor",
                "{bad}"
            );
        }
    }

    #[test]
    fn limits_are_bounded() {
        assert_eq!(Params::parse(None).limit().unwrap(), 500);
        assert_eq!(Params::parse(Some("limit=0")).limit().unwrap(), 1);
        assert_eq!(Params::parse(Some("limit=9000")).limit().unwrap(), 5000);
        assert!(Params::parse(Some("limit=x")).limit().is_err());
    }
}
