//! The multiplexed stream's two shapes: stream slots taken by one address
//! (32 streams of 64 subs from 127.0.0.2, every one read), and unread
//! streams' live frames (24 streams of 64 subs from three addresses, none
//! read, four writers appending 60 KB events to their logs for 25 s).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::gauges::{self, Peaks};
use super::net::{self, Answer};
use super::slow::append;
use super::Server;

/// Logs, and the subs of every attacker's stream (one per log).
const LOGS: usize = 64;
/// Victim streams per shape, and the pause between them.
const TRIES: usize = 5;

/// What the slot shape measured.
pub struct Slots {
    /// The victim's slowest `hello`, ms.
    pub victim_max_ms: f64,
    /// Victim streams that got their `hello`, of [`TRIES`].
    pub victim_ok: usize,
    /// The attacker's streams answered `200`, of 32.
    pub attacker_ok: usize,
    /// Whether the attacker's own stream, opened last, got its `hello`.
    pub attacker_new_ok: bool,
    /// Streams open on the server at the end (the attacker's share: 8).
    pub held_streams: u64,
}

/// What the unread shape measured.
pub struct Unread {
    /// Peak `RssAnon` of the server, MB.
    pub rss_mb: f64,
    /// The victim's slowest `hello`, ms.
    pub victim_max_ms: f64,
    /// Victim streams that got their `hello`, of [`TRIES`].
    pub victim_ok: usize,
    /// Events appended in the run.
    pub appended: u64,
}

/// `/v1/stream` with one sub per log, from `cursor` (empty: live).
fn mux_path(subs: usize, cursor: &str) -> String {
    let subs: Vec<String> = (0..subs)
        .map(|i| format!("sub=team:t{i}:{cursor}"))
        .collect();
    format!("/v1/stream?{}", subs.join("&"))
}

async fn logs(server: &Server) {
    for i in 0..LOGS {
        append(&server.http, &server.base, "team", &format!("t{i}"), "hi").await;
    }
}

/// Victim streams of one sub from `from`, `every` apart, each closed after
/// its `hello`; the slowest in ms and how many were served.
async fn victims(server: &Server, from: &str, every: Duration) -> (f64, usize) {
    let (times, ok) = net::victims(
        from,
        server.addr,
        &mux_path(1, ""),
        Some("event: hello"),
        TRIES,
        every,
    )
    .await;
    (net::p50_max(&times).1, ok)
}

/// Reads a stream until it ends, in a task.
fn drain(mut sock: TcpStream) {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = sock.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
}

/// 32 multiplexed streams of 64 subs from 127.0.0.2, one after the other,
/// every one read; then victims from 127.0.0.1 and a new stream of the
/// attacker.
pub async fn slots() -> Slots {
    let server = Server::start(&["--faults"]);
    logs(&server).await;
    let path = mux_path(LOGS, "0");
    let wait = Duration::from_secs(3);
    let mut attacker_ok = 0;
    for _ in 0..32 {
        let (answer, _, sock) =
            net::request("127.0.0.2", server.addr, &path, Some("event: hello"), wait).await;
        if answer == Answer::Status(200) {
            attacker_ok += 1;
            drain(sock.expect("an answered connection"));
        }
    }
    let (victim_max_ms, victim_ok) =
        victims(&server, "127.0.0.1", Duration::from_millis(300)).await;
    let (answer, took, sock) =
        net::request("127.0.0.2", server.addr, &path, Some("event: hello"), wait).await;
    eprintln!("  the attacker's new stream: {answer:?} after {took:?}");
    let comms = gauges::comms(&server.http, &server.base).await;
    eprintln!(
        "  streams open {} subscriptions {} ended for fairness {}",
        comms["streams_open"], comms["streams"], comms["evicted_for_fairness"]
    );
    drop(sock);
    Slots {
        victim_max_ms,
        victim_ok,
        attacker_ok,
        attacker_new_ok: answer == Answer::Status(200),
        held_streams: comms["streams_open"].as_u64().unwrap_or(0),
    }
}

/// A stream from `from` with a 4 KiB receive buffer: its request sent,
/// then nothing read.
async fn unread_stream(from: &str, to: SocketAddr, path: &str) -> Option<TcpStream> {
    let sock = TcpSocket::new_v4().ok()?;
    sock.set_recv_buffer_size(4096).ok()?;
    sock.bind(SocketAddr::new(from.parse::<IpAddr>().ok()?, 0))
        .ok()?;
    let mut s = tokio::time::timeout(Duration::from_secs(2), sock.connect(to))
        .await
        .ok()?
        .ok()?;
    s.write_all(&net::get(to, path, true)).await.ok()?;
    Some(s)
}

/// 24 multiplexed streams of 64 subs from 127.0.0.2 to .4, none read (each
/// given up and opened again from the start every 10 s), four writers
/// appending 60 KB events round robin to their logs for 25 s; victims from
/// 127.0.0.5 meanwhile.
pub async fn unread() -> Unread {
    const RUN: Duration = Duration::from_secs(25);
    let server = Server::start(&["--faults"]);
    logs(&server).await;
    let peaks = Peaks::start(server.pid());
    let deadline = Instant::now() + RUN;
    let path = Arc::new(mux_path(LOGS, "0"));
    let mut tasks = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..8 {
            let (path, to) = (Arc::clone(&path), server.addr);
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    let held = unread_stream(from, to, &path).await;
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    drop(held);
                }
            }));
        }
    }
    let appended = Arc::new(AtomicU64::new(0));
    let url = format!("{}/v1/admin/events", server.base);
    for w in 0..4 {
        let (http, url, appended) = (server.http.clone(), url.clone(), Arc::clone(&appended));
        tasks.push(tokio::spawn(async move {
            let text = "x".repeat(60_000);
            let mut i = w;
            while Instant::now() < deadline {
                let body = json!({"scope": "team", "scope_id": format!("t{}", i % LOGS),
                                  "type": "team.message",
                                  "data": {"from": "a", "to": "b", "text": text}});
                if let Ok(r) = http.post(&url).json(&body).send().await {
                    if r.status() == 201 {
                        appended.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 4;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (victim_max_ms, victim_ok) = victims(&server, "127.0.0.5", Duration::from_secs(4)).await;
    for t in tasks {
        let _ = t.await;
    }
    let (rss_mb, _) = peaks.stop();
    let comms = gauges::comms(&server.http, &server.base).await;
    eprintln!(
        "  lagged {} queued_full {} quotas {}",
        comms["lagged"], comms["stream_buffer_queued_full"], comms["stream_buffer_quotas"]
    );
    Unread {
        rss_mb,
        victim_max_ms,
        victim_ok,
        appended: appended.load(Ordering::Relaxed),
    }
}
