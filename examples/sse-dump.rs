//! Dumps a `text/event-stream` read from stdin as JSON lines, one per parser
//! item, as the bytes arrive:
//!
//! ```text
//! curl -N http://localhost:8080/v1/sessions/ses_1/events | cargo run --example sse-dump
//! cargo run --example sse-dump -- --chunk-size 1 --max-event-size 4096 < stream.txt
//! ```
//!
//! Output: `{"type":..,"data":..,"last_event_id":..}` per dispatched event,
//! `{"retry":ms}` per accepted `retry:`, `{"error":"event_too_large",..}` per
//! skipped event. `--chunk-size` is the largest read fed to the parser at once.

use std::io::{Read, Write};
use std::process::ExitCode;

use replay_client::core::sse::{SseError, SseItem, SseParser};
use serde::Serialize;

const USAGE: &str = "usage: sse-dump [--chunk-size N] [--max-event-size N] < stream";

struct Options {
    chunk_size: usize,
    max_event_size: usize,
}

fn parse_args() -> Result<Options, String> {
    let mut opts = Options {
        chunk_size: 64 * 1024,
        max_event_size: SseParser::DEFAULT_MAX_EVENT_SIZE,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--chunk-size" => &mut opts.chunk_size,
            "--max-event-size" => &mut opts.max_event_size,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        };
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        *slot = value
            .parse()
            .map_err(|_| format!("{flag}: not a number: {value:?}"))?;
    }
    if opts.chunk_size == 0 {
        return Err("--chunk-size must be at least 1".to_owned());
    }
    Ok(opts)
}

/// One output line; a struct (not `json!`) so keys keep this order.
#[derive(Serialize)]
#[serde(untagged)]
enum Line {
    Event {
        #[serde(rename = "type")]
        event_type: String,
        data: String,
        last_event_id: String,
    },
    Retry {
        retry: u64,
    },
    Error {
        error: &'static str,
        limit: usize,
        size: usize,
    },
}

fn to_line(item: SseItem) -> Line {
    match item {
        SseItem::Event(e) => Line::Event {
            event_type: e.event_type,
            data: e.data,
            last_event_id: e.last_event_id,
        },
        SseItem::Retry(retry) => Line::Retry { retry },
        SseItem::Error(SseError::EventTooLarge { limit, size }) => Line::Error {
            error: "event_too_large",
            limit,
            size,
        },
    }
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(opts) => opts,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let mut parser = SseParser::with_max_event_size(opts.max_event_size);
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; opts.chunk_size];
    let mut write_failed = None;
    loop {
        // `read` returns as soon as some bytes are available, so a live
        // stream is printed event by event rather than at EOF.
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("sse-dump: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        };
        parser.push(&buf[..n], &mut |item| {
            if write_failed.is_some() {
                return;
            }
            let line = serde_json::to_string(&to_line(item)).expect("plain data serialises");
            if let Err(e) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
                write_failed = Some(e);
            }
        });
        if let Some(e) = write_failed.take() {
            // A closed pipe (e.g. `| head`) ends the dump quietly.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("sse-dump: writing stdout: {e}");
            return ExitCode::FAILURE;
        }
    }
    parser.finish();
    ExitCode::SUCCESS
}
