//! A lying server for one session (`--faults`, fault kind `hostile`): the
//! shapes the client must survive with its loops paced and its memory
//! bounded. Each answers that session's requests in place of the
//! real handlers, or rewrites what they send; other sessions are untouched.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use replay_core::protocol::{Envelope, Event, ReplayPage, Scope};
use tokio::sync::mpsc;

use super::params::Params;
use crate::app::App;
use crate::faults::Hostile;

/// Events in each page of an endless history.
const ENDLESS_PAGE_EVENTS: u64 = 500;
/// The head an endless history announces, whatever it sends.
const ENDLESS_HEAD: u64 = 3;
/// How long after its `hello` an epoch-flipping stream says the log was
/// recreated: time for the client's restore of a small session to agree.
const FLIP_AFTER: Duration = Duration::from_millis(300);
/// Decompressed bytes of one gzip bomb (then it ends): far past any client
/// budget, a few hundred KB on the wire.
const BOMB_BYTES: usize = 1 << 30;
/// The bomb's repeated block: one MiB of one event's data line.
const BOMB_BLOCK: usize = 1 << 20;

/// The session a request is about and whether it is its stream or replay.
enum Target {
    Stream(String),
    Replay(String),
}

fn target(req: &Request) -> Option<Target> {
    let path = req.uri().path();
    let path = path.strip_prefix("/v1").unwrap_or(path);
    let rest = path.strip_prefix("/sessions/")?;
    let (id, what) = rest.split_once('/')?;
    let sse = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    match what {
        "events" if sse => Some(Target::Stream(id.to_owned())),
        "replay" => Some(Target::Replay(id.to_owned())),
        _ => None,
    }
}

/// Answers a request of a session under a hostile fault its way; any
/// other request goes on to the real handlers.
pub(super) async fn serve(app: &Arc<App>, req: Request, next: Next) -> Response {
    let shape = match target(&req) {
        Some(Target::Stream(id) | Target::Replay(id)) => app.faults.hostile(&id),
        None => None,
    };
    let Some(shape) = shape else {
        return next.run(req).await;
    };
    match (shape, target(&req)) {
        (Hostile::HelloThenClose, Some(Target::Stream(_))) => {
            rewrite(next.run(req).await, hello_then_close)
        }
        (Hostile::EpochFlipAfterRestore, Some(Target::Stream(_))) => {
            rewrite(next.run(req).await, epoch_flip)
        }
        (Hostile::GzipBombStream, Some(Target::Stream(_))) => gzip_bomb(),
        (Hostile::EndlessHistory, Some(Target::Replay(id))) => endless_page(app, &id, &req),
        _ => next.run(req).await,
    }
}

/// A stream's frames as they come, and where the rewritten ones go.
struct Frames {
    body: axum::body::BodyDataStream,
    pending: Vec<u8>,
    out: mpsc::Sender<Bytes>,
}

