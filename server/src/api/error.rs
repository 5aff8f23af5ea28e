//! The API's error answer and its JSON body extractor.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use replay_core::protocol::ErrorBody;
use serde::de::DeserializeOwned;

use crate::app::App;
use crate::store::StoreError;

/// Largest accepted request body.
pub const MAX_BODY: usize = 64 * 1024;

/// `Retry-After` (seconds) of a `503 store_unavailable`: the store was
/// unreachable; a client backs off at least this long and tries again.
pub const STORE_RETRY_AFTER_S: u64 = 1;

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

    /// `400` with a code.
    pub fn bad_request(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// The same error with a `Retry-After` of `secs`.
    pub fn retry_after(mut self, secs: Option<u64>) -> ApiError {
        self.retry_after = secs;
        self
    }

    /// The JSON body (a multiplexed stream sends it in-band).
    pub fn into_body(self) -> ErrorBody {
        self.body
    }

    /// The error code (`invalid_cursor`, ...).
    #[cfg(test)]
    pub fn code(&self) -> &str {
        &self.body.error
    }

    /// `404 not_found`.
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// `400 invalid_cursor`.
    pub fn invalid_cursor(raw: &str) -> ApiError {
        ApiError::bad_request(
            "invalid_cursor",
            format!("cursor {raw:?} is not a base-10 integer >= 0"),
        )
    }

    /// `409 cursor_ahead` with the log's epoch and head.
    pub fn cursor_ahead(cursor: u64, epoch: &str, head: u64) -> ApiError {
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
        if e.is_unavailable() {
            tracing::warn!(error = %e, "store unavailable");
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                e.to_string(),
            )
            .retry_after(Some(STORE_RETRY_AFTER_S));
        }
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

/// A request body read whole, in at most `--header-timeout-ms` (a peer
/// that trickles its body cannot hold a connection and a handler forever;
/// `408 body_timeout`), at most [`MAX_BODY`] bytes (`413`).
pub struct BodyBytes(pub Bytes);

impl FromRequest<Arc<App>> for BodyBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let within = Duration::from_millis(app.cfg.header_timeout_ms.max(1));
        let read = tokio::time::timeout(within, Bytes::from_request(req, app))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "the request body took more than {} ms (--header-timeout-ms)",
                        within.as_millis()
                    ),
                )
            })?;
        read.map(BodyBytes).map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!("request bodies are limited to {MAX_BODY} bytes"),
                )
            } else {
                ApiError::bad_request("invalid_body", r.body_text())
            }
        })
    }
}

/// A JSON body whose every failure is a JSON error (413 when too large,
/// 408 when it is not sent in time).
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<App>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let BodyBytes(bytes) = BodyBytes::from_request(req, app).await?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))
    }
}
