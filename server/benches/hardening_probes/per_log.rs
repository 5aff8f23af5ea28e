//! Streams aimed at one log: the stream slots of one session. 256 streams
//! from one address took the victim's session's whole per-log cap (the
//! victim got `503`); 5 addresses with 8 multiplexed streams of 64 subs
//! each filled all 2 048 of the process's stream slots.

use std::time::Duration;

use tokio::net::TcpStream;

use super::gauges;
use super::net::{self, Answer, Tally};
use super::slow::{append, new_session};
use super::Server;

/// Victim streams per shape, and the pause between them.
const TRIES: usize = 5;
const EVERY: Duration = Duration::from_millis(300);

/// What one shape measured.
pub struct Aimed {
    /// The victim's slowest `hello` (or refusal), ms.
    pub victim_max_ms: f64,
    /// Victim streams that got their `hello`, of [`TRIES`].
    pub victim_ok: usize,
    /// What the attacker's streams got.
    pub attacker: Tally,
    /// Attacker subscriptions still open at the end.
    pub held_subs: usize,
}

/// Victim streams on `path` from `from`, kept open as a client keeps them
/// (each must find room of its own); their times and how many were served.
async fn victims(server: &Server, from: &str, path: &str) -> (f64, usize, Vec<TcpStream>) {
    let (mut times, mut ok, mut kept) = (Vec::new(), 0, Vec::new());
    for i in 0..TRIES {
        if i > 0 {
            tokio::time::sleep(EVERY).await;
        }
        let hello = Some("event: hello");
        let (answer, took, sock) =
            net::request(from, server.addr, path, hello, net::VICTIM_WAIT).await;
        eprintln!("  victim {from} {path}: {answer:?} after {took:?}");
        times.push(took.as_secs_f64() * 1000.0);
        if answer == Answer::Status(200) {
            ok += 1;
            kept.extend(sock);
        }
    }
    (net::p50_max(&times).1, ok, kept)
}

/// 300 streams from 127.0.0.2 on one session (its cap is 256), then 5
/// streams from 127.0.0.3 on it.
pub async fn one_session() -> Aimed {
    let server = Server::start(&[]);
    let session = new_session(&server.http, &server.base, "victim").await;
    let path = format!("/v1/sessions/{session}/events");
    // One after the other: at once, some of its own connections would be
    // closed for its newer ones before their heads arrived (idle), and the
    // tally would vary from run to run.
    let mut attacker = Tally::default();
    let mut held = Vec::new();
    for _ in 0..300 {
        let wait = Duration::from_secs(3);
        let (answer, _, sock) =
            net::request("127.0.0.2", server.addr, &path, Some("\r\n\r\n"), wait).await;
        attacker.add(answer);
        held.extend(sock.filter(|_| answer == Answer::Status(200)));
    }
    let diag = gauges::diagnostics(&server.http, &server.base).await;
    let comms = gauges::comms(&server.http, &server.base).await;
    eprintln!(
        "  after the attacker's streams: connections {} refused {} closed_idle {}; streams {} evicted {}",
        diag["connections"],
        diag["connections_refused"],
        diag["connections_closed_idle"],
        comms["streams"],
        comms["evicted_for_fairness"]
    );
    let (victim_max_ms, victim_ok, _kept) = victims(&server, "127.0.0.3", &path).await;
    let comms = gauges::comms(&server.http, &server.base).await;
    eprintln!(
        "  at the end: streams {} evicted_for_fairness {}",
        comms["streams"], comms["evicted_for_fairness"]
    );
    // What the server has open: the attacker's streams ended for the
    // victims' are not held any more.
    let streams = comms["streams"].as_u64().unwrap_or(0) as usize;
    drop(held); // open until counted
    Aimed {
        victim_max_ms,
        victim_ok,
        held_subs: streams.saturating_sub(victim_ok),
        attacker,
    }
}

/// 8 multiplexed streams of 64 subs (64 team logs) from each of 127.0.0.2
/// to .6, then 5 scoped streams from 127.0.0.7.
pub async fn multiplexed() -> Aimed {
    let server = Server::start(&["--faults"]);
    for i in 0..64 {
        append(&server.http, &server.base, "team", &format!("t{i}"), "hi").await;
    }
    let subs: Vec<String> = (0..64).map(|i| format!("sub=team:t{i}:0")).collect();
    let path = format!("/v1/stream?{}", subs.join("&"));
    let mut attacker = Tally::default();
    let mut held = Vec::new();
    for a in 2..7 {
        let (t, h) = net::flood(&format!("127.0.0.{a}"), server.addr, &path, true, 8).await;
        eprintln!("  127.0.0.{a}: {t:?}");
        attacker.merge(&t);
        held.extend(h);
    }
    let (victim_max_ms, victim_ok, _kept) =
        victims(&server, "127.0.0.7", "/v1/teams/t0/events").await;
    let comms = gauges::comms(&server.http, &server.base).await;
    eprintln!(
        "  subscribers {} streams {}",
        comms["subscribers"], comms["streams"]
    );
    let subscribers = comms["subscribers"].as_u64().unwrap_or(0) as usize;
    drop(held); // open until counted
    Aimed {
        victim_max_ms,
        victim_ok,
        attacker,
        held_subs: subscribers.saturating_sub(victim_ok),
    }
}