impl Frames {
    /// The next whole SSE block (up to and without its blank line), or
    /// `None` when the stream ended.
    async fn next_block(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.pending.drain(..end + 2).collect();
                return Some(String::from_utf8_lossy(&block[..end]).into_owned());
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.pending.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// Sends a block on; false when the peer is gone.
    async fn send(&mut self, block: &str) -> bool {
        self.out
            .send(Bytes::from(format!("{block}\n\n")))
            .await
            .is_ok()
    }
}

/// Runs `shape` over a stream's frames in a task of its own; the response
/// carries what it sends.
fn rewrite<F, Fut>(resp: Response, shape: F) -> Response
where
    F: FnOnce(Frames) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let (out, rx) = mpsc::channel::<Bytes>(16);
    let frames = Frames {
        body: body.into_data_stream(),
        pending: Vec::new(),
        out,
    };
    tokio::spawn(shape(frames));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

fn is_hello(block: &str) -> bool {
    block.lines().any(|l| l == "event: hello")
}

/// `retry: 0`, the real `hello`, and the end.
async fn hello_then_close(mut frames: Frames) {
    while let Some(block) = frames.next_block().await {
        if is_hello(&block) {
            let _ = frames.send("retry: 0").await && frames.send(&block).await;
            return;
        }
    }
}

/// The real stream, until [`FLIP_AFTER`] past its `hello`: then a `hello`
/// with a new epoch, and the end.
async fn epoch_flip(mut frames: Frames) {
    let mut hello = None;
    while let Some(block) = frames.next_block().await {
        let was_hello = is_hello(&block);
        if !frames.send(&block).await {
            return;
        }
        if was_hello {
            hello = Some(block);
            break;
        }
    }
    let Some(hello) = hello else { return };
    let flip_at = tokio::time::Instant::now() + FLIP_AFTER;
    loop {
        match tokio::time::timeout_at(flip_at, frames.next_block()).await {
            Ok(Some(block)) if frames.send(&block).await => {}
            Ok(_) => return,
            Err(_) => break,
        }
    }
    let epoch = format!("e_flip_{}", crate::util::entropy() % 1_000_000);
    let flipped: Vec<String> = hello
        .lines()
        .map(|l| match l.strip_prefix("data: ") {
            Some(json) => format!("data: {}", with_epoch(json, &epoch)),
            None => l.to_owned(),
        })
        .collect();
    let _ = frames.send(&flipped.join("\n")).await;
}

/// A `hello` envelope's JSON with another epoch.
fn with_epoch(json: &str, epoch: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(json) else {
        return json.to_owned();
    };
    if let Some(data) = v.get_mut("data").and_then(|d| d.as_object_mut()) {
        data.insert("epoch".into(), epoch.into());
    }
    v.to_string()
}

/// `200 text/event-stream` with `Content-Encoding: gzip`: one event's
/// `data:` line that never ends, [`BOMB_BYTES`] of it decompressed.
fn gzip_bomb() -> Response {
    use flate2::{Compress, Compression, FlushCompress};
    let mut deflate = Compress::new(Compression::best(), false);
    let deflated = |deflate: &mut Compress, input: &[u8], flush| {
        let mut out = Vec::new();
        let before = deflate.total_in();
        loop {
            let done = (deflate.total_in() - before) as usize;
            out.reserve(64 << 10);
            deflate
                .compress_vec(&input[done..], &mut out, flush)
                .expect("deflate of bytes in memory");
            // All read, and room left over: the flush is complete.
            let all_in = deflate.total_in() - before == input.len() as u64;
            if all_in && out.len() < out.capacity() {
                break out;
            }
        }
    };
    // A gzip member: header, raw deflate, never the trailer (the client
    // gives up long before the end).
    let header: &[u8] = &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let first = deflated(&mut deflate, b"data: ", FlushCompress::Full);
    // After a full flush a block refers to nothing before it, so the same
    // compressed megabyte may follow itself any number of times.
    let block = Bytes::from(deflated(
        &mut deflate,
        &[b'x'; BOMB_BLOCK],
        FlushCompress::Full,
    ));
    let head = Bytes::from([header, &first].concat());
    let blocks = std::iter::repeat_n(block, BOMB_BYTES / BOMB_BLOCK);
    let body =
        futures_util::stream::iter(std::iter::once(head).chain(blocks).map(Ok::<_, Infallible>));
    let mut resp = super::stream::event_stream(Body::from_stream(body));
    resp.headers_mut()
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    resp
}

/// A replay page of [`ENDLESS_PAGE_EVENTS`] new events after the asked
/// cursor, `has_more: true`, under a head that stays [`ENDLESS_HEAD`].
fn endless_page(app: &Arc<App>, session: &str, req: &Request) -> Response {
    let params = Params::parse(req.uri().query());
    let after = params
        .get("after_cursor")
        .and_then(|c| c.parse::<u64>().ok())
        .unwrap_or(0);
    let epoch = app
        .log
        .log_info(Scope::Session, session)
        .ok()
        .flatten()
        .map_or_else(|| app.log.global_info().epoch, |i| i.epoch);
    let history: Vec<Envelope> = (after.saturating_add(1)..)
        .take(ENDLESS_PAGE_EVENTS as usize)
        .map(|seq| {
            let data = serde_json::json!({
                "message_id": format!("endless_{seq}"),
                "turn_id": "endless",
                "role": "user",
                "text": format!("endless {seq}"),
            });
            let event = Event::decode("message.committed", Some(&data.to_string()))
                .expect("a valid message.committed");
            Envelope::durable(
                seq,
                Scope::Session,
                session.to_owned(),
                seq,
                String::new(),
                event,
            )
        })
        .collect();
    let page = ReplayPage {
        epoch,
        boot_id: app.worker().boot_id.clone(),
        cursor: after.saturating_add(ENDLESS_PAGE_EVENTS),
        head: ENDLESS_HEAD,
        has_more: true,
        history,
        live_turn: None,
        tasks: None,
        older_cursor: None,
    };
    axum::Json(page).into_response()
}
