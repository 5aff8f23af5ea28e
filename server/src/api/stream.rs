//! Live streams (PROTOCOL.md §4.3): subscribe, then read the backlog, then
//! `hello`, backlog, snapshots and live frames, deduplicated at the handoff.
//! Without `Accept: text/event-stream` the same paths answer a JSON page.
//!
//! Every byte a stream writes is paid for from the process-wide stream
//! budget (`--max-stream-buffer-bytes`, `crate::budget`) until its
//! connection takes it. A backlog is read page by page, each page only
//! once room for it is reserved (the `pages` quota) and only once the
//! previous page has been taken by the connection; the room is given back
//! chunk by chunk as the connection takes them. A peer that reads nothing
//! thereby holds about one page, not its whole backlog. Every other frame
//! reserves its own room before it is handed to the body: `retry:` and the
//! first `hello` from the `opening` quota, the rest from `frames`. The
//! sending side is `writer` (`Writer`); this module routes, subscribes and
//! hands the body its channel.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use replay_core::protocol::Scope;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::error::ApiError;
use super::params::{check_ahead, parse_cursor, Params};
use super::read::{global_page, scope_page};
use crate::app::App;
use crate::fanout::{Key, Subscription};
use crate::recovery::SYSTEM_ID;
use crate::store::{LogInfo, Snapshot, StoreResult};

mod writer;
pub(super) use writer::{End, Feed, Writer};

/// Frames or backlog chunks between a writer and its response body.
const QUEUE: usize = 8;

pub(super) fn scoped_events(scope: Scope) -> MethodRouter<Arc<App>> {
    get(
        move |st: State<Arc<App>>,
              peer: ConnectInfo<SocketAddr>,
              Path(id): Path<String>,
              q: RawQuery,
              h: HeaderMap| async move { events(st, peer, scope, id, q, h).await },
    )
}

pub(super) async fn system_events(
    st: State<Arc<App>>,
    peer: ConnectInfo<SocketAddr>,
    q: RawQuery,
    h: HeaderMap,
) -> Result<Response, ApiError> {
    events(st, peer, Scope::System, SYSTEM_ID.to_owned(), q, h).await
}

pub(super) async fn global_events(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let params = Params::parse(q.as_deref());
    if !wants_sse(&headers) {
        return Ok(global_page(&app, &params).await?.into_response());
    }
    let cursor = cursor(&params, "after_id", &headers)?;
    let sub = subscribe(&app, Key::Global, peer)?;
    let info = app.log.global_info();
    let info = checked_head(&app, cursor, info, |snap| snap.global_info().map(Some)).await?;
    let start = cursor.unwrap_or(info.head);
    Ok(spawn_stream(app, None, sub, start, info.epoch, info.head))
}

/// `Retry-After` of a stream refused by a cap, in seconds.
const FULL_RETRY_AFTER_S: u64 = 2;

/// Subscribes the client at `peer`, or `503 too_many_streams` with
/// `Retry-After` at a cap.
pub(super) fn subscribe(app: &App, key: Key, peer: SocketAddr) -> Result<Subscription, ApiError> {
    let mut subs = subscribe_all(app, vec![key], peer)?;
    Ok(subs.pop().expect("one subscription per key"))
}

/// Subscribes one stream of the client at `peer` to every log in `keys`
/// (all or none: `503 too_many_streams` at a cap).
pub(super) fn subscribe_all(
    app: &App,
    keys: Vec<Key>,
    peer: SocketAddr,
) -> Result<Vec<Subscription>, ApiError> {
    app.log
        .fanout
        .subscribe_all(keys, Some(peer.ip()))
        .map_err(|full| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                format!(
                    "{full} (--max-streams, --max-streams-per-scope, --max-streams-per-client)"
                ),
            )
            .retry_after(Some(FULL_RETRY_AFTER_S))
        })
}

