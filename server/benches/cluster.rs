//! Cluster bench: durable events/s and append-to-delivery
//! latency (p50/p99) with 1 000 live streams (half scoped, half multiplexed,
//! spread over the nodes), for one SQLite node and for 1, 2 and 3 nodes on
//! one Postgres. Writers append through every node in turn; every reader on
//! every node must get every event. Real binaries, loopback only, bounded
//! (fixed event count, every wait has a deadline); every configuration runs
//! in 3 interleaved rounds and each figure is their median. The Postgres configs need
//! `REPLAY_BENCH_POSTGRES` (a URL whose user may CREATE DATABASE; `cargo
//! xtask bench` starts a throwaway one). With `REPLAY_BENCH_REDIS` too, the
//! transient part (`cluster_tail`): a long answer's deltas fanned
//! out over 2 and 3 nodes. Prints `cluster_* N` lines.
//!
//! Run: `REPLAY_BENCH_POSTGRES=postgres://… REPLAY_BENCH_REDIS=redis://…
//! cargo bench -p replay-server --bench cluster [-- durable|tail]` (one
//! argument: that part only). The durable part also prints the CPU time
//! of the nodes, of Postgres and of the bench per durable event (to tell
//! where the ceiling is). `REPLAY_BENCH_SERVER=path` runs another build of
//! the server (A/B runs in one period on a shared machine);
//! `REPLAY_BENCH_EVENTS=n` appends `n` events per configuration (a longer
//! run to profile), `REPLAY_BENCH_ROUNDS=n` runs `n` rounds.

mod cluster_tail;
mod spawn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_tail::cpu;
use futures_util::StreamExt;
use replay_core::sse::{SseItem, SseParser};
use serde_json::{json, Value};
use spawn::ServerProc;

const LOGS: usize = 10;
const STREAMS: usize = 1000;
const EVENTS: usize = 1000;

/// Durable events per configuration: [`EVENTS`], or `REPLAY_BENCH_EVENTS`
/// (a longer run to profile).
fn events() -> usize {
    std::env::var("REPLAY_BENCH_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(EVENTS)
}
/// Concurrent writers (the cluster's goals are stated for 16).
const WRITERS: usize = 16;
const DEADLINE: Duration = Duration::from_secs(120);

async fn fresh_pg(base: &str, name: &str) -> String {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("pg");
    tokio::spawn(conn);
    let db = format!("{name}_{}", std::process::id());
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    format!("{}/{db}", base.rsplit_once('/').unwrap().0)
}

async fn append(http: &reqwest::Client, base: &str, log: usize) -> u64 {
    let v: Value = http
        .post(format!("{base}/v1/admin/events"))
        .json(
            &json!({"scope": "team", "scope_id": format!("c{log}"), "type": "team.message",
                      "data": {"from": "bench", "to": "all", "text": "x".repeat(200)}}),
        )
        .send()
        .await
        .expect("append")
        .json()
        .await
        .expect("answer");
    v["seq"].as_u64().expect("seq")
}

type Arrivals = Arc<Mutex<Vec<(usize, u64, Instant)>>>;

/// An SSE stream on `url`, answered `200`.
async fn open_stream(http: &reqwest::Client, url: String) -> reqwest::Response {
    let resp = http
        .get(url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("stream");
    assert_eq!(resp.status(), 200, "stream refused");
    resp
}

/// What a reader takes of an envelope. Typed and borrowed: reading every
/// copy into a `serde_json::Value` made the bench's readers a third of the
/// machine's CPU per event, which the nodes then could not use.
#[derive(serde::Deserialize)]
struct Arrival<'a> {
    seq: u64,
    #[serde(borrow)]
    scope_id: &'a str,
}

/// A stream on `url` recording each durable team event's (log, seq, arrival).
async fn reader(http: &reqwest::Client, url: String, out: Arrivals) {
    let resp = open_stream(http, url).await;
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        while let Some(Ok(chunk)) = body.next().await {
            let now = Instant::now();
            let mut got = Vec::new();
            parser.push(&chunk, &mut |item| {
                if let SseItem::Event(ev) = item {
                    if ev.event_type == "team.message" {
                        let a: Arrival = serde_json::from_str(&ev.data).expect("an envelope");
                        let log = a.scope_id[1..].parse().expect("a bench log");
                        got.push((log, a.seq, now));
                    }
                }
            });
            out.lock().unwrap().extend(got);
        }
    });
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[(((sorted.len() as f64) - 1.0) * p).round() as usize]
}

/// The pid of the postmaster serving `db` (its CPU is measured).
async fn postmaster(db: &str) -> u32 {
    let (client, conn) = tokio_postgres::connect(db, tokio_postgres::NoTls)
        .await
        .expect("pg");
    tokio::spawn(conn);
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// Worker threads of each of `nodes` nodes on this machine: its cores
/// shared out, as an operator sizes nodes that share a host (and as a node
/// in a container with a CPU quota sizes itself). Each node at one per
/// core put 4 to 6 runtime threads on 2 cores.
fn node_threads(nodes: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / nodes).max(1)
}

