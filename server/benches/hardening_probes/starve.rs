//! One address's connections: one address took every connection slot and the
//! server answered no one else, without a `503`. Three shapes, each
//! against a fresh server with the default limits (1 024 connections, a
//! quarter per address): the attacker's connections, then a victim from
//! another address asking for `/v1/diagnostics` on fresh connections.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::net::{self, Tally};
use super::slow::append;
use super::Server;

/// Victim requests per shape, and the pause between them.
const TRIES: usize = 5;
const EVERY: Duration = Duration::from_millis(300);
/// Team logs the attackers' streams are spread over (32 of an address
/// each: far under the per-log cap, so only the connection caps decide).
const LOGS: usize = 16;

/// What one shape measured.
pub struct Starved {
    /// The victim's slowest answer, ms ([`net::VICTIM_WAIT`] if unanswered).
    pub victim_max_ms: f64,
    /// Victim requests answered `200`, of [`TRIES`].
    pub victim_ok: usize,
    /// What the attacker's requests got.
    pub attacker: Tally,
    /// Attacker connections still open at the end.
    pub held: usize,
}

/// Connections of `socks` the server has not closed (read what they have).
fn still_open(socks: &[TcpStream]) -> usize {
    let mut buf = [0u8; 16 << 10];
    socks
        .iter()
        .filter(|s| loop {
            match s.try_read(&mut buf) {
                Ok(0) => break false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(_) => break false,
            }
        })
        .count()
}

async fn victim(server: &Server, from: &str) -> (f64, usize) {
    let (times, ok) = net::victims(from, server.addr, "/v1/diagnostics", None, TRIES, EVERY).await;
    (net::p50_max(&times).1, ok)
}

async fn team_logs(server: &Server) {
    for i in 0..LOGS {
        append(&server.http, &server.base, "team", &format!("s{i}"), "hi").await;
    }
}

/// Opens `n` streams from `from` over the team logs, a log's at once.
async fn streams(server: &Server, from: &str, n: usize, tally: &mut Tally) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for i in 0..LOGS {
        let count = n / LOGS + usize::from(i < n % LOGS);
        let path = format!("/v1/teams/s{i}/events");
        let (t, h) = net::flood(from, server.addr, &path, true, count).await;
        tally.merge(&t);
        held.extend(h);
    }
    held
}

/// 512 streams and then 520 keep-alive connections (each has had one
/// answer and sits idle) from 127.0.0.2; the victim is 127.0.0.3.
pub async fn keep_alive() -> Starved {
    let server = Server::start(&["--faults"]);
    team_logs(&server).await;
    let mut attacker = Tally::default();
    let mut held = streams(&server, "127.0.0.2", 512, &mut attacker).await;
    let (t, idle) = net::flood("127.0.0.2", server.addr, "/v1/diagnostics", false, 520).await;
    attacker.merge(&t);
    held.extend(idle);
    let (victim_max_ms, victim_ok) = victim(&server, "127.0.0.3").await;
    Starved {
        victim_max_ms,
        victim_ok,
        attacker,
        held: still_open(&held),
    }
}

/// 1 024 streams from 127.0.0.2 and 127.0.0.3 (512 each), every one read
/// as fast as it comes; the victim is 127.0.0.4.
pub async fn reading() -> Starved {
    let server = Server::start(&["--faults"]);
    team_logs(&server).await;
    let mut attacker = Tally::default();
    let mut held = streams(&server, "127.0.0.2", 512, &mut attacker).await;
    held.extend(streams(&server, "127.0.0.3", 512, &mut attacker).await);
    let open = Arc::new(AtomicUsize::new(held.len()));
    let readers: Vec<_> = held
        .into_iter()
        .map(|mut s| {
            let open = Arc::clone(&open);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                open.fetch_sub(1, Ordering::Relaxed);
            })
        })
        .collect();
    // Traffic on every log while the victim asks.
    let feed = {
        let (http, base) = (server.http.clone(), server.base.clone());
        tokio::spawn(async move {
            for round in 0..1000 {
                append(&http, &base, "team", &format!("s{}", round % LOGS), "tick").await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let (victim_max_ms, victim_ok) = victim(&server, "127.0.0.4").await;
    feed.abort();
    let held = open.load(Ordering::Relaxed);
    for r in readers {
        r.abort();
    }
    Starved {
        victim_max_ms,
        victim_ok,
        attacker,
        held,
    }
}

/// One slow socket for `run_for`: it connects from `from`, sends a request
/// head a byte a second and, whenever the server closes it (for a newer
/// connection, the header timeout or a `503`), connects again.
async fn slow_socket(
    server_addr: std::net::SocketAddr,
    from: String,
    run_for: Duration,
    tally: Arc<SlowTally>,
) {
    let head = net::get(server_addr, "/v1/diagnostics", false);
    let start = Instant::now();
    while start.elapsed() < run_for {
        let Ok(mut s) = net::connect_from(&from, server_addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tally.connects.fetch_add(1, Ordering::Relaxed);
        let mut sent = 0;
        let mut buf = [0u8; 1024];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let closed = loop {
            if start.elapsed() >= run_for {
                break false;
            }
            tokio::select! {
                _ = tick.tick() => {
                    // Never the head's last byte: it stays unfinished.
                    if sent + 1 < head.len() && s.write_all(&head[sent..=sent]).await.is_err() {
                        break true;
                    }
                    sent += 1;
                }
                r = s.read(&mut buf) => {
                    if let Ok(n) = r {
                        if buf[..n].starts_with(b"HTTP/1.1 503") {
                            tally.refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if !matches!(r, Ok(n) if n > 0) {
                        break true;
                    }
                }
            }
        };
        if closed {
            tally.closed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[derive(Default)]
struct SlowTally {
    connects: AtomicUsize,
    closed: AtomicUsize,
    refused: AtomicUsize,
}

/// 1 200 slow sockets that reconnect when closed, 300 from each of
/// 127.0.0.2 to .5, for 12 s; the victim (127.0.0.6) asks from the 4th
/// second. The attacker's tally: `refused` the `503`s, `other` the
/// connections the server closed; `held` is the server's count of open
/// connections after the victim's tries.
pub async fn slow_sockets() -> Starved {
    let server = Server::start(&["--faults"]);
    let run_for = Duration::from_secs(12);
    let tally = Arc::new(SlowTally::default());
    let tasks: Vec<_> = (2..6)
        .flat_map(|a| std::iter::repeat_n(format!("127.0.0.{a}"), 300))
        .map(|from| tokio::spawn(slow_socket(server.addr, from, run_for, Arc::clone(&tally))))
        .collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (victim_max_ms, victim_ok) = victim(&server, "127.0.0.6").await;
    let diag = super::gauges::diagnostics(&server.http, &server.base).await;
    eprintln!(
        "  server: connections {} refused {} closed_idle {}",
        diag["connections"], diag["connections_refused"], diag["connections_closed_idle"]
    );
    // The diagnostics request is one of them.
    let held = diag["connections"]
        .as_u64()
        .map_or(0, |n| n.saturating_sub(1)) as usize;
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    eprintln!(
        "  attacker: {} connections made",
        tally.connects.load(Ordering::Relaxed)
    );
    let attacker = Tally {
        ok: 0,
        refused: tally.refused.load(Ordering::Relaxed),
        other: tally.closed.load(Ordering::Relaxed),
    };
    Starved {
        victim_max_ms,
        victim_ok,
        attacker,
        held,
    }
}