/// Refuses a cursor above the head (§4.3). The head from memory is the
/// published one, raised when the writer lets go of the store, just after it
/// sent the events to subscribers: a client that got one and reconnects at
/// once can be ahead of it. Such a cursor is checked against the committed
/// head in the store (rarely: no query otherwise), whose info then serves.
pub(super) async fn checked_head(
    app: &App,
    cursor: Option<u64>,
    published: LogInfo,
    committed: impl FnOnce(&Snapshot<'_>) -> StoreResult<Option<LogInfo>> + Send + 'static,
) -> Result<LogInfo, ApiError> {
    let Some(c) = cursor else {
        return Ok(published);
    };
    let info = if c > published.head {
        app.log.read(committed).await?.unwrap_or(published)
    } else {
        published
    };
    check_ahead(c, &info.epoch, info.head)?;
    Ok(info)
}

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// The cursor rules: the query parameter wins, then `Last-Event-ID`, else live only.
fn cursor(params: &Params, key: &str, headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    if let Some(v) = params.get(key).or_else(|| params.get("after_seq")) {
        return parse_cursor(v).map(Some);
    }
    match headers.get("last-event-id") {
        Some(v) => parse_cursor(v.to_str().unwrap_or("invalid")).map(Some),
        None => Ok(None),
    }
}

async fn events(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    scope: Scope,
    id: String,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let params = Params::parse(q.as_deref());
    if !wants_sse(&headers) {
        return Ok(scope_page(&app, scope, id, &params).await?.into_response());
    }
    let cursor = cursor(&params, "after_seq", &headers)?;
    // Subscribe before reading anything from the store (§4.3.1). The head
    // comes from memory: `hello` never waits for a query.
    let sub = subscribe(&app, Key::Scope(scope, id.clone()), peer)?;
    let info = app.log.log_info(scope, &id)?.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{} not found", scope.as_str()),
        )
    })?;
    let key = id.clone();
    let info = checked_head(&app, cursor, info, move |snap| snap.log_info(scope, &key)).await?;
    let start = cursor.unwrap_or(info.head);
    Ok(spawn_stream(
        app,
        Some((scope, id)),
        sub,
        start,
        info.epoch,
        info.head,
    ))
}

fn spawn_stream(
    app: Arc<App>,
    scope: Option<(Scope, String)>,
    sub: Subscription,
    start: u64,
    epoch: String,
    head: u64,
) -> Response {
    let (tx, rx) = channel();
    let open = app.streams_open.clone();
    let mut writer = Writer::new(app, tx, true);
    tokio::spawn(async move {
        let _ = writer.run(Feed::new(scope, start), sub, epoch, head).await;
    });
    sse_response(rx, open)
}

/// What a writer hands its response body: bytes, with the room in the
/// stream budget they hold until the connection takes them.
pub(super) type Out = (Bytes, Option<OwnedSemaphorePermit>);

/// A writer's channel to its response body.
pub(super) fn channel() -> (mpsc::Sender<Out>, mpsc::Receiver<Out>) {
    mpsc::channel(QUEUE)
}

/// Counts an open SSE body (`streams_open` of the comms diagnostics) until
/// the server drops it, i.e. until the connection is gone.
struct Counted {
    inner: mpsc::Receiver<Out>,
    /// The room of the chunk taken last: given back when the connection
    /// asks for the next one, i.e. when it has written most of it.
    held: Option<OwnedSemaphorePermit>,
    open: Arc<std::sync::atomic::AtomicU64>,
}

impl tokio_stream::Stream for Counted {
    type Item = io::Result<Bytes>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.held = None;
        self.inner.poll_recv(cx).map(|got| {
            got.map(|(bytes, held)| {
                self.held = held;
                Ok(bytes)
            })
        })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The response around a writer's channel, with the headers of §4.3.5.
pub(super) fn sse_response(
    rx: mpsc::Receiver<Out>,
    open: Arc<std::sync::atomic::AtomicU64>,
) -> Response {
    open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = Counted {
        inner: rx,
        held: None,
        open,
    };
    let mut resp = event_stream(Body::from_stream(body));
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// `body` as a `text/event-stream` response, not to be cached; the
/// headers every stream has (the callers add their own).
pub(crate) fn event_stream(body: Body) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
