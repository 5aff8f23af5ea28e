//! Restore in Chromium against a real replay-server: cuts at random byte
//! offsets, reload from storage.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use replay_client::core::machine::State;
use replay_client::wasm::{Client, StorageChoice};
use serde_json::json;
use support::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
async fn restore_after_cuts_at_random_byte_offsets() {
    let session = create_session().await;
    let client = Client::connect(options(&session, StorageChoice::Memory));
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    let mut rng = Rng(0x5eed_0001);
    for turn in 0..4 {
        // The next stream (the current one included) is cut after 1..400 bytes:
        // mid-frame, mid-line or mid-UTF-8 sequence.
        let bytes = 1 + rng.below(400);
        fault(json!({"kind": "cut_after_bytes", "bytes": bytes, "count": 1})).await;
        let text = if turn % 2 == 0 {
            "/tool hello"
        } else {
            "/long 300 again"
        };
        post_message(&session, &format!("m{turn}"), text).await;
        converge(&client, &session, 15_000).await;
    }
    fault(json!({"kind": "clear"})).await;
    let counters = client.counters();
    assert!(
        counters.reconnects >= 1,
        "cuts forced reconnects: {counters:?}"
    );
    let t = client_transcript(&client);
    let users = t["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "message" && i["role"] == "user")
        .count();
    assert_eq!(users, 4, "every message exactly once: {t}");
    client.close();
}

#[wasm_bindgen_test]
async fn reload_restores_from_storage_and_paints_the_restore_whole() {
    let session = create_session().await;
    post_message(&session, "m1", "/tool first").await;
    let first = Client::connect(options(&session, StorageChoice::Local));
    let before = converge(&first, &session, 15_000).await;
    first.close();
    let stored = local_storage().get_item(&key(&session)).unwrap();
    assert!(stored.is_some_and(|v| v.contains(before["epoch"].as_str().unwrap())));
    // The session moves on while the page is away.
    post_message(&session, "m2", "/tool second").await;
    let server = loop {
        let t = server_transcript(&session).await;
        if t["items"].as_array().unwrap().len() > before["items"].as_array().unwrap().len()
            && t["items"].as_array().unwrap().last().unwrap()["kind"] == "turn_end"
        {
            break t;
        }
        sleep(50).await;
    };

    // A reload: the stored state is there synchronously, before any byte.
    let second = Client::connect(options(&session, StorageChoice::Local));
    let restored_items = second.with_view(|v| v.unwrap().as_session().unwrap().items().len());
    assert_eq!(restored_items, before["items"].as_array().unwrap().len());
    assert_eq!(second.position().cursor, before["cursor"].as_u64().unwrap());
    // Record what every notification shows: the restore must be painted
    // once, whole (a later status-only notification, e.g. `live` arriving
    // in another frame, carries no new content).
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    let weak = second.downgrade();
    let _sub = second.on_change(move || {
        if let Some(c) = weak.upgrade() {
            let items = c.with_view(|v| v.unwrap().as_session().unwrap().items().to_vec());
            log.borrow_mut().push(serde_json::to_value(items).unwrap());
        }
    });
    assert!(wait_until(10_000, || has_notice(&second, "restored")).await);
    assert!(wait_until(5_000, || !seen.borrow().is_empty()).await);
    let seen = seen.borrow();
    assert!(
        seen.iter().all(|items| *items == server["items"]),
        "every notification shows the whole restored state: {seen:?}"
    );
    drop(seen);
    assert_eq!(second.position().cursor, server["cursor"].as_u64().unwrap());
    assert_eq!(client_transcript(&second)["items"], server["items"]);
    second.close();
}
