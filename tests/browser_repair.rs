//! Gap repair, epoch change and cursor rejection (400/409) in Chromium
//! against a real replay-server.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use replay_client::core::machine::State;
use replay_client::wasm::{Client, StorageChoice};
use serde_json::{json, Value};
use support::*;
use wasm_bindgen_test::wasm_bindgen_test;

/// Follows `session` to the end with local storage, closes, and returns
/// the stored value as JSON.
async fn stored_after_one_turn(session: &str) -> Value {
    post_message(session, "m1", "/tool first").await;
    let c = Client::connect(options(session, StorageChoice::Local));
    converge(&c, session, 15_000).await;
    c.close();
    let v = local_storage().get_item(&key(session)).unwrap().unwrap();
    serde_json::from_str(&v).unwrap()
}

fn store(session: &str, v: &Value) {
    local_storage()
        .set_item(&key(session), &v.to_string())
        .unwrap();
}

/// Rule 9: a rejected cursor gives a `cursor_reset` notice with the HTTP
/// status, then a restore from 0 that reaches the server's head.
async fn restores_from_zero_after(client: &Client, session: &str, status: u16, head: u64) {
    assert!(wait_until(10_000, || has_notice(client, "cursor_reset")).await);
    let notice = client
        .notices()
        .into_iter()
        .find(|n| n.code == "cursor_reset")
        .unwrap();
    assert_eq!(notice.status, Some(status), "{notice:?}");
    converge(client, session, 15_000).await;
    assert_eq!(client.position().cursor, head);
    assert_ne!(client.status().state, State::Failed);
    client.close();
}

#[wasm_bindgen_test]
async fn gap_in_the_live_stream_is_repaired() {
    let session = create_session().await;
    let client = Client::connect(options(&session, StorageChoice::Memory));
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    fault(json!({"kind": "skip_durable", "count": 2})).await;
    post_message(&session, "m1", "/tool gap please").await;
    converge(&client, &session, 15_000).await;
    assert!(
        client.counters().gaps_repaired >= 1,
        "{:?}",
        client.counters()
    );
    assert!(has_notice(&client, "gap_repaired"));
    client.close();
}

#[wasm_bindgen_test]
async fn epoch_change_discards_state_with_a_notice() {
    let session = create_session().await;
    let mut stored = stored_after_one_turn(&session).await;
    stored["epoch"] = json!("e_from_another_life");
    store(&session, &stored);
    let client = Client::connect(options(&session, StorageChoice::Local));
    assert!(wait_until(10_000, || has_notice(&client, "epoch_changed")).await);
    let server = converge(&client, &session, 15_000).await;
    assert_eq!(client.position().epoch.as_deref(), server["epoch"].as_str());
    client.close();
}

#[wasm_bindgen_test]
async fn cursor_above_head_gets_409_and_restores_from_zero() {
    let session = create_session().await;
    let mut stored = stored_after_one_turn(&session).await;
    let head = stored["cursor"].as_u64().unwrap();
    stored["cursor"] = json!(head + 50);
    store(&session, &stored);
    let client = Client::connect(options(&session, StorageChoice::Local));
    restores_from_zero_after(&client, &session, 409, head).await;
}

#[wasm_bindgen_test]
async fn invalid_cursor_400_restores_from_zero_with_a_notice() {
    let session = create_session().await;
    let stored = stored_after_one_turn(&session).await;
    let head = stored["cursor"].as_u64().unwrap();
    store(&session, &stored);
    fault(
        json!({"kind": "fail_requests", "route": "replay", "status": 400,
                 "error": "invalid_cursor", "count": 1}),
    )
    .await;
    let client = Client::connect(options(&session, StorageChoice::Local));
    restores_from_zero_after(&client, &session, 400, head).await;
}

/// A 400 with any other code on the backlog is "another 4xx": it gives
/// the restore up, not the client (rule 2, rule 9): no loop, a
/// `restore_failed` notice with the server's answer, and the live stream
/// goes on over the history the client had, marked incomplete.
#[wasm_bindgen_test]
async fn other_400_on_the_backlog_gives_the_restore_up_not_the_client() {
    let session = create_session().await;
    post_message(&session, "m1", "hello").await;
    fault(json!({"kind": "fail_requests", "route": "replay", "status": 400, "count": 1})).await;
    let client = Client::connect(options(&session, StorageChoice::Memory));
    let incomplete = || {
        let s = client.status();
        s.state == State::Live && s.history_incomplete
    };
    assert!(
        wait_until(10_000, incomplete).await,
        "live, history incomplete: {:?}",
        client.status()
    );
    let notices = client.notices();
    let failed = notices
        .iter()
        .find(|n| n.code == "restore_failed")
        .expect("a restore_failed notice");
    // The fault's answer is in the notice.
    assert_eq!(failed.status, Some(400), "{failed:?}");
    assert!(failed.message.starts_with("HTTP 400"), "{failed:?}");
    client.close();
}

/// The machine runs on a monotonic clock: a retry timer armed before the
/// system clock is set back fires on time. On `Date.now()` it found nothing
/// due when it fired and waited the hour the clock went back.
#[wasm_bindgen_test]
async fn a_clock_set_back_delays_no_retry() {
    let session = create_session().await;
    let client = Client::connect(options(&session, StorageChoice::Memory));
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    // The next stream is refused with `Retry-After: 2`: a retry 2 s away.
    fault(json!({"kind": "fail_requests", "route": "stream", "status": 503, "count": 1, "retry_after": 2})).await;
    fault(json!({"kind": "close_streams"})).await;
    assert!(wait_until(5_000, || client.status().next_retry_at.is_some()).await);
    // The system clock goes back an hour while the retry waits.
    js_sys::eval(
        "globalThis.__realDateNow = Date.now; \
         Date.now = () => globalThis.__realDateNow() - 3600000;",
    )
    .unwrap();
    // Counted in sleeps: `wait_until` reads the clock that just stepped.
    let mut live_again = false;
    for _ in 0..400 {
        live_again = client.status().state == State::Live;
        if live_again {
            break;
        }
        sleep(20).await;
    }
    js_sys::eval("Date.now = globalThis.__realDateNow;").unwrap();
    assert!(live_again, "{:?}", client.status());
    post_message(&session, "m1", "after the clock step").await;
    converge(&client, &session, 15_000).await;
    client.close();
}
