//! Deterministic generator of a realistic session event stream in SSE framing
//! (docs/protocol.md §4.3), shared by the benchmarks:
//!
//! ```ignore
//! #[path = "common/gen.rs"]
//! mod gen;
//! let stream = gen::session_stream(100_000, 42);
//! ```
//!
//! The stream opens with `retry:` and a `hello`, then mixes durable frames
//! (`id:` + `event:` + one-line JSON envelope), transient `turn.delta`,
//! `turn.tool_progress` and `heartbeat` frames without `id:`, and `:`
//! keep-alive comments. Frames average roughly 300 bytes.

#![allow(dead_code)] // each bench uses a different part

/// A generated stream and what a conforming parser must find in it.
pub struct SessionStream {
    /// The `text/event-stream` body.
    pub bytes: Vec<u8>,
    /// Events a parser dispatches (every frame with data; comments excluded).
    pub events: usize,
    /// How many of them are durable (carry `id:`); their seqs are 1..=durable.
    pub durable: u64,
}

const WORDS: &[&str] = &[
    "the",
    "agent",
    "reads",
    "file",
    "and",
    "runs",
    "tests",
    "before",
    "commit",
    "build",
    "passes",
    "with",
    "two",
    "warnings",
    "replay",
    "cursor",
    "session",
    "tool",
    "output",
    "ok",
    "écrit",
    "naïve",
    "日本語",
    "done",
];

/// Deterministic text on top of the core's SplitMix64 (no `rand` dependency).
struct Rng(replay_client::core::machine::SplitMix64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    fn text(&mut self, min: usize, spread: u64) -> String {
        let words = min + self.below(spread) as usize;
        let mut s = String::new();
        for i in 0..words {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
        }
        s
    }
}

fn ts(i: usize) -> String {
    let ms = 1_000 + i as u64 * 37;
    format!(
        "2026-11-29T23:{:02}:{:02}.{:03}Z",
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000
    )
}

/// Generates `events` dispatched frames (plus interleaved comments) from
/// `seed`. Same arguments, same bytes.
pub fn session_stream(events: usize, seed: u64) -> SessionStream {
    let mut rng = Rng(replay_client::core::machine::SplitMix64::new(seed));
    let mut out = String::with_capacity(events * 320);
    let mut seq = 0u64;
    let mut row = 5_000u64;
    let mut turn = 1u64;
    let mut delta_offset = 0u64;
    let sid = "ses_7f3a";
    out.push_str("retry: 3000\n\n");
    out.push_str(&format!(
        "event: hello\ndata: {{\"scope\":\"session\",\"scope_id\":\"{sid}\",\"after_seq\":0,\
         \"type\":\"hello\",\"critical\":true,\"ts\":\"{}\",\"data\":{{\"epoch\":\"e_91c2\",\
         \"head\":0,\"boot_id\":\"b_44aa\"}}}}\n\n",
        ts(0)
    ));
    for i in 1..events {
        if i % 50 == 0 {
            out.push_str(": keepalive\n\n");
        }
        let roll = rng.below(100);
        if roll < 55 {
            seq += 1;
            row += 1 + rng.below(3);
            let (kind, data) = match rng.below(5) {
                0 => (
                    "turn.started",
                    format!("{{\"turn_id\":\"t{turn}\",\"input_message_id\":\"m{seq}\"}}"),
                ),
                1 => {
                    let text = rng.text(12, 24);
                    (
                        "message.committed",
                        format!(
                            "{{\"message_id\":\"m{seq}\",\"turn_id\":\"t{turn}\",\
                             \"role\":\"assistant\",\"text\":\"{text}\"}}"
                        ),
                    )
                }
                2 => (
                    "tool.started",
                    format!(
                        "{{\"turn_id\":\"t{turn}\",\"call_id\":\"c{seq}\",\"name\":\"shell\",\
                         \"input\":{{\"command\":\"cargo test --workspace\"}}}}"
                    ),
                ),
                3 => {
                    let output = rng.text(8, 16);
                    (
                        "tool.completed",
                        format!(
                            "{{\"turn_id\":\"t{turn}\",\"call_id\":\"c{}\",\"status\":\"ok\",\
                             \"output\":\"{output}\"}}",
                            seq - 1
                        ),
                    )
                }
                _ => {
                    turn += 1;
                    delta_offset = 0;
                    (
                        "turn.completed",
                        format!("{{\"turn_id\":\"t{}\"}}", turn - 1),
                    )
                }
            };
            out.push_str(&format!(
                "id: {seq}\nevent: {kind}\ndata: {{\"id\":{row},\"scope\":\"session\",\
                 \"scope_id\":\"{sid}\",\"seq\":{seq},\"type\":\"{kind}\",\"critical\":true,\
                 \"ts\":\"{}\",\"data\":{data}}}\n\n",
                ts(i)
            ));
        } else if roll < 90 {
            let text = rng.text(6, 20);
            out.push_str(&format!(
                "event: turn.delta\ndata: {{\"scope\":\"session\",\"scope_id\":\"{sid}\",\
                 \"after_seq\":{seq},\"type\":\"turn.delta\",\"critical\":true,\"ts\":\"{}\",\
                 \"data\":{{\"turn_id\":\"t{turn}\",\"message_id\":\"m{}\",\"offset\":{delta_offset},\
                 \"text\":\"{text}\"}}}}\n\n",
                ts(i),
                seq + 1
            ));
            delta_offset += text.chars().count() as u64;
        } else if roll < 95 {
            out.push_str(&format!(
                "event: turn.tool_progress\ndata: {{\"scope\":\"session\",\"scope_id\":\"{sid}\",\
                 \"after_seq\":{seq},\"type\":\"turn.tool_progress\",\"critical\":false,\
                 \"ts\":\"{}\",\"data\":{{\"turn_id\":\"t{turn}\",\"call_id\":\"c{seq}\",\
                 \"progress\":\"{} of 40 tests\"}}}}\n\n",
                ts(i),
                rng.below(40)
            ));
        } else {
            out.push_str(&format!(
                "event: heartbeat\ndata: {{\"scope\":\"session\",\"scope_id\":\"{sid}\",\
                 \"after_seq\":{seq},\"type\":\"heartbeat\",\"critical\":true,\"ts\":\"{}\",\
                 \"data\":{{\"head\":{seq}}}}}\n\n",
                ts(i)
            ));
        }
    }
    SessionStream {
        bytes: out.into_bytes(),
        events,
        durable: seq,
    }
}
