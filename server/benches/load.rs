//! Load test (not a timed test): 1 000 concurrent streams on loopback, 50 of
//! them never reading. Readers' append-to-delivery latency (p50/p99) is
//! measured first with the 950 readers alone, then with the 50 stuck peers
//! beside them after their sockets have filled; the server's resident memory
//! is read from `/proc`. The server is the real binary, a child process.
//! Prints `server_load_* N` lines for `cargo xtask bench`.
//!
//! Bounded: 1 000 streams, 10 logs, fixed rounds, every wait has a deadline.
//!
//! Run: `cargo bench -p replay-server --bench load`.

mod spawn;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use replay_core::sse::{SseItem, SseParser};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Logs the streams are spread over (a team log each).
const LOGS: usize = 10;
/// Reading streams per log.
const READERS_PER_LOG: usize = 95;
/// Stuck streams per log (never read after the headers).
const STUCK_PER_LOG: usize = 5;
/// Measured rounds per phase: one append to every log, then a pause.
const ROUNDS: usize = 60;
const ROUND_PAUSE: Duration = Duration::from_millis(20);
/// Events per log sent to fill the stuck peers' sockets before phase 2.
const FILL_EVENTS: usize = 100;
/// Text of every event (~1 KB frames).
const TEXT_BYTES: usize = 900;
/// Deadline of every wait.
const DEADLINE: Duration = Duration::from_secs(120);

/// Arrival of one durable frame at one reader: (log, seq, when).
type Arrival = (usize, u64, Instant);

/// `VmRSS` and `VmHWM` (peak) of a process, in MB.
fn rss_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn team(log: usize) -> String {
    format!("load{log}")
}

/// Appends one event to a log; returns its seq.
async fn append(http: &reqwest::Client, base: &str, log: usize, text: &str) -> u64 {
    let v: Value = http
        .post(format!("{base}/v1/admin/events"))
        .json(
            &json!({"scope": "team", "scope_id": team(log), "type": "team.message",
                      "data": {"from": "load", "to": "all", "text": text}}),
        )
        .send()
        .await
        .expect("append")
        .json()
        .await
        .expect("append answer");
    v["seq"].as_u64().expect("seq")
}

/// Opens a reading stream; every durable frame's arrival goes to `out`.
async fn reader(
    http: &reqwest::Client,
    base: &str,
    log: usize,
    out: tokio::sync::mpsc::UnboundedSender<Arrival>,
    ready: tokio::sync::mpsc::Sender<()>,
) {
    let resp = http
        .get(format!("{base}/v1/teams/{}/events", team(log)))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("stream");
    assert_eq!(resp.status(), 200, "reader refused");
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut said_ready = false;
        while let Some(Ok(chunk)) = body.next().await {
            let now = Instant::now();
            parser.push(&chunk, &mut |item| {
                if let SseItem::Event(ev) = item {
                    if ev.event_type == "hello" && !said_ready {
                        said_ready = true;
                        let _ = ready.try_send(());
                    }
                    if ev.id_field_seen {
                        let seq = ev.last_event_id.parse().unwrap_or(0);
                        let _ = out.send((log, seq, now));
                    }
                }
            });
        }
    });
}

/// Opens a stream with a tiny receive buffer and never reads past its headers.
async fn stuck(base: &str, log: usize) -> tokio::net::TcpStream {
    let addr: SocketAddr = base.strip_prefix("http://").unwrap().parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(1024).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let req = format!(
        "GET /v1/teams/{}/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n",
        team(log)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 64];
    let n = s.read(&mut head).await.unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 200"),
        "stuck stream refused"
    );
    s
}

/// Runs measured rounds; returns (log, seq) → send instant.
async fn rounds(http: &reqwest::Client, base: &str, text: &str) -> HashMap<(usize, u64), Instant> {
    let mut sent = HashMap::new();
    for _ in 0..ROUNDS {
        for log in 0..LOGS {
            let at = Instant::now();
            let seq = append(http, base, log, text).await;
            sent.insert((log, seq), at);
        }
        tokio::time::sleep(ROUND_PAUSE).await;
    }
    sent
}

