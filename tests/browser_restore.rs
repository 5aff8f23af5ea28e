//! Restore in Chromium against a real replay-server: cuts at random byte
//! offsets, reload from storage, worker restart, task snapshots.
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
    for turn in 0..6 {
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
    assert_eq!(users, 6, "every message exactly once: {t}");
    client.close();
}

#[wasm_bindgen_test]
async fn reload_restores_from_storage_and_repaints_once() {
    let session = create_session().await;
    post_message(&session, "m1", "/tool first").await;
    let first = Client::connect(options(&session, StorageChoice::Local));
    let server = converge(&first, &session, 15_000).await;
    first.close();
    let stored = local_storage().get_item(&key(&session)).unwrap();
    assert!(stored.is_some_and(|v| v.contains(server["epoch"].as_str().unwrap())));

    // A reload: the stored state is there synchronously, before any byte.
    let second = Client::connect(options(&session, StorageChoice::Local));
    let restored_items = second.with_view(|v| v.unwrap().as_session().unwrap().items().len());
    assert_eq!(restored_items, server["items"].as_array().unwrap().len());
    assert_eq!(second.position().cursor, server["cursor"].as_u64().unwrap());
    let changes = std::rc::Rc::new(std::cell::Cell::new(0));
    let count = changes.clone();
    let _sub = second.on_change(move || count.set(count.get() + 1));
    assert!(wait_until(10_000, || has_notice(&second, "restored")).await);
    assert!(wait_until(5_000, || changes.get() >= 1).await);
    assert_eq!(changes.get(), 1, "one repaint for the restore");
    assert_eq!(client_transcript(&second)["items"], server["items"]);
    second.close();
}

#[wasm_bindgen_test]
async fn worker_restart_shows_the_honest_boundary() {
    let session = create_session().await;
    let client = Client::connect(options(&session, StorageChoice::Memory));
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    let turn = post_message(&session, "m1", "/slow /long 2000 long answer").await;
    let has_live_text = || {
        client.with_view(|v| {
            let s = v.and_then(|v| v.as_session());
            s.and_then(|s| s.overlay())
                .is_some_and(|o| !o.text.is_empty())
        })
    };
    assert!(
        wait_until(10_000, has_live_text).await,
        "live text streamed"
    );
    fault(json!({"kind": "restart_worker"})).await;
    let interrupted = || {
        client.with_view(|v| {
            let s = v.and_then(|v| v.as_session()).unwrap();
            s.overlay().is_none() && s.interrupted().iter().any(|t| t.turn_id == turn)
        })
    };
    assert!(
        wait_until(10_000, interrupted).await,
        "turn shown as interrupted"
    );
    assert!(wait_until(5_000, || has_notice(&client, "turn_interrupted")).await);
    let server = converge(&client, &session, 10_000).await;
    let items = server["items"].as_array().unwrap();
    assert!(
        !items
            .iter()
            .any(|i| i["kind"] == "message" && i["role"] == "assistant"),
        "partial text is never promoted: {server}"
    );
    assert!(items.iter().any(|i| i["kind"] == "turn_end"
        && i["outcome"] == "failed"
        && i["reason"] == "worker_restart"));
    client.close();
}

#[wasm_bindgen_test]
async fn task_snapshot_replaces_state_without_moving_the_cursor() {
    let session = create_session().await;
    let client = Client::connect(options(&session, StorageChoice::Memory));
    post_message(&session, "m1", "/bg index everything").await;
    converge(&client, &session, 15_000).await;
    let cursor = client.position().cursor;
    let task_state = |c: &Client| {
        c.with_view(|v| {
            let tasks = v.and_then(|v| v.as_session()).map(|s| s.tasks().clone());
            tasks.and_then(|t| t.tasks.first().map(|t| format!("{:?}", t.state)))
        })
    };
    assert!(
        wait_until(20_000, || task_state(&client).as_deref()
            == Some("Succeeded"))
        .await,
        "the background task completes after the turn: {:?}",
        task_state(&client)
    );
    assert_eq!(client.position().cursor, cursor, "snapshots move no cursor");
    let server = server_transcript(&session).await;
    assert_eq!(client_transcript(&client)["tasks"], server["tasks"]);
    client.close();
}
