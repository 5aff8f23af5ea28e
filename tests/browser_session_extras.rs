//! What the runtime says beyond the transcript reaches `view()` in Chromium
//! against a real replay-server: the session's title and end
//! (`view.session`), an event type the client does not fold
//! (`view.extras`), a tool card's `input`; and a reload from storage shows
//! them again.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use serde_json::json;
use support::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
async fn the_session_its_end_an_unknown_type_and_tool_inputs_reach_the_view() {
    let (status, body) = call("POST", "/v1/sessions", Some(json!({"title": "Trip plan"}))).await;
    assert_eq!(status, 201, "{body}");
    let session = body["session_id"].as_str().unwrap().to_owned();
    let options = json!({"baseUrl": server(), "sessionId": session, "storage": "local"});
    let client = connect(options.clone());
    let (told, off) = counter(&client);
    let state = |c: &replay_client::wasm::ReplayClient| get(&c.view(), "session.state").as_string();
    let title = || get(&client.view(), "session.title").as_string();
    assert!(wait_until(10_000, || title().as_deref() == Some("Trip plan")).await);
    assert_eq!(
        json_of(&get(&client.view(), "session")),
        json!({"title": "Trip plan", "state": "open"})
    );
    assert_eq!(json_of(&get(&client.view(), "extras")), json!([]));

    // A runtime's own durable type, a tool call, then the runtime fails the session.
    post_message(&session, "m1", "/plan /tool /crash").await;
    assert!(wait_until(15_000, || state(&client).as_deref() == Some("failed")).await);
    let view = client.view();
    assert_eq!(
        json_of(&get(&view, "session")),
        json!({"title": "Trip plan", "state": "failed", "reason": "scripted_failure"})
    );
    let extras = json_of(&get(&view, "extras"));
    let extras = extras.as_array().unwrap();
    assert_eq!(extras.len(), 1, "{extras:?}");
    assert_eq!(extras[0]["type"], "plan.updated");
    assert_eq!(extras[0]["data"]["steps"], json!(["read", "answer"]));
    assert!(extras[0]["seq"].as_u64().unwrap() > 1);
    let items = json_of(&get(&view, "items"));
    let tool = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "tool")
        .unwrap_or_else(|| panic!("no tool card: {items}"));
    assert!(tool["input"]["command"].is_string(), "{tool}");
    assert!(told.get() > 0, "subscribers were told");
    let _ = off.call0(&wasm_bindgen::JsValue::NULL);
    client.close();

    // A reload restores them from storage, then from the log as they were.
    let again = connect(options);
    let shown = || get(&again.view(), "status.state").as_string().as_deref() == Some("live");
    assert!(wait_until(10_000, shown).await);
    let view = again.view();
    assert_eq!(
        get(&view, "session.reason").as_string().as_deref(),
        Some("scripted_failure")
    );
    assert_eq!(json_of(&get(&view, "extras")).as_array().unwrap().len(), 1);
    again.close();
}
