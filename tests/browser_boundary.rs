//! What only the live worker knows, in Chromium against a real
//! replay-server: the honest boundary after a worker restart, and task
//! snapshots that replace state without moving the cursor.
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
