//! Load test of the memory bound (ignored by a plain `cargo test`: about a
//! minute; `cargo xtask test` runs it in its native layer): four hostile
//! loads (items 1 to 4 below) at full scale, on loopback, against the real
//! binary, reading its resident memory from `/proc`. Bounded: fixed counts,
//! every wait has a deadline.
//!
//! Run: `cargo test -p replay-server --test load_bounds -- --ignored --nocapture`
//! (`REPLAY_SERVER_BIN=path` measures another build of the binary, e.g. an
//! older one; it only uses flags every version has).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Anonymous resident memory (its heap, not the database's mapped pages)
/// the server must stay under through the whole run (docs/limits.md, Memory).
const ANON_BOUND_MB: f64 = 200.0;
const BIG: usize = 60_000;

mod common;

use common::bin::{start_bin, Bin, Db};

/// The binary on a database file, with a shorter header timeout than the
/// default so the run is short and room for the 1 000 partial heads of
/// item 1 from one address (an older binary ignores both).
fn start() -> Bin {
    start_bin(
        &["--faults", "--synchronous", "normal"],
        Db::File("load-bounds"),
        &[
            ("REPLAY_HEADER_TIMEOUT_MS", "2000"),
            ("REPLAY_MAX_CONNECTIONS_PER_ADDRESS", "1024"),
        ],
    )
}

/// The load's own requests on the started binary.
trait Load {
    fn base(&self) -> String;
    fn report(&self, what: &str, peak: &Peak);
    async fn small_socket(&self) -> TcpStream;
    async fn get_raw(&self, path: &str, sse: bool) -> TcpStream;
}

impl Load for Bin {
    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn report(&self, what: &str, peak: &Peak) {
        let now = memory(self.child.id());
        let (anon, rss) = peak.get();
        println!(
            "load_bounds {what}: anon {:.0} MB (peak {anon:.0}), rss {:.0} MB (peak {rss:.0})",
            now.0, now.1
        );
    }

    /// A socket with a small receive buffer: what the server writes to it
    /// backs up after a few KB unless the test reads.
    async fn small_socket(&self) -> TcpStream {
        let sock = TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(self.addr).await.unwrap()
    }

    async fn get_raw(&self, path: &str, sse: bool) -> TcpStream {
        let mut s = self.small_socket().await;
        let accept = if sse {
            "Accept: text/event-stream\r\n"
        } else {
            ""
        };
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{accept}\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        s
    }
}

/// `RssAnon` (the heap: what the server holds) and `VmRSS` (with the
/// database's memory-mapped pages, which are page cache), in MB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("RssAnon:"), field("VmRSS:"))
}

/// The highest `memory` seen, sampled every 50 ms while it lives.
#[derive(Clone, Default)]
struct Peak(std::sync::Arc<std::sync::Mutex<(f64, f64)>>);

