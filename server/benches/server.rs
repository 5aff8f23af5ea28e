//! Server figures (not a timed test): durable appends/s, SSE fan-out
//! events/s to 100 subscribers, p50/p99 append-to-delivery latency, all on
//! loopback; once with the default `synchronous = full` (a disk sync per
//! commit) and once with `normal` (`*_normal`), which shows what FULL costs.
//! Prints `server_* N` lines for `cargo xtask bench`.
//!
//! Run: `cargo bench -p replay-server --bench server`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use replay_core::protocol::{Event, Scope, TeamMessage};
use replay_core::sse::{SseItem, SseParser};
use replay_server::store::Synchronous;
use replay_server::{Config, LagPolicy};

/// Appends measured under `normal`; under `full` each waits for the disk, so
/// fewer give the same precision in a bounded time.
const APPENDS: u64 = 20_000;
const APPENDS_FULL: u64 = 1_000;
const SUBSCRIBERS: usize = 100;
const FANOUT_EVENTS: u64 = 2_000;
const LATENCY_SAMPLES: u64 = 500;

fn event(i: u64) -> Event {
    Event::TeamMessage(TeamMessage {
        from: "bench".into(),
        to: "all".into(),
        text: format!("message {i} with some text, é and 🙂"),
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Subscribes `n` SSE clients to a team log; each reports (seq, arrival) pairs.
async fn subscribe(
    base: &str,
    team: &str,
    n: usize,
    expect: u64,
    arrivals: Arc<Mutex<Vec<(u64, Instant)>>>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(n);
    for _ in 0..n {
        let resp = http
            .get(format!("{base}/v1/teams/{team}/events"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("subscribe");
        let arrivals = Arc::clone(&arrivals);
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let mut parser = SseParser::new();
            let mut last = 0u64;
            let mut local = Vec::new();
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
                            last = ev.last_event_id.parse().unwrap_or(0);
                            local.push((last, now));
                        }
                    }
                });
                if last >= expect {
                    break;
                }
            }
            arrivals.lock().unwrap().extend(local);
            last
        }));
    }
    for _ in 0..n {
        ready_rx.recv().await;
    }
    tasks
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    measure(Synchronous::Full, APPENDS_FULL, "").await;
    measure(Synchronous::Normal, APPENDS, "_normal").await;
}

async fn measure(synchronous: Synchronous, appends: u64, suffix: &str) {
    let dir = std::env::temp_dir().join(format!(
        "replay-bench-{}-{}",
        std::process::id(),
        synchronous.as_str()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("bench.sqlite").to_str().unwrap().to_owned();
    let running = replay_server::start(Config {
        listen: "127.0.0.1:0".into(),
        db,
        synchronous,
        subscriber_buffer: 8192,
        lag_policy: LagPolicy::Disconnect,
        ..Config::default()
    })
    .await
    .expect("server");
    let app = Arc::clone(running.app());
    let base = running.base_url();

    // 1. Durable appends: commit (WAL, file database) + publish, one at a time.
    let t0 = Instant::now();
    for i in 0..appends {
        app.log.append(Scope::Team, "appends", event(i)).unwrap();
    }
    let appends_per_s = appends as f64 / t0.elapsed().as_secs_f64();

    // 2. Fan-out: 100 live subscribers, a writer appending as fast as it can.
    // Streams of unknown logs are 404: each log gets its seq 1 first.
    app.log.append(Scope::Team, "fanout", event(0)).unwrap();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let subs = subscribe(
        &base,
        "fanout",
        SUBSCRIBERS,
        FANOUT_EVENTS + 1,
        Arc::clone(&arrivals),
    )
    .await;
    let t0 = Instant::now();
    let writer = {
        let app = Arc::clone(&app);
        tokio::task::spawn_blocking(move || {
            for i in 0..FANOUT_EVENTS {
                app.log.append(Scope::Team, "fanout", event(i)).unwrap();
            }
        })
    };
    writer.await.unwrap();
    let mut delivered = 0;
    for s in subs {
        delivered += s.await.unwrap().saturating_sub(1).min(FANOUT_EVENTS);
    }
    let fanout_per_s = delivered as f64 / t0.elapsed().as_secs_f64();

    // 3. Latency: paced appends, arrival time at each of the 100 subscribers.
    app.log.append(Scope::Team, "latency", event(0)).unwrap();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let subs = subscribe(
        &base,
        "latency",
        SUBSCRIBERS,
        LATENCY_SAMPLES + 1,
        Arc::clone(&arrivals),
    )
    .await;
    let mut sent = vec![Instant::now(); LATENCY_SAMPLES as usize + 2];
    for i in 2..=LATENCY_SAMPLES + 1 {
        sent[i as usize] = Instant::now();
        let env = app.log.append(Scope::Team, "latency", event(i)).unwrap();
        assert_eq!(env.seq, Some(i));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for s in subs {
        s.await.unwrap();
    }
    let mut lat: Vec<f64> = arrivals
        .lock()
        .unwrap()
        .iter()
        .map(|(seq, at)| at.duration_since(sent[*seq as usize]).as_secs_f64() * 1000.0)
        .collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());

    println!("server_appends{suffix}_per_s {appends_per_s:.0}");
    println!("server_fanout{suffix}_events_per_s {fanout_per_s:.0}");
    println!(
        "server_latency{suffix}_p50_ms {:.3}",
        percentile(&lat, 0.50)
    );
    println!(
        "server_latency{suffix}_p99_ms {:.3}",
        percentile(&lat, 0.99)
    );
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
