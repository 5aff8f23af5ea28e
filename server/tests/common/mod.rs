//! Shared helpers for the server tests: an in-process server on a free
//! loopback port, a JSON client and an SSE reader built on the crate's own
//! parser. Real HTTP, no mocks.
#![allow(dead_code)]

pub mod bin;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use replay_core::protocol::{Envelope, Event};
use replay_core::sse::{SseItem, SseParser};
use replay_server::{Config, Running};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A running test server with a client.
pub struct Server {
    /// `None` when the server is another process.
    pub running: Option<Running>,
    pub base: String,
    pub http: reqwest::Client,
}

/// A test configuration: fast agent, short heartbeats, faults on, in memory.
pub fn test_config() -> Config {
    Config {
        listen: "127.0.0.1:0".into(),
        db: ":memory:".into(),
        faults: true,
        heartbeat_ms: 300,
        delta_ms: 3,
        ask_persist_ms: 150,
        bg_ms: 400,
        seed: 7,
        ..Config::default()
    }
}

/// A database file in the temp directory, removed (with its WAL files) on drop.
pub struct TempDb(pub String);

impl TempDb {
    pub fn new(name: &str) -> TempDb {
        let dir = std::env::temp_dir();
        let file = format!("replay-{name}-{}.sqlite", replay_server::util::entropy());
        TempDb(dir.join(file).to_str().unwrap().to_owned())
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0));
        }
    }
}

pub async fn server() -> Server {
    server_with(|_| {}).await
}

pub async fn server_with(f: impl FnOnce(&mut Config)) -> Server {
    let mut cfg = test_config();
    f(&mut cfg);
    let running = replay_server::start(cfg).await.expect("server starts");
    let base = running.base_url();
    Server {
        running: Some(running),
        base,
        http: reqwest::Client::new(),
    }
}

