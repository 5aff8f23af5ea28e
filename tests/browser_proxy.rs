//! Behind a proxy that mutes event streams (nginx compressing
//! `text/event-stream` and ignoring `X-Accel-Buffering`, started by
//! `cargo xtask test`): from a fresh load the view follows by polling, a
//! turn posted just after the load included, and nothing is lost.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use replay_client::wasm::{Client, Options, StorageChoice};
use support::*;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

/// The proxy in front of the suites' server.
fn proxy() -> &'static str {
    match option_env!("REPLAY_PROXY_URL") {
        Some(url) => url,
        None => panic!("REPLAY_PROXY_URL must be set at build time (cargo xtask test does this)"),
    }
}

fn overlay_text(c: &Client) -> Option<String> {
    c.with_view(|v| {
        v.and_then(|v| v.as_session())
            .and_then(|s| s.overlay())
            .map(|o| o.text.to_string())
    })
}

/// What one turn looked like from the page: how often its live text grew,
/// and how long after the server committed its end the page showed it.
struct Seen {
    growths: usize,
    shown_after_ms: f64,
}

/// Posts `text` and watches the turn until the page shows what the server
/// committed.
async fn watch_turn(c: &Client, session: &str, id: &str, text: &str) -> Seen {
    post_message(session, id, text).await;
    let start = js_sys::Date::now();
    let mut last = String::new();
    let mut growths = 0;
    let mut committed_at: Option<f64> = None;
    loop {
        let now = js_sys::Date::now();
        assert!(
            now - start < 60_000.0,
            "the turn never showed: {:?}",
            c.status()
        );
        if let Some(t) = overlay_text(c) {
            if t.len() > last.len() {
                growths += 1;
            }
            last = t;
        }
        let server = server_transcript(session).await;
        let ended = server["items"]
            .as_array()
            .and_then(|items| items.last())
            .is_some_and(|last| last["kind"] == "turn_end");
        if ended && committed_at.is_none() {
            committed_at = Some(js_sys::Date::now());
        }
        if let Some(at) = committed_at {
            let mine = client_transcript(c);
            if mine["items"] == server["items"] {
                return Seen {
                    growths,
                    shown_after_ms: js_sys::Date::now() - at,
                };
            }
        }
        sleep(100).await;
    }
}

#[wasm_bindgen_test]
async fn a_muted_stream_is_followed_by_polling_from_a_fresh_load() {
    let session = create_session().await;
    let mut o = Options::session(proxy(), &session);
    o.storage = StorageChoice::Memory;
    o.seed = Some(7);
    let client = Client::connect(o);
    // A turn 1.5 s after the load, while the stream still looks like it
    // may come: the page shows it as it runs.
    sleep(1_500).await;
    let first = watch_turn(&client, &session, "m1", "/long 500 /slow").await;
    console_log!(
        "first turn: live text grew {} times, last words shown {} ms after the commit",
        first.growths,
        first.shown_after_ms
    );
    assert!(
        first.growths >= 3,
        "the live text grew {} times",
        first.growths
    );
    assert!(
        first.shown_after_ms <= 3_000.0,
        "the last words showed {} ms after the commit",
        first.shown_after_ms
    );
    // The stream is given up for polling, said once.
    assert!(
        wait_until(45_000, || has_notice(&client, "stream_muted")).await,
        "no stream_muted notice: {:?}",
        client.status()
    );
    let second = watch_turn(&client, &session, "m2", "/long 400 /slow").await;
    console_log!(
        "polling: live text grew {} times, last words shown {} ms after the commit",
        second.growths,
        second.shown_after_ms
    );
    assert!(
        second.growths >= 3,
        "the live text grew {} times",
        second.growths
    );
    assert!(
        second.shown_after_ms <= 3_000.0,
        "the last words showed {} ms after the commit",
        second.shown_after_ms
    );
    let server = converge(&client, &session, 15_000).await;
    assert_eq!(client_transcript(&client)["items"], server["items"]);
    let muted = client
        .notices()
        .iter()
        .filter(|n| n.code == "stream_muted")
        .count();
    assert_eq!(muted, 1);
    client.close();
}
