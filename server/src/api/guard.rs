//! What every request passes before its handler: the `Host` allow-list, the
//! bearer token, the JSON-only rule for writes and the request-level faults.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::app::App;
use crate::config::TOKEN_COOKIE;
use crate::faults::Route;
use crate::head::HostAllowList;

/// Refuses a request whose `Host` is not allowed: a page on a rebound DNS
/// name (`evil.example` resolving to 127.0.0.1) is same-origin with its own
/// name, so CORS does not stop it; its `Host` header does.
pub(super) async fn host_layer(
    State(hosts): State<Arc<HostAllowList>>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    match host {
        Some(h) if hosts.allows(h) => next.run(req).await,
        _ => ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            "the Host header names no address this server answers for (see --allow-host)",
        )
        .into_response(),
    }
}

/// With `--token`, a request carries it as `Authorization: Bearer` or as
/// the [`TOKEN_COOKIE`] (a page whose runtime authenticates with a cookie:
/// its `fetch` cannot add a header the page does not know).
pub(super) async fn auth_layer(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(token) = &app.cfg.token {
        // Constant time in the bytes compared: the answer's timing does not
        // tell how much of a guess was right.
        let right = |t: &str| bool::from(t.as_bytes().ct_eq(token.as_bytes()));
        let headers = req.headers();
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(right);
        if !bearer && !token_cookies(headers).any(right) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token (Authorization: Bearer, or the replay_token cookie)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The values of every [`TOKEN_COOKIE`] in the request's `Cookie` headers
/// (a browser may send one per path that set it).
fn token_cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| value.trim_matches('"'))
}

/// Writes must say `Content-Type: application/json`: a cross-origin page
/// can send a "simple" POST (`mode: "no-cors"`, text/plain) without a CORS
/// preflight, but not a JSON one. The one exception is a bodyless cancel
/// from a client that is not a page (PROTOCOL.md §4.4's `curl -X POST`).
pub(super) async fn json_writes_layer(req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !is_json(&req) && !is_bodyless_cancel(&req) {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "writes need Content-Type: application/json",
        )
        .into_response();
    }
    next.run(req).await
}

/// A cancel with no body at all, from no page: a browser sends `Origin`
/// with every POST (same-origin ones too), so a page on another origin
/// cannot stop a turn with a no-cors request; curl and servers send none.
fn is_bodyless_cancel(req: &Request) -> bool {
    let headers = req.headers();
    let no_body = headers.get(header::TRANSFER_ENCODING).is_none()
        && headers
            .get(header::CONTENT_LENGTH)
            .is_none_or(|len| len.as_bytes() == b"0");
    req.uri().path().ends_with("/cancel")
        && no_body
        && headers.get(header::CONTENT_TYPE).is_none()
        && headers.get(header::ORIGIN).is_none()
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
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

pub(super) async fn faults_layer(
    State(app): State<Arc<App>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(route) = classify(&req) {
        if let Some(d) = app.faults.take_delay(route) {
            tokio::time::sleep(d).await;
        }
        if let Some(f) = app.faults.take_failure(route) {
            let status =
                StatusCode::from_u16(f.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return ApiError::new(
                status,
                f.error.as_deref().unwrap_or("injected_fault"),
                format!("fault injection: {}", f.status),
            )
            .retry_after(f.retry_after)
            .into_response();
        }
        return super::hostile::serve(&app, req, next).await;
    }
    next.run(req).await
}