/// Drains arrivals until every reader has every sent event (or the deadline);
/// returns the latencies in ms, sorted, and how many were missing.
async fn latencies(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Arrival>,
    sent: &HashMap<(usize, u64), Instant>,
) -> (Vec<f64>, usize) {
    let expect = sent.len() * READERS_PER_LOG;
    let mut lat = Vec::with_capacity(expect);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while lat.len() < expect {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((log, seq, at))) => {
                if let Some(t0) = sent.get(&(log, seq)) {
                    lat.push(at.duration_since(*t0).as_secs_f64() * 1000.0);
                }
            }
            _ => break,
        }
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let missing = expect - lat.len();
    (lat, missing)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("replay-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("load.sqlite").to_str().unwrap().to_owned();
    let server = spawn::start(&db, 120);
    let pid = server.id();
    let base = server.base.clone();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(8)
        .build()
        .unwrap();
    let text = "é".repeat(TEXT_BYTES / 2);
    for log in 0..LOGS {
        append(&http, &base, log, "first").await; // streams of unknown logs are 404
    }
    let (rss_idle, _) = rss_mb(pid);

    // Phase 1: 950 readers alone.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(LOGS * READERS_PER_LOG);
    for log in 0..LOGS {
        for _ in 0..READERS_PER_LOG {
            reader(&http, &base, log, tx.clone(), ready_tx.clone()).await;
        }
    }
    for _ in 0..LOGS * READERS_PER_LOG {
        tokio::time::timeout(DEADLINE, ready_rx.recv())
            .await
            .expect("every reader got hello");
    }
    let sent = rounds(&http, &base, &text).await;
    let (alone, missing_alone) = latencies(&mut rx, &sent).await;
    let (rss_readers, _) = rss_mb(pid);

    // Phase 2: 50 stuck peers join; their sockets are filled first.
    let mut stuck_streams = Vec::new();
    for log in 0..LOGS {
        for _ in 0..STUCK_PER_LOG {
            stuck_streams.push(stuck(&base, log).await);
        }
    }
    let mut fill = HashMap::new();
    for _ in 0..FILL_EVENTS {
        for log in 0..LOGS {
            let seq = append(&http, &base, log, &text).await;
            fill.insert((log, seq), Instant::now());
        }
    }
    let _ = latencies(&mut rx, &fill).await; // drained, not measured
    let sent = rounds(&http, &base, &text).await;
    let (beside, missing_beside) = latencies(&mut rx, &sent).await;
    let (rss_stuck, rss_peak) = rss_mb(pid);
    let comms: Value = http
        .get(format!("{base}/v1/diagnostics/comms"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    drop(stuck_streams);

    println!(
        "server_load_streams {}",
        LOGS * (READERS_PER_LOG + STUCK_PER_LOG)
    );
    println!("server_load_p50_ms {:.3}", percentile(&alone, 0.50));
    println!("server_load_p99_ms {:.3}", percentile(&alone, 0.99));
    println!("server_load_stuck_p50_ms {:.3}", percentile(&beside, 0.50));
    println!("server_load_stuck_p99_ms {:.3}", percentile(&beside, 0.99));
    println!("server_load_rss_idle_mb {rss_idle:.1}");
    println!("server_load_rss_readers_mb {rss_readers:.1}");
    println!("server_load_rss_stuck_mb {rss_stuck:.1}");
    println!("server_load_rss_peak_mb {rss_peak:.1}");
    eprintln!(
        "load: {} + {} latency samples ({missing_alone} + {missing_beside} missing), \
         server comms at the end: streams {} lagged {} refused {}; {:.1} s",
        alone.len(),
        beside.len(),
        comms["streams"],
        comms["lagged"],
        comms["refused"],
        started.elapsed().as_secs_f64()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
