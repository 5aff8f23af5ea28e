//! Slow readers: many streams opened from the start of a large log whose
//! peers read nothing. The backlog bytes the server buffers for them stay
//! under `--max-stream-buffer-bytes` (the `stream_buffer_*` gauges of the
//! comms diagnostics), every one of them ends within the write timeout
//! (plus slack) however little its socket accepts, and meanwhile a stream
//! of another client still gets its `hello` at once.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Event, Scope, TeamMessage};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Slow readers.
const READERS: usize = 50;
/// Events in the large log, and the text of each: a ~2 MB backlog.
const EVENTS: usize = 40;
const EVENT_TEXT: usize = 50_000;
/// The write timeout of the test server.
const WRITE_TIMEOUT_MS: u64 = 1500;
/// The stream budget of the test server: far less than the readers' backlogs.
const BUDGET: usize = 4 << 20;

/// Opens a stream on a new connection with a 64 KiB receive buffer, reads
/// its response head and then nothing.
async fn open(addr: SocketAddr, path: &str) -> TcpStream {
    common::unread_stream(addr, path, 64 << 10).await
}

/// Reads `s` until `needle` has come; the time it took.
async fn until(s: &mut TcpStream, needle: &str, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let left = within.checked_sub(start.elapsed())?;
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    Some(start.elapsed())
}

fn gauge(v: &Value, key: &str) -> Option<u64> {
    v[key].as_u64()
}

