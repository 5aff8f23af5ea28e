//! The cluster bench's transient part: the live tail's fan-out.
//! One long answer runs on node A; every node holds [`STREAMS_PER_NODE`]
//! streams of its session (half scoped, half multiplexed); the nodes share
//! one Postgres and the throwaway Redis. Measured: `turn.delta`s
//! delivered per second on each node (each delta counted once per stream),
//! and a delta's delay from node A to a stream on another node, for two
//! answers: one paced (`--delta-ms 1`, the agent's shortest pause, a few
//! hundred deltas a second: a turn's pace) and one `/burst` (no pause:
//! deltas as fast as node A makes them, so what every node delivers is the
//! path's ceiling on this machine).
//!
//! The clock is the bench's own (one process, monotonic): a delta's delay
//! is its arrival on a stream of another node minus its first arrival on
//! any stream of A, the node whose fan-out it is published to first. The
//! server's `ts` is a wall clock of another process, in milliseconds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use replay_core::sse::{SseItem, SseParser};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::spawn::{self, ServerProc};

pub mod cpu;
pub use cpu::Cpu;

/// Streams per node (the goal is stated for 50 per node).
pub const STREAMS_PER_NODE: usize = 50;
/// The answer's length in scalars: `/long` splits it into deltas of 1 to 6
/// scalars (~5 700 deltas).
const ANSWER: usize = 20_000;
/// `--delta-ms`: the scripted agent's pause between deltas of the paced
/// answer.
const DELTA_MS: &str = "1";
const DEADLINE: Duration = Duration::from_secs(120);

/// How the answer's deltas are made.
#[derive(Clone, Copy)]
pub enum Pace {
    /// One every `--delta-ms`.
    Paced,
    /// Back to back (`/burst`).
    Burst,
}

/// What one configuration measured.
pub struct Fanout {
    /// Per node (A first): deltas delivered per second on all its streams,
    /// from the first delta's arrival on A to the last on that node.
    pub per_node: Vec<f64>,
    /// The answer's deltas.
    pub deltas: usize,
    /// A to another node's stream, p50, ms.
    pub p50_ms: f64,
    /// The same, p99.
    pub p99_ms: f64,
    /// CPU time while the answer streamed.
    pub cpu: Cpu,
}

/// One stream's `turn.delta` arrivals: (offset, arrival).
type Arrivals = Arc<Mutex<Vec<(u64, Instant)>>>;

/// What a reader needs of a `turn.delta` envelope (typed: a `Value` per
/// delta would cost the bench process as much CPU as the nodes spend).
#[derive(Deserialize)]
struct Delta {
    data: DeltaData,
}

#[derive(Deserialize)]
struct DeltaData {
    offset: u64,
}

/// One stream recording every delta; its task ends with the stream, or at
/// the turn's end.
async fn reader(http: &reqwest::Client, url: String) -> (Arrivals, tokio::task::JoinHandle<()>) {
    let resp = crate::open_stream(http, url).await;
    let out: Arrivals = Arc::default();
    let got = Arc::clone(&out);
    let task = tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut ended = false;
        while let Some(Ok(chunk)) = body.next().await {
            let now = Instant::now();
            let mut batch = Vec::new();
            parser.push(&chunk, &mut |item| {
                if let SseItem::Event(ev) = item {
                    match ev.event_type.as_str() {
                        "turn.delta" => {
                            let d: Delta = serde_json::from_str(&ev.data).expect("a delta");
                            batch.push((d.data.offset, now));
                        }
                        "turn.completed" => ended = true,
                        _ => {}
                    }
                }
            });
            got.lock().unwrap().extend(batch);
            if ended {
                return;
            }
        }
        panic!("a stream ended before the turn did");
    });
    (out, task)
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Value {
    http.post(url)
        .json(&body)
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("answer")
}

