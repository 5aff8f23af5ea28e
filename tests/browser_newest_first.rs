//! The newest page first in Chromium against a real replay-server: a long
//! session paints its newest messages from one page, and `loadOlder()`
//! brings every older item exactly once (docs/protocol.md §4.1), with the
//! default options.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use replay_client::core::machine::Config;
use serde_json::{json, Value};
use support::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

/// Turns of the long session: a user message, its reply and its end each,
/// after its `session.created`.
const TURNS: usize = 667;

async fn put(session: &str, ty: &str, data: Value) {
    let body = json!({"scope": "session", "scope_id": session, "type": ty, "data": data});
    let (status, v) = call("POST", "/v1/admin/events", Some(body)).await;
    assert_eq!(status, 201, "{v}");
}

/// A session of `1 + 3 * turns` events.
async fn long_session(turns: usize) -> String {
    let session = create_session().await;
    for k in 0..turns {
        let t = format!("t{k}");
        let user = json!({"message_id": format!("u{k}"), "turn_id": t, "role": "user", "text": format!("question {k}")});
        put(&session, "message.committed", user).await;
        let reply = json!({"message_id": format!("a{k}"), "turn_id": t, "role": "assistant", "text": format!("answer {k}")});
        put(&session, "message.committed", reply).await;
        put(&session, "turn.completed", json!({"turn_id": t})).await;
    }
    session
}

#[wasm_bindgen_test]
async fn a_long_session_paints_its_newest_page_and_loads_every_older_item_once() {
    let session = long_session(TURNS).await;
    let all = server_transcript(&session).await["items"].clone();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 3 * TURNS);
    // The default `tail` (the figures below are for 40).
    assert_eq!(Config::DEFAULT_TAIL, 40);
    let client = connect(json!({
        "baseUrl": server(),
        "sessionId": session,
        "storage": "memory",
    }));
    let live = || json_of(&client.view())["status"]["state"] == "live";
    assert!(wait_until(10_000, live).await);
    // One page: the turns of its last 40 events and no more, read from one
    // boundary (no event older than that page crossed).
    let view = json_of(&client.view());
    let shown = view["items"].as_array().unwrap().clone();
    assert_eq!(view["hasOlder"], true);
    assert_eq!(shown.len(), 42, "14 turns of 3 events: at least 40");
    assert_eq!(shown[..], all[all.len() - shown.len()..]);
    let events = json_of(&client.diagnostics())["counters"]["events"].clone();
    assert!(events.as_u64().unwrap() < 60, "read {events} events");
    // Older pages, newest first, until none is left: each prepends exactly
    // the items before the ones shown.
    let mut loads = 0;
    let mut held = shown.len();
    while json_of(&client.view())["hasOlder"] == true {
        JsFuture::from(client.load_older()).await.unwrap();
        let items = json_of(&client.view())["items"].as_array().unwrap().clone();
        assert!(items.len() > held, "a page adds items");
        assert_eq!(items[..], all[all.len() - items.len()..]);
        held = items.len();
        loads += 1;
    }
    assert!(loads >= 40, "{loads} older pages");
    // Nothing older: resolves at once, nothing changes.
    JsFuture::from(client.load_older()).await.unwrap();
    let t = json_of(&client.transcript().unwrap());
    assert_eq!(t["items"], server_transcript(&session).await["items"]);
    assert_eq!(json_of(&client.view())["session"]["title"], "t");
    client.close();
}

#[wasm_bindgen_test]
async fn a_reload_shows_what_was_read_and_still_loads_the_older_pages() {
    let session = long_session(100).await;
    let options = json!({"baseUrl": server(), "sessionId": session, "storage": "local"});
    let first = connect(options.clone());
    let live =
        |c: &replay_client::wasm::ReplayClient| json_of(&c.view())["status"]["state"] == "live";
    assert!(wait_until(10_000, || live(&first)).await);
    JsFuture::from(first.load_older()).await.unwrap();
    let read = json_of(&first.view())["items"].clone();
    assert_eq!(json_of(&first.view())["hasOlder"], true);
    first.close();
    // The reload paints the part read (the newest page and the one before
    // it), reads nothing of the history again, and pages older from there.
    let again = connect(options);
    assert!(wait_until(10_000, || live(&again)).await);
    let view = json_of(&again.view());
    assert_eq!(view["items"], read);
    assert_eq!(view["hasOlder"], true);
    let events = json_of(&again.diagnostics())["counters"]["events"].clone();
    // The stream's hello and at most a heartbeat, no page of the history.
    assert!(events.as_u64().unwrap() < 5, "read {events} events again");
    while json_of(&again.view())["hasOlder"] == true {
        JsFuture::from(again.load_older()).await.unwrap();
    }
    let t = json_of(&again.transcript().unwrap());
    assert_eq!(t["items"], server_transcript(&session).await["items"]);
    again.close();
    local_storage().remove_item(&key(&session)).unwrap();
}
