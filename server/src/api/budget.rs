//! The bytes of large JSON answers (replay and event pages, transcripts)
//! being built or written at once, in one process-wide budget: a peer that
//! stops reading keeps its answer in memory until the write timeout, so
//! many of them would otherwise add up without bound.
//!
//! A request reserves its answer's most likely size before it reads the
//! store, gives back what the encoded answer does not need, and holds the
//! rest until its body has been handed to the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;
use tokio::sync::OwnedSemaphorePermit;

use super::ApiError;
use crate::budget::{self, ResponseBudget};

/// How long a request waits for room before `503 busy`.
const WAIT: Duration = Duration::from_secs(2);
/// `Retry-After` of `503 busy`, in seconds.
const RETRY_AFTER_S: u64 = 1;
/// Body chunks: the connection asks for the next one only when it has
/// written most of the last, so the reservation is held while it writes.
const CHUNK: usize = 64 << 10;

/// Bytes reserved for one answer.
pub(super) struct Reserved(OwnedSemaphorePermit);

impl ResponseBudget {
    /// Reserves `bytes` (at most the whole budget), waiting a little for room.
    pub(super) async fn reserve(&self, bytes: usize) -> Result<Reserved, ApiError> {
        let units = self.0.units_for(bytes);
        let permits = Arc::clone(&self.0.permits);
        match tokio::time::timeout(WAIT, permits.acquire_many_owned(units)).await {
            Ok(Ok(p)) => Ok(Reserved(p)),
            _ => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "too many large answers are being written (--max-response-bytes)",
            )
            .retry_after(Some(RETRY_AFTER_S))),
        }
    }
}

impl Reserved {
    /// Encodes `value` as the JSON answer, keeping only what it needs of
    /// the reservation (more when it is larger: the excess is taken as it
    /// is, since the answer already exists).
    pub(super) fn json<T: Serialize>(mut self, value: &T) -> Result<Response, ApiError> {
        let bytes = serde_json::to_vec(value).map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "encode", e.to_string())
        })?;
        // More than reserved is taken as it is: the answer already exists.
        budget::fit(&mut self.0, bytes.len());
        let len = bytes.len();
        let body = Chunks {
            bytes: Bytes::from(bytes),
            _reserved: self,
        };
        let mut resp = Response::new(Body::from_stream(body));
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        Ok(resp)
    }
}

/// An encoded answer handed out in chunks, holding its reservation until
/// the last one is taken (or the connection is gone).
struct Chunks {
    bytes: Bytes,
    _reserved: Reserved,
}

impl tokio_stream::Stream for Chunks {
    type Item = io::Result<Bytes>;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.bytes.is_empty() {
            return Poll::Ready(None);
        }
        let n = self.bytes.len().min(CHUNK);
        Poll::Ready(Some(Ok(self.bytes.split_to(n))))
    }
}