/// What one configuration measured.
struct Figures {
    per_s: f64,
    p50: f64,
    p99: f64,
    /// CPU seconds from the first append until every reader had every
    /// event: the nodes, Postgres (0 on SQLite), the bench (its readers).
    cpu_nodes: f64,
    cpu_pg: f64,
    cpu_bench: f64,
    /// Events per append transaction, over every node (0 on SQLite).
    events_per_commit: f64,
    /// Write system calls of the nodes (frames, answers, Postgres).
    node_writes: u64,
}

/// One configuration: nodes on `db`.
async fn measure(db: &str, nodes: usize) -> Figures {
    let pg_pid = if db.starts_with("postgres") {
        Some(postmaster(db).await)
    } else {
        None
    };
    let threads = node_threads(nodes).to_string();
    let nodes: Vec<ServerProc> = (0..nodes)
        .map(|_| spawn::start_with(db, 1100, &["--threads", &threads]))
        .collect();
    let pids: Vec<String> = nodes.iter().map(|n| n.id().to_string()).collect();
    let cpu = move || {
        let nodes: f64 = pids.iter().map(|p| cpu::proc_cpu_s(p)).sum();
        let pg = pg_pid.map_or(0.0, cpu::pg_cpu_s);
        let writes: u64 = pids.iter().map(|p| cpu::proc_writes(p)).sum();
        (nodes, pg, cpu::proc_cpu_s("self"), writes)
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(16)
        .build()
        .unwrap();
    for log in 0..LOGS {
        append(&http, &nodes[0].base, log).await; // streams of unknown logs are 404
    }
    let arrivals: Arrivals = Arc::default();
    for i in 0..STREAMS {
        let (log, base) = (i % LOGS, &nodes[i % nodes.len()].base);
        let url = if i % 2 == 0 {
            format!("{base}/v1/teams/c{log}/events")
        } else {
            format!("{base}/v1/stream?sub=team:c{log}:1")
        };
        reader(&http, url, Arc::clone(&arrivals)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // every hello out
    let sent: Arc<Mutex<HashMap<(usize, u64), Instant>>> = Arc::default();
    let cpu0 = cpu();
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (http, sent) = (http.clone(), Arc::clone(&sent));
            let bases: Vec<String> = nodes.iter().map(|n| n.base.clone()).collect();
            tokio::spawn(async move {
                for k in (w..events()).step_by(WRITERS) {
                    let log = k % LOGS;
                    let at = Instant::now();
                    let seq = append(&http, &bases[k % bases.len()], log).await;
                    sent.lock().unwrap().insert((log, seq), at);
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let per_s = events() as f64 / started.elapsed().as_secs_f64();
    let expect = events() * STREAMS / LOGS;
    let deadline = Instant::now() + DEADLINE;
    while arrivals.lock().unwrap().len() < expect && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu1 = cpu();
    let (mut commits, mut committed) = (0, 0);
    for node in &nodes {
        let diag = node.diagnostics(&http).await;
        let appends = &diag["store"]["appends"];
        commits += appends["transactions"].as_u64().unwrap_or(0);
        committed += appends["events"].as_u64().unwrap_or(0);
    }
    let sent = sent.lock().unwrap();
    let mut lat: Vec<f64> = arrivals
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(log, seq, at)| {
            sent.get(&(*log, *seq))
                .map(|t0| at.duration_since(*t0).as_secs_f64() * 1e3)
        })
        .collect();
    assert_eq!(lat.len(), expect, "every reader got every event");
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Figures {
        per_s,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        cpu_nodes: cpu1.0 - cpu0.0,
        cpu_pg: cpu1.1 - cpu0.1,
        cpu_bench: cpu1.2 - cpu0.2,
        events_per_commit: committed as f64 / commits.max(1) as f64,
        node_writes: cpu1.3 - cpu0.3,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let part = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let (durable, tail) = match part.as_deref() {
        None => (true, true),
        Some("durable") => (true, false),
        Some("tail") => (false, true),
        Some(other) => panic!("cluster bench: unknown part {other} (durable, tail)"),
    };
    let pg = std::env::var("REPLAY_BENCH_POSTGRES").ok();
    if pg.is_none() {
        eprintln!("cluster bench: REPLAY_BENCH_POSTGRES unset, SQLite only");
    }
    if durable {
        durable_part(pg.as_deref()).await;
    }
    match (tail, &pg, std::env::var("REPLAY_BENCH_REDIS")) {
        (false, _, _) => {}
        (true, Some(base), Ok(redis)) => tail_part(base, &redis).await,
        (true, _, _) => eprintln!(
            "cluster bench: the tail part needs REPLAY_BENCH_POSTGRES and REPLAY_BENCH_REDIS"
        ),
    }
}

/// Rounds of every configuration, interleaved (1, 2, 3 nodes, then again):
/// each figure is the median over them, each ratio the median of its
/// rounds' ratios. [`ROUNDS`], or `REPLAY_BENCH_ROUNDS`.
fn rounds() -> usize {
    std::env::var("REPLAY_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(ROUNDS)
        .max(1)
}

/// One run of the configurations on this shared 2-core machine moved the
/// node ratios by ±20 %: the goal's verdict takes more than one.
const ROUNDS: usize = 3;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn durable_part(pg: Option<&str>) {
    let dir = std::env::temp_dir().join(format!("replay-cluster-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut names = vec!["sqlite_1".to_owned()];
    if pg.is_some() {
        names.extend((1..=3).map(|n| format!("pg_{n}")));
    }
    let mut results: HashMap<String, Vec<Figures>> = HashMap::new();
    for round in 0..rounds() {
        for name in &names {
            let (db, nodes) = match (name.strip_prefix("pg_"), pg) {
                (Some(n), Some(base)) => (
                    fresh_pg(base, &format!("bench{n}_{round}")).await,
                    n.parse().unwrap(),
                ),
                _ => (
                    dir.join(format!("b{round}.sqlite")).display().to_string(),
                    1,
                ),
            };
            let f = measure(&db, nodes).await;
            eprintln!(
                "cluster bench, round {round}: {name} {:.0} events/s",
                f.per_s
            );
            results.entry(name.clone()).or_default().push(f);
        }
    }
    for name in &names {
        let runs = &results[name];
        let med = |f: &dyn Fn(&Figures) -> f64| median(runs.iter().map(f).collect());
        // Where the 2 cores went, per durable event (every reader's copy
        // included): the ceiling is the sum over the machine's cores.
        let per_event = |s: f64| s / events() as f64 * 1e6;
        // Frames per write: each event has STREAMS / LOGS copies.
        let copies = (events() * STREAMS / LOGS) as f64;
        println!("cluster_{name}_events_per_s {:.0}", med(&|f| f.per_s));
        println!("cluster_{name}_p50_ms {:.3}", med(&|f| f.p50));
        println!("cluster_{name}_p99_ms {:.3}", med(&|f| f.p99));
        println!(
            "cluster_{name}_cpu_nodes_us_per_event {:.0}",
            med(&|f| per_event(f.cpu_nodes))
        );
        println!(
            "cluster_{name}_cpu_pg_us_per_event {:.0}",
            med(&|f| per_event(f.cpu_pg))
        );
        println!(
            "cluster_{name}_cpu_bench_us_per_event {:.0}",
            med(&|f| per_event(f.cpu_bench))
        );
        println!(
            "cluster_{name}_events_per_commit {:.2}",
            med(&|f| f.events_per_commit)
        );
        println!(
            "cluster_{name}_copies_per_node_write {:.2}",
            med(&|f| copies / f.node_writes.max(1) as f64)
        );
    }
    // The cluster's goals: one Postgres node within 2x of SQLite, and adding
    // a node never lowering throughput (each round's ratio, then the median).
    for (ratio, over, under) in [
        ("pg_1_over_sqlite", "pg_1", "sqlite_1"),
        ("pg_2_over_1", "pg_2", "pg_1"),
        ("pg_3_over_2", "pg_3", "pg_2"),
    ] {
        if let (Some(a), Some(b)) = (results.get(over), results.get(under)) {
            let each: Vec<f64> = a.iter().zip(b).map(|(a, b)| a.per_s / b.per_s).collect();
            eprintln!("cluster bench: {ratio} by round {each:.3?}");
            println!("cluster_{ratio} {:.3}", median(each));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

async fn tail_part(pg: &str, redis: &str) {
    use cluster_tail::Pace;
    for n in 2..=3 {
        for (pace, part) in [(Pace::Paced, ""), (Pace::Burst, "_burst")] {
            let db = fresh_pg(pg, &format!("bench_tail{n}{part}")).await;
            let f = cluster_tail::measure(&db, redis, n, pace).await;
            let name = format!("cluster_tail_pg_{n}{part}");
            let slowest = f.per_node.iter().copied().fold(f64::INFINITY, f64::min);
            println!("{name}_deltas_per_s {slowest:.0}");
            for (k, per_s) in f.per_node.iter().enumerate() {
                println!("{name}_node{k}_deltas_per_s {per_s:.0}");
            }
            println!("{name}_answer_deltas {}", f.deltas);
            println!("{name}_p50_ms {:.3}", f.p50_ms);
            println!("{name}_p99_ms {:.3}", f.p99_ms);
            let c = &f.cpu;
            println!("{name}_wall_s {:.3}", c.wall_s);
            println!("{name}_cpu_nodes_s {:.3}", c.nodes_s);
            println!("{name}_cpu_redis_s {:.3}", c.redis_s);
            println!("{name}_cpu_bench_s {:.3}", c.bench_s);
            // The nodes' CPU per frame they wrote: the tail's ceiling on a
            // machine is its cores over this.
            let frames = (f.deltas * cluster_tail::STREAMS_PER_NODE * n) as f64;
            println!("{name}_node_us_per_delta {:.3}", c.nodes_s / frames * 1e6);
        }
    }
}
