//! Throughput of the shared host's pipeline (the goal: one parse per
//! event): a multiplexed stream's SSE bytes in 64 KiB chunks → the share
//! hub (SSE parser, envelope read, routing, duplicate drop) → the session's
//! machine (cursor checks) → its fold. What the SharedWorker does per event,
//! natively.
//!
//! `cargo bench --bench shared_pipeline` prints, on stdout,
//! `shared_pipeline_events_per_s <n>` (best of several runs). Not a timed
//! test: it asserts only that every durable event was applied.

#[path = "common/gen.rs"]
mod gen;

use std::time::{Duration, Instant};

use replay_client::core::machine::{Action, Config, FetchKind, Machine, RequestId, Response};
use replay_client::core::share::{Output, Share, ShareConfig};

const EVENTS: usize = 100_000;
const CHUNK: usize = 64 * 1024;
const RUNS: usize = 7;
const EPOCH: &str = "e_91c2";
const MACHINE: u64 = 1;

/// Carries out the hub's outputs: returns the connection it opened, if any.
fn drain(share: &mut Share, m: &mut Machine, now: u64) -> Option<RequestId> {
    let mut opened = None;
    while let Some(o) = share.poll_output() {
        match o {
            Output::OpenMux { id, .. } => opened = Some(id),
            Output::AbortMux { .. } => {}
            Output::Deliver { stream, what, .. } => m.handle_response(stream, what, now),
        }
    }
    while let Some(a) = m.poll_action() {
        std::hint::black_box(a);
    }
    while m.poll_notice().is_some() {}
    std::hint::black_box(m.poll_view_change());
    opened
}

/// A machine past its restore barrier (empty replay) whose stream the hub
/// serves over one open multiplexed connection.
fn shared_client() -> (Share, Machine, RequestId) {
    let cfg = {
        let mut cfg = Config::session("ses_7f3a");
        cfg.buffer_limit = usize::MAX;
        cfg
    };
    let target = cfg.target.clone();
    let mut m = Machine::new(cfg, None, 0);
    let mut share = Share::new(ShareConfig::new(7));
    let mut replay = None;
    while let Some(a) = m.poll_action() {
        match a {
            Action::Fetch {
                id,
                kind: FetchKind::Replay,
                ..
            } => replay = Some(id),
            a => assert!(
                share.handle_machine_action(MACHINE, &target, &a, 0)
                    || !matches!(a, Action::OpenStream { .. })
            ),
        }
    }
    let page = format!(
        r#"{{"epoch":"{EPOCH}","boot_id":"b_44aa","cursor":0,"head":0,"has_more":false,"history":[],"live_turn":null,"tasks":null}}"#
    );
    m.handle_replay_page(replay.expect("replay requested"), page.as_bytes(), 0);
    drain(&mut share, &mut m, 0);
    let at = share.poll_timeout().expect("the set change waits");
    share.handle_timeout(at);
    let mux = drain(&mut share, &mut m, at).expect("the connection is opened");
    let head = Response::Head {
        status: 200,
        content_type: Some("text/event-stream".into()),
        retry_after: None,
    };
    share.handle_mux(mux, head, at);
    drain(&mut share, &mut m, at);
    (share, m, mux)
}

/// Feeds the connection once, carrying out outputs per chunk as the
/// executor would.
fn run_once(bytes: &[u8]) -> (Duration, Machine) {
    let (mut share, mut m, mux) = shared_client();
    let start = Instant::now();
    for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
        let now = 100 + i as u64;
        share.handle_mux(mux, Response::Body(chunk.to_vec()), now);
        drain(&mut share, &mut m, now);
    }
    (start.elapsed(), m)
}

fn main() {
    let stream = gen::session_stream(EVENTS, 42);
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let (t, m) = run_once(&stream.bytes);
        assert_eq!(m.cursor(), stream.durable, "every durable event applied");
        best = best.min(t);
    }
    let secs = best.as_secs_f64();
    println!(
        "shared_pipeline_events_per_s {:.0}",
        stream.events as f64 / secs
    );
    eprintln!(
        "{} events through the hub to one machine, best of {RUNS}: {:.1} ms ({:.2} µs/event)",
        stream.events,
        secs * 1e3,
        secs * 1e6 / stream.events as f64
    );
}
