//! Slow readers: SSE streams from seq 0 of a session with a 3 MB
//! log, each read at 1 byte/s. Before the stream budget and the capped
//! `SO_SNDBUF`, every backlog sat in the server's heap or the kernel's
//! socket buffers (469 MB heap and 940 MB of TCP memory for 250 streams)
//! and nothing ever ended them. Measured here: the peaks of both, a
//! victim's `hello` from another address, and when the streams ended.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::net::TcpStream;

use super::gauges::{self, Peaks};
use super::net;
use super::Server;

/// Events of each large log, and the text of each: a 3 MB backlog.
const EVENTS: usize = 60;
const EVENT_TEXT: usize = 50_000;
/// How long the shape waits for the server to end the streams.
pub const END_WITHIN: Duration = Duration::from_secs(45);
/// The victim's address: another peer.
const VICTIM: &str = "127.0.0.9";

/// What one run of the shape measured.
pub struct SlowFigures {
    /// Streams the server had open 1 s after they were asked for.
    pub opened: u64,
    /// Peak `RssAnon` of the server, MB.
    pub rss_mb: f64,
    /// Peak kernel TCP memory, MB.
    pub tcp_mb: f64,
    /// Kernel TCP memory before the streams, MB.
    pub tcp_before_mb: f64,
    /// The victim's `hello`, ms: p50 of 5.
    pub hello_p50_ms: f64,
    /// The same, max of 5.
    pub hello_max_ms: f64,
    /// Seconds from the streams' opening until the server had none open
    /// (`None`: not within [`END_WITHIN`]).
    pub ended_s: Option<f64>,
}

/// Appends one event to a log through the admin API.
pub async fn append(http: &reqwest::Client, base: &str, scope: &str, id: &str, text: &str) {
    let event = json!({"scope": scope, "scope_id": id, "type": "team.message",
                       "data": {"from": "probe", "to": "all", "text": text}});
    let r = http
        .post(format!("{base}/v1/admin/events"))
        .json(&event)
        .send()
        .await
        .expect("append");
    assert!(r.status().is_success(), "append: {}", r.status());
}

/// A new session's id.
pub async fn new_session(http: &reqwest::Client, base: &str, title: &str) -> String {
    let v: Value = http
        .post(format!("{base}/v1/sessions"))
        .json(&json!({ "title": title }))
        .send()
        .await
        .expect("create a session")
        .json()
        .await
        .expect("the session");
    v["session_id"].as_str().expect("session_id").to_owned()
}

/// A new session with a 3 MB log.
async fn large_session(http: &reqwest::Client, base: &str) -> String {
    let sid = new_session(http, base, "large").await;
    let text = "x".repeat(EVENT_TEXT);
    for _ in 0..EVENTS {
        append(http, base, "session", &sid, &text).await;
    }
    sid
}

/// Reads one byte a second from each socket until aborted.
fn read_slowly(socks: Vec<TcpStream>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            for s in &socks {
                let _ = s.try_read(&mut [0u8; 1]);
            }
        }
    })
}

/// `per_address` streams from each of `addresses`, each address on a
/// session of its own (a log takes at most `--max-streams-per-scope`, 256,
/// streams), against a server with the default limits.
pub async fn run(addresses: &[&str], per_address: usize) -> SlowFigures {
    let server = Server::start(&["--faults"]);
    let (http, base) = (&server.http, server.base.as_str());
    let mut sessions = Vec::new();
    for _ in addresses {
        sessions.push(large_session(http, base).await);
    }
    append(http, base, "team", "victim", "hi").await;
    let tcp_before_mb = gauges::tcp_mem() as f64 / 1e6;
    let peaks = Peaks::start(server.pid());

    let mut socks = Vec::new();
    for (from, sid) in addresses.iter().zip(&sessions) {
        let path = format!("/v1/sessions/{sid}/events?after_seq=0");
        for _ in 0..per_address {
            let Ok(mut s) = net::connect_from(from, server.addr).await else {
                continue;
            };
            let head = net::get(server.addr, &path, true);
            if tokio::io::AsyncWriteExt::write_all(&mut s, &head)
                .await
                .is_ok()
            {
                socks.push(s);
            }
        }
    }
    let opened_at = Instant::now();
    let reading = read_slowly(socks);

    tokio::time::sleep(Duration::from_secs(1)).await;
    // Before the victims: their streams are not counted.
    let opened = gauges::comms(http, base).await["streams_open"]
        .as_u64()
        .unwrap_or(0);
    let path = "/v1/teams/victim/events?after_seq=0";
    let every = Duration::from_millis(500);
    let (hellos, _) = net::victims(VICTIM, server.addr, path, Some("event: hello"), 5, every).await;

    let mut ended_s = None;
    let mut last = Value::Null;
    while opened_at.elapsed() < END_WITHIN {
        last = gauges::comms(http, base).await;
        if last["streams_open"].as_u64() == Some(0) {
            ended_s = Some(opened_at.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // what the end leaves
    let (rss_mb, tcp_mb) = peaks.stop();
    reading.abort();
    eprintln!(
        "  at the end: streams_open {} stream_buffer_peak_bytes {} bytes_sent {}",
        last["streams_open"], last["stream_buffer_peak_bytes"], last["bytes_sent"]
    );
    let (hello_p50_ms, hello_max_ms) = net::p50_max(&hellos);
    SlowFigures {
        opened,
        rss_mb,
        tcp_mb,
        tcp_before_mb,
        hello_p50_ms,
        hello_max_ms,
        ended_s,
    }
}
