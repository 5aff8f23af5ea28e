//! Issue 34, item 2: many streams opened from the start of a large log whose
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
    let sampled = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (http, url, sampled) = (
            s.http.clone(),
            s.url("/v1/diagnostics/comms"),
            Arc::clone(&sampled),
        );
        tokio::spawn(async move {
            loop {
                if let Ok(r) = http.get(&url).send().await {
                    if let Ok(v) = r.json::<Value>().await {
                        let held = gauge(&v, "stream_buffer_bytes").unwrap_or(u64::MAX);
                        sampled.fetch_max(held, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let started = Instant::now();
    let mut readers = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        readers.push(open(addr, "/v1/teams/big/events?after_seq=0").await);
    }
    let opened = Instant::now();
    eprintln!("{READERS} slow readers open in {:?}", opened - started);

    // Another client's stream, while the readers' backlogs are being written.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let victim_start = Instant::now();
    let mut victim = open(addr, "/v1/teams/victim/events?after_seq=0").await;
    let hello = until(&mut victim, "event: hello", 5 * SEC)
        .await
        .map(|_| victim_start.elapsed());
    eprintln!("victim hello after {hello:?}");
    drop(victim);

    // Every stream ends within the write timeout of its last progress: one
    // stuck from the start within one write timeout; one that waited for
    // room in the budget (up to a write timeout: then it ends) and then got
    // stuck, within two. Plus slack for a loaded machine.
    let within = 2 * Duration::from_millis(WRITE_TIMEOUT_MS) + 2 * SEC;
    let mut ended = None;
    let mut last = Value::Null;
    while opened.elapsed() < within + 2 * SEC {
        last = s.get("/v1/diagnostics/comms").await.1;
        if last["streams_open"] == 0 {
            ended = Some(opened.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    match ended {
        Some(t) if t <= within => {}
        _ => failures.push(format!(
            "the slow streams did not end within {within:?} of their opening ({ended:?})"
        )),
    }
    match hello {
        Some(t) if t <= SEC => {}
        _ => failures.push(format!("victim's hello after {hello:?}, not within 1 s")),
    }
    drop(readers);
    assert!(failures.is_empty(), "{failures:#?}");
}
