//! The multiplexed stream (PROTOCOL.md §4.6): one SSE connection carrying
//! several scopes. Every scope is subscribed before any backlog is read; then,
//! scope by scope, its `hello`, backlog and snapshots (or an in-band
//! `subscription.error`); then the live events of all scopes, interleaved,
//! each scope with its own heartbeat. Per scope it is the scoped stream of
//! [`super::stream`], whose writer it drives.

mod subs;

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use replay_core::json::RawJson;
use replay_core::protocol::{ErrorBody, Event};
use tokio::time::Instant;

use super::stream::{checked_head, sse_response, End, Feed, Writer};
use super::ApiError;
use crate::app::App;
use crate::fanout::{Frame, Key, Subscription};
use crate::log::transient;
use subs::{Start, Sub};

/// The in-band error's `type`.
const SUBSCRIPTION_ERROR: &str = "subscription.error";

/// `GET /v1/stream?sub=…`: always a stream (there is no JSON form).
pub(super) async fn multiplexed(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(&uri).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_subscription",
            e.body_text(),
        )
    })?;
    let subs = subs::parse(&pairs)?;
    // Subscribe to every scope before any backlog is read (§4.6), as one
    // stream: all its scopes count towards the stream caps, and one over a
    // cap refuses the whole request (503); a stream that gives way to
    // another ends whole.
    let live = |sub: &Sub| matches!(sub.start, Start::Live | Start::After(_));
    let keys = subs
        .iter()
        .filter(|s| live(s))
        .map(|s| Key::Scope(s.scope, s.id.clone()))
        .collect();
    let mut subscriptions = super::stream::subscribe_all(&app, keys, peer)?.into_iter();
    let subscribed: Vec<(Sub, Option<Subscription>)> = subs
        .into_iter()
        .map(|sub| {
            let got = if live(&sub) {
                subscriptions.next()
            } else {
                None
            };
            (sub, got)
        })
        .collect();
    let (tx, rx) = super::stream::channel();
    let mut writer = Writer::new(Arc::clone(&app), tx, false);
    if let Some(sub) = subscribed.iter().find_map(|(_, s)| s.as_ref()) {
        writer.end_when_let_go(sub);
    }
    let open = app.streams_open.clone();
    tokio::spawn(async move {
        let _ = run(app, writer, subscribed).await;
    });
    Ok(sse_response(rx, open))
}

/// One scope on the live part of the stream.
struct Live {
    feed: Feed,
    sub: Subscription,
    /// When this scope last had a frame; a heartbeat is due one interval on.
    heard: Instant,
}

async fn run(
    app: Arc<App>,
    mut w: Writer,
    subscribed: Vec<(Sub, Option<Subscription>)>,
) -> Result<(), End> {
    w.write_retry().await?;
    let mut lives = Vec::with_capacity(subscribed.len());
    for (sub, live) in subscribed {
        if let Some(live) = open_scope(&app, &mut w, sub, live).await? {
            lives.push(live);
        }
    }
    let heartbeat = w.heartbeat();
    let mut next = 0;
    loop {
        let due = lives.iter().map(|l| l.heard + heartbeat).min();
        let step = tokio::select! {
            got = next_frame(&mut lives, &mut next) => Step::Frame(got),
            _ = sleep_until(due) => Step::Beat,
            _ = w.closed() => Step::Close,
        };
        match step {
            Step::Frame((i, Some(frame))) => {
                // The frames every scope queued meanwhile (they waited
                // too) go out in the same write, not each after a wait
                // of its own.
                w.batch_wait(&frame).await?;
                w.start_gathering();
                let l = &mut lives[i];
                l.heard = Instant::now();
                let mut out = w.forward(&mut l.feed, &frame.env, &frame.json).await;
                let n = lives.len();
                for k in 0..n {
                    let Ok(()) = out else { break };
                    let l = &mut lives[(i + k) % n];
                    out = match w.gather_queued(&mut l.feed, &mut l.sub).await {
                        Ok(true) => {
                            l.heard = Instant::now();
                            Ok(())
                        }
                        got => got.map(drop),
                    };
                }
                w.write_gathered(out).await?;
            }
            // One scope's subscriber lagged (or the fan-out let go): end the
            // stream, as a scoped stream would end (§4.3.4).
            Step::Frame((_, None)) | Step::Close => return Err(End::Closed),
            Step::Beat => {
                let now = Instant::now();
                for l in lives.iter_mut().filter(|l| l.heard + heartbeat <= now) {
                    w.beat(&mut l.feed, &mut l.sub).await?;
                    l.heard = Instant::now();
                }
            }
        }
    }
}

