//! The API's error answer and its JSON body extractor.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use replay_core::protocol::ErrorBody;
use serde::de::DeserializeOwned;

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
                ApiError::bad_request("invalid_body", r.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))
    }
}