impl Peak {
    fn sample(pid: u32) -> Peak {
        let peak = Peak::default();
        let p = peak.clone();
        std::thread::spawn(move || {
            // Ends with the test process; bounded by it.
            while std::sync::Arc::strong_count(&p.0) > 1 {
                let (anon, rss) = memory(pid);
                let mut m = p.0.lock().unwrap();
                m.0 = m.0.max(anon);
                m.1 = m.1.max(rss);
                drop(m);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        peak
    }

    fn get(&self) -> (f64, f64) {
        *self.0.lock().unwrap()
    }
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = http.post(url).json(&body).send().await.expect("POST");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Appends `n` events of `BIG` bytes to a log, four at a time.
async fn fill(http: &reqwest::Client, base: &str, scope: &str, id: &str, n: usize) {
    let text = "x".repeat(BIG);
    let body = json!({"scope": scope, "scope_id": id, "type": "team.message",
                      "data": {"from": "a", "to": "b", "text": text}});
    let url = format!("{base}/v1/admin/events");
    let chunks: Vec<_> = (0..4)
        .map(|_| {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                for _ in 0..n / 4 {
                    let (st, v) = post(&http, url.clone(), body.clone()).await;
                    assert_eq!(st, 201, "{v}");
                }
            })
        })
        .collect();
    for c in chunks {
        c.await.unwrap();
    }
}

/// Item 1: 1 000 sockets holding 300 KB partial request heads.
async fn partial_heads(s: &Bin, peak: &Peak) {
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let addr = s.addr;
        tasks.push(tokio::spawn(async move {
            let mut sock = TcpStream::connect(addr).await.ok()?;
            let head = b"GET /v1/diagnostics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ";
            sock.write_all(head).await.ok()?;
            let pad = vec![b'a'; 300_000];
            // The server may stop reading (or close): bounded either way.
            let _ = tokio::time::timeout(Duration::from_secs(5), sock.write_all(&pad)).await;
            Some(sock)
        }));
    }
    let mut socks = Vec::new();
    for t in tasks {
        socks.extend(t.await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.report("item 1: 1000 x 300 KB partial heads", peak);
    // Still open 4 s later (header timeout 2 s in this run)?
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut open = 0;
    for sock in &mut socks {
        let mut buf = [0u8; 1024];
        let closed = loop {
            match tokio::time::timeout(Duration::from_millis(2), sock.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        if !closed {
            open += 1;
        }
    }
    println!(
        "load_bounds item 1: {open} of {} still open after 4 s",
        socks.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load test, about a minute: run by hand (see the module doc)"]
async fn rss_stays_bounded_under_hostile_load() {
    let s = start();
    let http = reqwest::Client::new();
    let base = s.base();
    let t0 = Instant::now();
    let peak = Peak::sample(s.child.id());
    s.report("start", &peak);
    partial_heads(&s, &peak).await;

    // Item 2: a session of 1 500 events of 60 KB.
    let (_, v) = post(
        &http,
        format!("{base}/v1/sessions"),
        json!({"title": "load"}),
    )
    .await;
    let sid = v["session_id"].as_str().unwrap().to_owned();
    fill(&http, &base, "session", &sid, 1500).await;
    s.report("item 2: session filled (1500 x 60 KB)", &peak);
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(
            s.get_raw(&format!("/v1/sessions/{sid}/transcript"), false)
                .await,
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.report("item 2: 16 non-reading transcripts", &peak);
    held.clear();
    for _ in 0..16 {
        held.push(
            s.get_raw(&format!("/v1/sessions/{sid}/replay?limit=5000"), false)
                .await,
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.report("item 2: 16 non-reading replay?limit=5000", &peak);
    held.clear();
    // 32 streams from 0, each read at 2 KiB/s for 8 s.
    let mut readers = Vec::new();
    for _ in 0..32 {
        let mut sock = s
            .get_raw(&format!("/v1/sessions/{sid}/events?after_seq=0"), true)
            .await;
        readers.push(tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let mut got = 0;
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match tokio::time::timeout(Duration::from_millis(100), sock.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => got += n,
                    Ok(_) => break,
                    Err(_) => {}
                }
            }
            got
        }));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.report("item 2: 32 streams from 0 read at 2 KiB/s (4 s)", &peak);
    for r in readers {
        r.await.unwrap();
    }
    s.report("item 2: 32 slow streams (8 s)", &peak);

    // Item 3: 32 multiplexed streams of 64 subs from one address, once
    // the slow streams above have been let go of.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let v: Value = http
            .get(format!("{base}/v1/diagnostics"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["streams"] == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..64 {
        let body = json!({"scope": "team", "scope_id": format!("t{i}"), "type": "team.message",
                          "data": {"from": "a", "to": "b", "text": "x"}});
        post(&http, format!("{base}/v1/admin/events"), body).await;
    }
    let subs: Vec<String> = (0..64).map(|i| format!("sub=team:t{i}:0")).collect();
    let url = format!("{base}/v1/stream?{}", subs.join("&"));
    let mut streams = Vec::new();
    let mut ok = 0;
    for _ in 0..32 {
        let r = http
            .get(&url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        ok += usize::from(r.status() == 200);
        streams.push(r);
    }
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let r = other
        .get(format!("{base}/v1/teams/t0/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    println!(
        "load_bounds item 3: {ok} of 32 multiplexed streams open; another client's stream: {}",
        r.status()
    );
    let other_ok = r.status() == 200;
    drop((r, streams));
    s.report("item 3: 32 x 64 subs", &peak);

    // Item 4: 1 500 messages of 60 KB behind one `/ask`.
    let (_, v) = post(&http, format!("{base}/v1/sessions"), json!({"title": "q"})).await;
    let q = v["session_id"].as_str().unwrap().to_owned();
    let url = format!("{base}/v1/sessions/{q}/messages");
    post(
        &http,
        url.clone(),
        json!({"message_id": "ask", "text": "/ask"}),
    )
    .await;
    let text = "y".repeat(BIG);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..1500 {
        let (st, _) = post(
            &http,
            url.clone(),
            json!({"message_id": format!("m{i}"), "text": text}),
        )
        .await;
        *statuses.entry(st).or_default() += 1;
    }
    println!("load_bounds item 4: statuses {statuses:?}");
    s.report("item 4: 1500 queued posts of 60 KB", &peak);
    let (anon, rss) = peak.get();
    println!(
        "load_bounds peak: anon {anon:.0} MB (bound {ANON_BOUND_MB} MB), rss {rss:.0} MB, {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(other_ok, "another client was locked out");
    assert!(anon < ANON_BOUND_MB, "peak anonymous RSS {anon:.0} MB");
}