/// Waits until every node's tail says it is connected to Redis.
async fn tails_connected(http: &reqwest::Client, nodes: &[ServerProc]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in nodes {
        loop {
            let diag = node.diagnostics(http).await;
            if diag["tail"]["connected"] == true {
                break;
            }
            assert!(Instant::now() < deadline, "tail not connected: {diag}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `nodes` nodes on `db` sharing the tail on `redis`.
pub async fn measure(db: &str, redis: &str, nodes: usize, pace: Pace) -> Fanout {
    let flags = [
        ["--redis", redis, "--delta-ms", DELTA_MS],
        // A burst outruns readers that share 2 cores with the nodes: with
        // the default 1 024 frames a lagging stream is cut (the client
        // would reconnect), and the bench measures delivery, not that.
        [
            "--subscriber-buffer",
            "100000",
            "--subscriber-buffer-bytes",
            "100000000",
        ],
    ]
    .concat();
    let nodes: Vec<ServerProc> = (0..nodes)
        .map(|_| spawn::start_with(db, 1100, &flags))
        .collect();
    let http = reqwest::Client::new();
    tails_connected(&http, &nodes).await;
    let a = &nodes[0].base;
    let session = post(&http, format!("{a}/v1/sessions"), json!({"title": "bench"})).await;
    let sid = session["session_id"].as_str().expect("session_id");
    // Per node: its streams' arrivals.
    let mut streams: Vec<Vec<Arrivals>> = Vec::new();
    let mut tasks = Vec::new();
    for node in &nodes {
        let mut on_node = Vec::new();
        for i in 0..STREAMS_PER_NODE {
            let url = if i % 2 == 0 {
                format!("{}/v1/sessions/{sid}/events?after_seq=0", node.base)
            } else {
                format!("{}/v1/stream?sub=session:{sid}:0", node.base)
            };
            let (arrivals, task) = reader(&http, url).await;
            on_node.push(arrivals);
            tasks.push(task);
        }
        streams.push(on_node);
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // every hello out
    let text = match pace {
        Pace::Paced => format!("/long {ANSWER}"),
        Pace::Burst => format!("/long {ANSWER} /burst"),
    };
    let url = format!("{a}/v1/sessions/{sid}/messages");
    let meter =
        cpu::Meter::start(&nodes.iter().map(ServerProc::id).collect::<Vec<_>>(), redis).await;
    let accepted = post(&http, url, json!({"message_id": "m1", "text": text})).await;
    assert!(accepted["turn_id"].is_string(), "{accepted}");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    for task in tasks {
        tokio::time::timeout_at(deadline, task)
            .await
            .expect("the turn ends in time")
            .expect("every stream to the turn's end");
    }
    let cpu = meter.stop().await;
    // Another node's deltas travel apart from the log: one made just
    // before the end may arrive just after it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    summarise(&streams, cpu)
}

fn summarise(streams: &[Vec<Arrivals>], cpu: Cpu) -> Fanout {
    let on_a: Vec<Vec<(u64, Instant)>> = streams[0]
        .iter()
        .map(|s| s.lock().unwrap().clone())
        .collect();
    let deltas = on_a[0].len();
    let mut first: HashMap<u64, Instant> = HashMap::new();
    for (offset, at) in on_a.iter().flatten() {
        first
            .entry(*offset)
            .and_modify(|t| *t = (*t).min(*at))
            .or_insert(*at);
    }
    let start = *first.values().min().expect("deltas");
    let mut delays = Vec::new();
    let mut per_node = Vec::new();
    for (n, node) in streams.iter().enumerate() {
        let mut received = 0;
        let mut last = start;
        for stream in node {
            let got = stream.lock().unwrap();
            assert_eq!(
                got.len(),
                deltas,
                "every stream on node {n} got every delta"
            );
            received += got.len();
            for (offset, at) in got.iter() {
                last = last.max(*at);
                if n > 0 {
                    delays.push(at.duration_since(first[offset]).as_secs_f64() * 1e3);
                }
            }
        }
        per_node.push(received as f64 / (last - start).as_secs_f64());
    }
    delays.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Fanout {
        per_node,
        deltas,
        p50_ms: crate::percentile(&delays, 0.5),
        p99_ms: crate::percentile(&delays, 0.99),
        cpu,
    }
}