enum Step {
    Frame((usize, Option<Arc<Frame>>)),
    Beat,
    Close,
}

/// Sleeps until `due`; forever when no scope is live.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The next frame of any live scope (`None`: that scope's subscription
/// ended). Polling starts after the scope served last, so a busy scope
/// cannot starve the others.
async fn next_frame(lives: &mut [Live], next: &mut usize) -> (usize, Option<Arc<Frame>>) {
    if lives.is_empty() {
        return std::future::pending().await;
    }
    poll_fn(|cx| {
        let n = lives.len();
        for k in 0..n {
            let i = (*next + k) % n;
            if let Poll::Ready(got) = lives[i].sub.poll_recv(cx) {
                *next = (i + 1) % n;
                return Poll::Ready((i, got));
            }
        }
        Poll::Pending
    })
    .await
}

/// Opens one scope as its scoped stream would (§4.3.1), or sends its
/// `subscription.error` instead (`None`: nothing more for that scope).
async fn open_scope(
    app: &App,
    w: &mut Writer,
    sub: Sub,
    live: Option<Subscription>,
) -> Result<Option<Live>, End> {
    let cursor = match sub.start {
        Start::Invalid(ref e) => {
            let body = ErrorBody {
                error: e.error.clone(),
                message: e.message.clone(),
                epoch: None,
                head: None,
            };
            return refuse(app, w, &sub, body).await;
        }
        Start::Live => None,
        Start::After(c) => Some(c),
    };
    let published = match app.log.log_info(sub.scope, &sub.id) {
        Ok(published) => published,
        // In band, as a scoped stream's `503`: the client retries.
        Err(e) => return refuse(app, w, &sub, ApiError::from(e).into_body()).await,
    };
    let (Some(live), Some(published)) = (live, published) else {
        let what = sub.scope.as_str();
        let body = ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        );
        return refuse(app, w, &sub, body.into_body()).await;
    };
    let (scope, id) = (sub.scope, sub.id.clone());
    let info = match checked_head(app, cursor, published, move |s| s.log_info(scope, &id)).await {
        Ok(info) => info,
        Err(e) => return refuse(app, w, &sub, e.into_body()).await,
    };
    let mut feed = Feed::new(Some((sub.scope, sub.id)), cursor.unwrap_or(info.head));
    w.open(&mut feed, info.epoch, info.head).await?;
    Ok(Some(Live {
        feed,
        sub: live,
        heard: Instant::now(),
    }))
}

/// Sends a scope's in-band `subscription.error` (§4.6).
async fn refuse(
    app: &App,
    w: &mut Writer,
    sub: &Sub,
    body: ErrorBody,
) -> Result<Option<Live>, End> {
    let head = app.log.published_head(sub.scope, &sub.id);
    let data = serde_json::to_string(&body).expect("an error body serialises");
    let event = Event::Unknown {
        type_name: SUBSCRIPTION_ERROR.to_owned(),
        data: RawJson::parse(&data).expect("serde_json writes valid JSON"),
    };
    w.write_envelope(&transient(sub.scope, &sub.id, head, event, true))
        .await?;
    Ok(None)
}
