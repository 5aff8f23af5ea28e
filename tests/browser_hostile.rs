//! A lying server in Chromium: the suite's own replay-server
//! with a `hostile` fault on each client's session (an epoch that flips
//! after every restore, an endless history, a stream that ends after its
//! `hello` with `retry: 0`, a gzip bomb on the stream). Each client ends in
//! `backoff` or `failed` with its code and sends at most one request a
//! second after the first minute, and the wasm memory of all four stays
//! within 64 MiB: the bomb's decompressed chunks reach the wasm memory at
//! most `Config::max_held_bytes` (1 MiB) at a time, not a frame's worth
//! (tens of MiB, 125-128 MiB of memory before).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use js_sys::Array;
use replay_client::core::machine::State;
use replay_client::wasm::{Client, StorageChoice};
use serde_json::json;
use support::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

#[wasm_bindgen(inline_js = r#"
const log = [];
let installed = false;
// Every fetch the page makes, with its time: the clients' requests.
export function countFetches() {
  if (installed) return;
  installed = true;
  const real = globalThis.fetch;
  globalThis.fetch = function (input, init) {
    log.push([performance.now(), String(typeof input === "string" ? input : input.url)]);
    return real.apply(this, arguments);
  };
}
export function fetchTimes(part) {
  return log.filter(([, url]) => url.includes(part)).map(([t]) => t);
}
export function nowMs() { return performance.now(); }
"#)]
extern "C" {
    #[wasm_bindgen(js_name = countFetches)]
    fn count_fetches();
    #[wasm_bindgen(js_name = fetchTimes)]
    fn fetch_times(part: &str) -> Array;
    #[wasm_bindgen(js_name = nowMs)]
    fn now_ms() -> f64;
}

/// Each shape and the codes its client may end with.
const SHAPES: [(&str, &[&str]); 4] = [
    ("epoch_flip_after_restore", &["epoch_changed"]),
    ("endless_history", &["history_past_head"]),
    ("hello_then_close", &["stream_ended_early"]),
    ("gzip_bomb_stream", &["body_too_large", "event_too_large"]),
];

/// How long the clients run before their requests are counted.
const FIRST_MINUTE_MS: f64 = 60_000.0;
/// How long their requests are counted for.
const COUNTED_MS: f64 = 30_000.0;
/// The bound on the wasm memory, all four clients together.
const MAX_WASM_BYTES: f64 = 64.0 * 1024.0 * 1024.0;

fn wasm_memory_bytes() -> f64 {
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    let buffer: js_sys::ArrayBuffer = memory.buffer().unchecked_into();
    buffer.byte_length() as f64
}

/// The client's requests (its session's URLs) at or after `from`.
fn requests_since(session: &str, from: f64) -> usize {
    fetch_times(&format!("/sessions/{session}/"))
        .iter()
        .filter_map(|t| t.as_f64())
        .filter(|&t| t >= from)
        .count()
}

fn ended_with(client: &Client, codes: &[&str]) -> bool {
    let s = client.status();
    matches!(s.state, State::Backoff | State::Failed)
        && s.last_error
            .is_some_and(|e| codes.contains(&e.code.as_str()))
}

#[wasm_bindgen_test]
async fn a_lying_server_gets_paced_requests_and_bounded_memory() {
    count_fetches();
    let mut clients = Vec::new();
    for (shape, codes) in SHAPES {
        let session = create_session().await;
        fault(json!({"kind": "hostile", "session": session, "shape": shape})).await;
        let client = Client::connect(options(&session, StorageChoice::Memory));
        clients.push((shape, codes, session, client));
    }
    let start = now_ms();
    sleep(FIRST_MINUTE_MS as i32).await;
    let counted_from = now_ms();
    sleep(COUNTED_MS as i32).await;
    let counted_ms = now_ms() - counted_from;
    // Every client's figures are logged before any check fails.
    let mut failures = Vec::new();
    for (shape, _, session, client) in &clients {
        let first = requests_since(session, start) - requests_since(session, counted_from);
        let late = requests_since(session, counted_from);
        let per_s = late as f64 * 1_000.0 / counted_ms;
        console_log!(
            "{shape}: {first} requests in the first minute, {late} in the next {:.0} s \
             ({per_s:.2}/s); status {:?}",
            counted_ms / 1_000.0,
            client.status()
        );
        if per_s > 1.0 {
            failures.push(format!("{shape}: {late} requests in {counted_ms:.0} ms"));
        }
    }
    for (shape, codes, _, client) in &clients {
        // Between two tries a client may be trying (`connecting`) or live
        // for a moment: it comes back to its end state within a retry.
        if !wait_until(40_000, || ended_with(client, codes)).await {
            failures.push(format!("{shape}: status {:?}", client.status()));
        }
    }
    let memory = wasm_memory_bytes();
    console_log!(
        "wasm memory: {:.1} MiB (bound {:.0} MiB)",
        memory / 1024.0 / 1024.0,
        MAX_WASM_BYTES / 1024.0 / 1024.0
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        memory <= MAX_WASM_BYTES,
        "wasm memory: {memory} bytes, bound {MAX_WASM_BYTES}"
    );
    for (_, _, _, client) in &clients {
        client.close();
    }
    fault(json!({"kind": "clear"})).await;
}