/// Samples the comms diagnostics every 50 ms until aborted, keeping the
/// largest value `pick` finds (`u64::MAX` when it finds none).
fn sample_max(
    s: &Server,
    pick: fn(&Value) -> Option<u64>,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let sampled = Arc::new(AtomicU64::new(0));
    let (http, url, max) = (
        s.http.clone(),
        s.url("/v1/diagnostics/comms"),
        Arc::clone(&sampled),
    );
    let task = tokio::spawn(async move {
        loop {
            if let Ok(r) = http.get(&url).send().await {
                if let Ok(v) = r.json::<Value>().await {
                    max.fetch_max(pick(&v).unwrap_or(u64::MAX), Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (sampled, task)
}

/// A figure of one quota of the stream budget (`pages`, `frames`, `opening`).
fn quota(v: &Value, name: &str, key: &str) -> Option<u64> {
    v["stream_buffer_quotas"][name][key].as_u64()
}

/// Polls the comms diagnostics until no stream is open; when, and the last
/// figures.
async fn until_no_stream(
    s: &Server,
    since: Instant,
    within: Duration,
) -> (Option<Duration>, Value) {
    let mut last = Value::Null;
    while since.elapsed() < within {
        last = s.get("/v1/diagnostics/comms").await.1;
        if last["streams_open"] == 0 {
            return (Some(since.elapsed()), last);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (None, last)
}

/// How long another client waits for its `hello` (a team log's stream).
async fn victim_hello(addr: SocketAddr) -> Option<Duration> {
    let start = Instant::now();
    let mut victim = open(addr, "/v1/teams/victim/events?after_seq=0").await;
    let hello = until(&mut victim, "event: hello", 5 * SEC)
        .await
        .map(|_| start.elapsed());
    eprintln!("victim hello after {hello:?}");
    hello
}

/// What both bounded-stream tests ask at the end: `streams` ended within
/// `within` of their opening, and the victim's `hello` came within 1 s.
fn ended_and_greeted(
    failures: &mut Vec<String>,
    streams: &str,
    ended: Option<Duration>,
    within: Duration,
    hello: Option<Duration>,
) {
    if ended.is_none_or(|t| t > within) {
        failures.push(format!(
            "{streams} did not end within {within:?} of their opening ({ended:?})"
        ));
    }
    if hello.is_none_or(|t| t > SEC) {
        failures.push(format!("victim's hello after {hello:?}, not within 1 s"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_are_bounded_in_memory_and_time() {
    let s = server_with(|c| {
        c.write_timeout_ms = WRITE_TIMEOUT_MS;
        c.heartbeat_ms = 500;
        c.max_stream_buffer_bytes = BUDGET;
    })
    .await;
    let addr: SocketAddr = s.base.strip_prefix("http://").unwrap().parse().unwrap();
    let app = Arc::clone(s.running.as_ref().unwrap().app());
    tokio::task::spawn_blocking(move || {
        let text = "x".repeat(EVENT_TEXT);
        for _ in 0..EVENTS {
            let event = Event::TeamMessage(TeamMessage {
                from: "a".into(),
                to: "b".into(),
                text: text.clone(),
            });
            app.log.append(Scope::Team, "big", event).unwrap();
        }
    })
    .await
    .unwrap();
    s.append("team", "victim", 0).await;

    // The gauges, sampled while the readers are stuck.
    let (sampled, sampler) = sample_max(&s, |v| gauge(v, "stream_buffer_bytes"));

    let started = Instant::now();
    let mut readers = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        readers.push(open(addr, "/v1/teams/big/events?after_seq=0").await);
    }
    let opened = Instant::now();
    eprintln!("{READERS} slow readers open in {:?}", opened - started);

    // Another client's stream, while the readers' backlogs are being written.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let hello = victim_hello(addr).await;

    // Every stream ends within the write timeout of its last progress: one
    // stuck from the start within one write timeout; one that waited for
    // room in the budget (up to a write timeout: then it ends) and then got
    // stuck, within two. Plus slack for a loaded machine.
    let within = 2 * Duration::from_millis(WRITE_TIMEOUT_MS) + 2 * SEC;
    let (ended, last) = until_no_stream(&s, opened, within + 2 * SEC).await;
    sampler.abort();
    eprintln!("streams ended after {ended:?} (last comms {last})");
    let held = sampled.load(Ordering::Relaxed);
    let peak = gauge(&last, "stream_buffer_peak_bytes");
    let max = gauge(&last, "stream_buffer_max_bytes");
    eprintln!("stream buffer: sampled max {held}, peak {peak:?}, budget {max:?}");

    let mut failures = Vec::new();
    // What the connections took: the kernel's send buffer (capped) and the
    // peer's receive window, not whole backlogs.
    let backlog = (EVENTS * EVENT_TEXT) as u64;
    let taken = gauge(&last, "bytes_sent").unwrap_or(0) / READERS as u64;
    eprintln!("taken per stream: {taken} of a {backlog} B backlog");
    if taken > backlog * 6 / 10 {
        failures.push(format!(
            "each connection took {taken} B of its {backlog} B backlog"
        ));
    }
    match (peak, max) {
        (Some(peak), Some(max)) => {
            if max != BUDGET as u64 {
                failures.push(format!("budget {max}, configured {BUDGET}"));
            }
            if held > max || peak > max {
                failures.push(format!(
                    "buffered {held} (peak {peak}) over the budget {max}"
                ));
            }
            if peak == 0 {
                failures.push("the backlogs reserved nothing".to_owned());
            }
        }
        _ => failures.push("no stream_buffer_* gauges in the comms diagnostics".to_owned()),
    }
    ended_and_greeted(&mut failures, "the slow streams", ended, within, hello);
    drop(readers);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A stream's `hello` and snapshots are paid for from the stream budget
/// (the `opening` and `frames` quotas), and given back once the
/// connection has taken them.
#[tokio::test]
async fn hello_and_snapshots_are_paid_for_from_the_stream_budget() {
    let s = server().await;
    let sid = s.create_session().await;
    let mut stream = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    stream
        .until(5 * SEC, |f| is_type(f, "tasks.snapshot"))
        .await
        .expect("the session's snapshots");
    let (_, v) = s.get("/v1/diagnostics/comms").await;
    let opening = quota(&v, "opening", "peak_bytes");
    let frames = quota(&v, "frames", "peak_bytes");
    assert!(
        opening.is_some_and(|b| b >= 1024) && frames.is_some_and(|b| b >= 1024),
        "hello (opening {opening:?}) or snapshots (frames {frames:?}) paid nothing: {v}"
    );
    drop(stream);
    let (ended, last) = until_no_stream(&s, Instant::now(), 3 * SEC).await;
    assert!(ended.is_some(), "{last}");
    assert_eq!(gauge(&last, "stream_buffer_bytes"), Some(0), "{last}");
}

/// Live frames are paid for too. Peers that read
/// nothing of a busy log hold at most the budget's `frames` and `queued`
/// quotas (they used to hold up to 8 frames each, and their subscriber
/// buffers, outside any budget), each ends within
/// the write timeout of its last progress, and meanwhile another client's
/// `hello` (the `opening` quota, which no stuck frame can take) comes
/// within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_live_frames_are_bounded_by_the_budget_and_hello_still_comes() {
    const LIVE_BUDGET: usize = 1 << 20;
    const STUCK: usize = 4;
    let s = server_with(|c| {
        c.write_timeout_ms = WRITE_TIMEOUT_MS;
        c.heartbeat_ms = 500;
        c.max_stream_buffer_bytes = LIVE_BUDGET;
    })
    .await;
    let addr: SocketAddr = s.base.strip_prefix("http://").unwrap().parse().unwrap();
    s.append("team", "busy", 0).await;
    let mut stuck = Vec::with_capacity(STUCK);
    for _ in 0..STUCK {
        stuck.push(open(addr, "/v1/teams/busy/events").await);
    }
    let (frames, sampler) = sample_max(&s, |v| quota(v, "frames", "bytes"));
    let (total, total_sampler) = sample_max(&s, |v| gauge(v, "stream_buffer_bytes"));
    let app = Arc::clone(s.running.as_ref().unwrap().app());
    let opened = Instant::now();
    tokio::task::spawn_blocking(move || {
        let text = "x".repeat(EVENT_TEXT);
        for _ in 0..30 {
            let event = Event::TeamMessage(TeamMessage {
                from: "a".into(),
                to: "b".into(),
                text: text.clone(),
            });
            app.log.append(Scope::Team, "busy", event).unwrap();
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    s.append("team", "victim", 0).await;
    let hello = victim_hello(addr).await;

    let within = 2 * Duration::from_millis(WRITE_TIMEOUT_MS) + 2 * SEC;
    let (ended, last) = until_no_stream(&s, opened, within + 2 * SEC).await;
    sampler.abort();
    total_sampler.abort();
    let (frames, total) = (
        frames.load(Ordering::Relaxed),
        total.load(Ordering::Relaxed),
    );
    eprintln!("frames quota held at most {frames}, all {total}; ended after {ended:?}: {last}");

    let mut failures = Vec::new();
    match (
        quota(&last, "frames", "max_bytes"),
        gauge(&last, "stream_buffer_max_bytes"),
    ) {
        (Some(frames_max), Some(max)) => {
            if frames > frames_max || total > max {
                failures.push(format!(
                    "held {frames} of frames (quota {frames_max}), {total} in all (budget {max})"
                ));
            }
            // Four connections' worth of 50 KB frames wait for room: in
            // the writers (`frames`) or, before a writer takes them, in
            // the subscriber buffers (`queued`, whose subscribers, full,
            // are ended at once).
            let peak = |name| quota(&last, name, "peak_bytes").unwrap_or(0);
            let held = peak("frames") + peak("queued");
            if held < frames_max / 2 {
                failures.push(format!(
                    "stuck live frames held only {held} (frames and queued) of {frames_max}"
                ));
            }
        }
        _ => failures.push(format!(
            "no stream budget quotas in the comms diagnostics: {last}"
        )),
    }
    // Before: 0, the stuck frames were outside the budget. (The most held
    // at once: the stuck streams may end, full, before a sample.)
    let peak = gauge(&last, "stream_buffer_peak_bytes").unwrap_or(0);
    if peak < (LIVE_BUDGET / 8) as u64 {
        failures.push(format!(
            "stream_buffer_peak_bytes {peak} with live frames stuck"
        ));
    }
    ended_and_greeted(&mut failures, "the stuck streams", ended, within, hello);
    drop(stuck);
    assert!(failures.is_empty(), "{failures:#?}");
}