impl Server {
    /// A client for a server running elsewhere (e.g. the binary).
    pub fn remote(base: String) -> Server {
        Server {
            running: None,
            base,
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self.http.get(self.url(path)).send().await.expect("GET");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("POST");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn create_session(&self) -> String {
        let (s, v) = self.post("/v1/sessions", json!({"title": "test"})).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["session_id"].as_str().unwrap().to_owned()
    }

    pub async fn send(&self, sid: &str, mid: &str, text: &str) -> String {
        let (s, v) = self
            .post(
                &format!("/v1/sessions/{sid}/messages"),
                json!({"message_id": mid, "text": text}),
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{v}");
        v["turn_id"].as_str().unwrap().to_owned()
    }

    /// Appends a durable event through the admin API.
    pub async fn append(&self, scope: &str, scope_id: &str, n: u64) -> Value {
        let (s, v) = self
            .post(
                "/v1/admin/events",
                json!({"scope": scope, "scope_id": scope_id, "type": "team.message",
                       "data": {"from": "a", "to": "b", "text": format!("m{n} é🙂")}}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    pub async fn fault(&self, spec: Value) -> Value {
        let (s, v) = self.post("/v1/admin/faults", spec).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    /// All durable events of a scope path (e.g. `sessions/ses_1`).
    pub async fn events(&self, scope_path: &str) -> Vec<Envelope> {
        let (s, v) = self
            .get(&format!("/v1/{scope_path}/events?after_seq=0&limit=5000"))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| Envelope::from_json(e.to_string().as_bytes()).unwrap())
            .collect()
    }

    /// The session's transcript as this server folds it.
    pub async fn transcript(&self, sid: &str) -> replay_core::protocol::Transcript {
        let r = self
            .http
            .get(self.url(&format!("/v1/sessions/{sid}/transcript")))
            .send()
            .await
            .expect("GET transcript");
        assert_eq!(r.status(), StatusCode::OK);
        let body = r.bytes().await.expect("body");
        replay_core::json::from_slice(&body).expect("a transcript")
    }

    /// Polls a scope's events until `pred` holds for one of them.
    pub async fn wait_event(&self, scope_path: &str, pred: impl Fn(&Envelope) -> bool) -> Envelope {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = self.events(scope_path).await.into_iter().find(|e| pred(e)) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting on {scope_path}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the turn's terminal event.
    pub async fn wait_turn_end(&self, sid: &str, turn_id: &str) -> Envelope {
        let t = turn_id.to_owned();
        self.wait_event(&format!("sessions/{sid}"), move |e| match &e.event {
            Event::TurnCompleted(x) | Event::TurnCancelled(x) => x.turn_id == t,
            Event::TurnFailed(x) => x.turn_id == t,
            _ => false,
        })
        .await
    }

    pub async fn stream(&self, path: &str, last_event_id: Option<&str>) -> Sse {
        open_sse(&self.http, &self.url(path), last_event_id).await
    }
}

/// One parsed SSE frame.
// Short-lived test values: boxing the envelope would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Frame {
    Retry(u64),
    Event {
        ty: String,
        /// The block's own `id:` (durable frames only).
        id: Option<String>,
        env: Envelope,
    },
}

impl Frame {
    pub fn env(&self) -> Option<&Envelope> {
        match self {
            Frame::Event { env, .. } => Some(env),
            Frame::Retry(_) => None,
        }
    }

    pub fn seq(&self) -> Option<u64> {
        self.env().and_then(|e| e.seq)
    }
}

/// An open SSE response.
pub struct Sse {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    body: Option<futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>>,
    parser: SseParser,
    queue: VecDeque<Frame>,
    pub bytes: usize,
    pub ended: bool,
    pub error_body: Option<Value>,
}

pub async fn open_sse(http: &reqwest::Client, url: &str, last_event_id: Option<&str>) -> Sse {
    let mut req = http.get(url).header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let resp = req.send().await.expect("stream request");
    let status = resp.status();
    let headers = resp.headers().clone();
    if status != StatusCode::OK {
        let body = resp.json().await.ok();
        return Sse {
            status,
            headers,
            body: None,
            parser: SseParser::new(),
            queue: VecDeque::new(),
            bytes: 0,
            ended: true,
            error_body: body,
        };
    }
    Sse {
        status,
        headers,
        body: Some(resp.bytes_stream().boxed()),
        parser: SseParser::new(),
        queue: VecDeque::new(),
        bytes: 0,
        ended: false,
        error_body: None,
    }
}

impl Sse {
    /// The next frame, or `None` when the stream ended or `timeout` passed.
    pub async fn next(&mut self, timeout: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(f) = self.queue.pop_front() {
                return Some(f);
            }
            let body = self.body.as_mut()?;
            let chunk = match tokio::time::timeout_at(deadline, body.next()).await {
                Err(_) => return None,
                Ok(Some(Ok(c))) => c,
                Ok(_) => {
                    self.ended = true;
                    self.body = None;
                    return None;
                }
            };
            self.bytes += chunk.len();
            let queue = &mut self.queue;
            self.parser.push(&chunk, &mut |item| match item {
                SseItem::Retry(ms) => queue.push_back(Frame::Retry(ms)),
                SseItem::Event(ev) => {
                    let env =
                        Envelope::from_json(ev.data.as_bytes()).expect("frame data is an envelope");
                    queue.push_back(Frame::Event {
                        ty: ev.event_type,
                        id: ev.id_field_seen.then_some(ev.last_event_id),
                        env,
                    });
                }
                SseItem::Error(e) => panic!("sse error {e}"),
            });
        }
    }

    /// Reads frames until `pred` matches one (returned) or the timeout.
    pub async fn until(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Frame) -> bool,
    ) -> Option<Frame> {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let f = self.next(left).await?;
            if pred(&f) {
                return Some(f);
            }
        }
        None
    }

    /// Reads everything for `d`, returning the frames.
    pub async fn collect_for(&mut self, d: Duration) -> Vec<Frame> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.next(left).await {
                Some(f) => out.push(f),
                None => break,
            }
        }
        out
    }
}

pub fn is_type(f: &Frame, ty: &str) -> bool {
    matches!(f, Frame::Event { ty: t, .. } if t == ty)
}

pub const SEC: Duration = Duration::from_secs(1);

/// The base URL (`http://127.0.0.1:PORT`) a spawned `replay-server` binary
/// prints on its first stdout line; `child` must have a piped stdout.
pub fn listening_base(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("a piped stdout"))
        .read_line(&mut line)
        .expect("the server's first line");
    line.trim()
        .strip_prefix("replay-server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned()
}

/// Opens an SSE stream at `addr` on a connection of its own whose receive
/// buffer is `recv_buffer` bytes (what the peer's kernel takes then does
/// not depend on the host's defaults), reads the start of its `200`
/// response head (128 bytes at most: what follows, the first events
/// included, is left unread) and returns the socket, never read again by
/// this: a reader that stopped.
pub async fn unread_stream(
    addr: std::net::SocketAddr,
    path: &str,
    recv_buffer: u32,
) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(recv_buffer).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 128];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut head))
        .await
        .expect("stream answers")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}
