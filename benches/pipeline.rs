//! Throughput of the whole client pipeline: SSE bytes in 64 KiB chunks →
//! parser → envelope decode → state machine (cursor checks) → session fold.
//!
//! `cargo bench --bench pipeline` prints, on stdout:
//! `pipeline_events_per_s <n>` and `pipeline_mb_per_s <n>` (best of several
//! runs, MB = 10^6 bytes). Not a timed test: it asserts only that every
//! durable event was applied.

#[path = "common/gen.rs"]
mod gen;

use std::time::{Duration, Instant};

use replay_client::core::machine::{supersedes, Action, Config, FetchKind, Machine, RequestId};

const EVENTS: usize = 100_000;
const CHUNK: usize = 64 * 1024;
const RUNS: usize = 7;
const EPOCH: &str = "e_91c2";

/// A client past its restore barrier (empty replay), with its stream open.
fn live_client() -> (Machine, RequestId) {
    let mut cfg = Config::session("ses_7f3a");
    cfg.buffer_limit = usize::MAX;
    let mut c = Machine::new(cfg, None, 0);
    let (mut stream, mut replay) = (None, None);
    while let Some(a) = c.poll_action() {
        match a {
            Action::OpenStream { id, .. } => stream = Some(id),
            Action::Fetch {
                id,
                kind: FetchKind::Replay,
                ..
            } => replay = Some(id),
            _ => {}
        }
    }
    let stream = stream.expect("stream requested");
    let page = format!(
        r#"{{"epoch":"{EPOCH}","boot_id":"b_44aa","cursor":0,"head":0,"has_more":false,"history":[],"live_turn":null,"tasks":null}}"#
    );
    c.handle_replay_page(replay.expect("replay requested"), page.as_bytes(), 0);
    c.handle_stream_opened(stream, 200, Some("text/event-stream"), None, 0);
    while c.poll_action().is_some() {}
    (c, stream)
}

/// Feeds the stream once, draining outputs per chunk as the IO layer would.
fn run_once(bytes: &[u8]) -> (Duration, Machine) {
    let (mut c, id) = live_client();
    let start = Instant::now();
    for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
        let now = i as u64;
        c.handle_stream_bytes(id, chunk, now);
        while let Some(a) = c.poll_action() {
            std::hint::black_box(a);
        }
        while c.poll_notice().is_some() {}
        std::hint::black_box(c.poll_view_change());
    }
    (start.elapsed(), c)
}

fn main() {
    let stream = gen::session_stream(EVENTS, 42);
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let (t, c) = run_once(&stream.bytes);
        assert_eq!(c.cursor(), stream.durable, "every durable event applied");
        best = best.min(t);
    }
    let secs = best.as_secs_f64();
    // What one throttled Persist of the final state costs (not in the rate).
    let (_, c) = run_once(&stream.bytes);
    let t = Instant::now();
    let stored = c.persisted_value();
    let encode = t.elapsed();
    let t = Instant::now();
    let back = Machine::new(Config::session("ses_7f3a"), Some(&stored), 0);
    let decode = t.elapsed();
    assert_eq!(back.cursor(), c.cursor());
    // A save first asks whether the stored value is newer (another tab's).
    let t = Instant::now();
    assert!(supersedes(&stored, &stored));
    let check = t.elapsed();
    eprintln!(
        "persisted state: {} bytes, encode {:.1} ms, decode {:.1} ms, the save's check against it {:.1} ms",
        stored.len(),
        encode.as_secs_f64() * 1e3,
        decode.as_secs_f64() * 1e3,
        check.as_secs_f64() * 1e3
    );
    println!("pipeline_events_per_s {:.0}", stream.events as f64 / secs);
    println!(
        "pipeline_mb_per_s {:.1}",
        stream.bytes.len() as f64 / 1e6 / secs
    );
    eprintln!(
        "{} events, {} bytes ({:.0} B/event), best of {RUNS}: {:.1} ms",
        stream.events,
        stream.bytes.len(),
        stream.bytes.len() as f64 / stream.events as f64,
        secs * 1e3
    );
}
