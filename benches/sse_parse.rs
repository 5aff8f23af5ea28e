//! Throughput of `core::sse::SseParser` on a realistic session stream.
//!
//! `cargo bench --bench sse_parse` prints, on stdout:
//! `sse_parse_mb_per_s <n>` (best of several runs, MB = 10^6 bytes) and
//! `sse_parse_events_per_s <n>`. Not a timed test: it asserts only that every
//! event was parsed.

#[path = "common/gen.rs"]
mod gen;

use std::time::{Duration, Instant};

use replay_client::core::sse::{SseItem, SseParser};

const EVENTS: usize = 100_000;
const CHUNK: usize = 64 * 1024;
const RUNS: usize = 15;

/// Parses the whole stream once; returns (events, durable events) seen.
fn parse_once(parser: &mut SseParser, bytes: &[u8]) -> (usize, u64) {
    let mut events = 0usize;
    let mut durable = 0u64;
    for chunk in bytes.chunks(CHUNK) {
        parser.push(chunk, &mut |item| {
            if let SseItem::Event(e) = item {
                events += 1;
                durable += u64::from(e.id_field_seen);
                std::hint::black_box(&e);
            }
        });
    }
    parser.finish();
    (events, durable)
}

fn main() {
    let stream = gen::session_stream(EVENTS, 42);
    let bytes = &stream.bytes;
    let mut parser = SseParser::new();
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        parser.reset();
        let start = Instant::now();
        let (events, durable) = parse_once(&mut parser, std::hint::black_box(bytes));
        let elapsed = start.elapsed();
        assert_eq!(events, stream.events, "dispatched events");
        assert_eq!(durable, stream.durable, "durable events");
        assert_eq!(parser.last_event_id(), stream.durable.to_string());
        best = best.min(elapsed);
    }
    let secs = best.as_secs_f64();
    eprintln!(
        "sse_parse: {} events, {} bytes ({:.0} B/event), best of {RUNS}: {:.2} ms",
        stream.events,
        bytes.len(),
        bytes.len() as f64 / stream.events as f64,
        secs * 1e3
    );
    println!("sse_parse_mb_per_s {:.1}", bytes.len() as f64 / secs / 1e6);
    println!("sse_parse_events_per_s {:.0}", stream.events as f64 / secs);
}
