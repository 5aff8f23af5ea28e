//! Credentials, writes and request deadlines in Chromium against a real
//! replay-server: `getToken()` per request, one refresh after a 401,
//! idempotent retries, and the first-byte timeout of a request that gets
//! no answer.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use std::cell::Cell;
use std::rc::Rc;

use replay_client::core::machine::State;
use replay_client::wasm::{Client, StorageChoice, TokenFuture, TokenRequest, WasmError};
use serde_json::json;
use support::*;
use wasm_bindgen_test::wasm_bindgen_test;

/// A client whose `getToken` counts its calls (and those asking to refresh).
fn counting_client(session: &str) -> (Client, Rc<Cell<u32>>) {
    let (client, tokens) = counting_client_with_refreshes(session);
    (client, tokens.calls)
}

/// How often a client's `getToken` was called, and asked for a fresh token.
struct Tokens {
    calls: Rc<Cell<u32>>,
    refreshes: Rc<Cell<u32>>,
}

/// A client whose `getToken` counts its calls, and the calls asking for a
/// fresh token.
fn counting_client_with_refreshes(session: &str) -> (Client, Tokens) {
    let calls = Rc::new(Cell::new(0));
    let refreshes = Rc::new(Cell::new(0));
    let counter = calls.clone();
    let refresh_counter = refreshes.clone();
    let mut o = options(session, StorageChoice::Memory);
    o.get_token = Some(Rc::new(move |request: TokenRequest| -> TokenFuture {
        if request.refresh {
            refresh_counter.set(refresh_counter.get() + 1);
        }
        counter.set(counter.get() + 1);
        let token = format!("token-{}", counter.get());
        Box::pin(async move { Ok(token) })
    }));
    (Client::connect(o), Tokens { calls, refreshes })
}

#[wasm_bindgen_test]
async fn a_401_refreshes_credentials_once_and_recovers() {
    let session = create_session().await;
    let (client, Tokens { calls, refreshes }) = counting_client_with_refreshes(&session);
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    assert!(
        calls.get() >= 2,
        "stream and replay each asked: {}",
        calls.get()
    );
    let before = calls.get();
    fault(json!({"kind": "fail_requests", "route": "stream", "status": 401, "count": 1})).await;
    fault(json!({"kind": "close_streams"})).await;
    assert!(
        wait_until(10_000, || calls.get() >= before + 2).await,
        "asked again after the 401"
    );
    assert_eq!(refreshes.get(), 1, "asked for a fresh token once");
    post_message(&session, "m1", "after refresh").await;
    converge(&client, &session, 15_000).await;
    assert_eq!(client.status().state, State::Live);
    client.close();
}

#[wasm_bindgen_test]
async fn a_second_401_stops_with_unauthorized() {
    let session = create_session().await;
    let (client, _calls) = counting_client(&session);
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    fault(json!({"kind": "fail_requests", "route": "stream", "status": 401, "count": 2})).await;
    fault(json!({"kind": "close_streams"})).await;
    assert!(wait_until(10_000, || client.status().state == State::Failed).await);
    let error = client.status().last_error.unwrap();
    assert_eq!(
        (error.code.as_str(), error.status),
        ("unauthorized", Some(401))
    );
    fault(json!({"kind": "clear"})).await;
    client.close();
}

#[wasm_bindgen_test]
async fn send_retries_5xx_with_the_same_message_id() {
    let session = create_session().await;
    let (client, _calls) = counting_client(&session);
    fault(json!({"kind": "fail_requests", "route": "messages", "status": 503, "count": 2})).await;
    let turn = client
        .send("retry me", Some("msg_fixed".to_owned()))
        .await
        .unwrap();
    let again = client
        .send("retry me", Some("msg_fixed".to_owned()))
        .await
        .unwrap();
    assert_eq!(turn, again, "a repeat returns the same turn");
    let server = converge(&client, &session, 15_000).await;
    let users: Vec<_> = server["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "message" && i["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "started once: {server}");
    assert_eq!(users[0]["message_id"], "msg_fixed");
    client.close();
}

#[wasm_bindgen_test]
async fn writes_report_http_errors_and_refuse_after_close() {
    let (client, _calls) = counting_client("ses_does_not_exist");
    match client.send("hello", None).await {
        Err(WasmError::Http { status: 404, .. }) => {}
        other => panic!("expected a 404, got {other:?}"),
    }
    client.close();
    assert_eq!(client.send("hello", None).await, Err(WasmError::Closed));
    assert_eq!(client.cancel().await, Err(WasmError::Closed));
}

/// A client whose requests give up after `ms` without an answer.
fn impatient_client(session: &str, ms: u32) -> Client {
    let mut o = options(session, StorageChoice::Memory);
    o.connect_timeout_ms = ms;
    Client::connect(o)
}

#[wasm_bindgen_test]
async fn a_stream_without_an_answer_times_out_and_reconnects() {
    let session = create_session().await;
    let client = impatient_client(&session, 400);
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    let before = client.counters().reconnects;
    // The next stream request is answered only after 8 s.
    fault(json!({"kind": "delay", "route": "stream", "ms": 8000})).await;
    fault(json!({"kind": "close_streams"})).await;
    // Reopened once (delayed), aborted after 400 ms, reopened again: well
    // before the delay ends (backoff waits are at most 1 s, then 2 s).
    assert!(
        wait_until(6_000, || client.counters().reconnects >= before + 2).await,
        "the silent request was abandoned: {:?}",
        client.counters()
    );
    assert!(wait_until(5_000, || client.status().state == State::Live).await);
    post_message(&session, "m1", "after the timeout").await;
    converge(&client, &session, 15_000).await;
    client.close();
}

#[wasm_bindgen_test]
async fn a_write_without_an_answer_times_out_and_is_retried() {
    let session = create_session().await;
    let client = impatient_client(&session, 400);
    fault(json!({"kind": "delay", "route": "messages", "ms": 8000})).await;
    let started = js_sys::Date::now();
    let turn = client.send("patience", Some("msg_late".to_owned())).await;
    let took = js_sys::Date::now() - started;
    assert!(turn.is_ok(), "retried after the timeout: {turn:?}");
    assert!(
        took < 6_000.0,
        "did not wait for the delayed answer: {took} ms"
    );
    let server = converge(&client, &session, 15_000).await;
    let users = server["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["message_id"] == "msg_late")
        .count();
    assert_eq!(users, 1, "started once: {server}");
    client.close();
}
