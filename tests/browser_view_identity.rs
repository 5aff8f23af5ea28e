//! Structural sharing of `view()` in Chromium against a real replay-server:
//! while an answer streams, the parts that did not change keep their JS
//! objects (so a React/Vue render can skip them by identity), and a part
//! that changed is a new object.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use js_sys::{Array, Object};
use serde_json::json;
use support::*;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

fn same(a: &JsValue, b: &JsValue) -> bool {
    Object::is(a, b)
}

fn len_of(view: &JsValue, path: &str) -> u32 {
    let list = get(view, path);
    if list.is_object() {
        Array::from(&list).length()
    } else {
        0
    }
}

fn tools_len(view: &JsValue) -> u32 {
    len_of(view, "live.tools")
}

fn items_len(view: &JsValue) -> u32 {
    len_of(view, "items")
}

#[wasm_bindgen_test]
async fn unchanged_parts_keep_their_objects_while_an_answer_streams() {
    let session = create_session().await;
    let client = connect(
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "notify": "sync"}),
    );
    let connecting = client.view();
    let live = || get(&client.view(), "status.state").as_string().as_deref() == Some("live");
    assert!(wait_until(10_000, live).await);
    let at_live = client.view();
    assert!(
        !same(&get(&connecting, "status"), &get(&at_live, "status")),
        "a changed status is a new object"
    );

    // Half the answer, a tool call, the other half: sample the snapshots.
    post_message(&session, "m1", "/tool one /long 3000").await;
    let mut views = Vec::new();
    let start = js_sys::Date::now();
    while js_sys::Date::now() - start < 30_000.0 {
        let v = client.view();
        let done = views
            .last()
            .is_some_and(|p: &JsValue| get(p, "live").is_object())
            && get(&v, "live").is_null();
        if views.last().is_none_or(|p| !same(p, &v)) {
            views.push(v);
        }
        if done {
            break;
        }
        sleep(2).await;
    }
    let streaming: Vec<&JsValue> = views
        .iter()
        .filter(|v| get(v, "live").is_object())
        .collect();
    assert!(
        streaming.len() >= 4,
        "saw the answer stream: {}",
        streaming.len()
    );

    let (mut text_only, mut item_added) = (0, 0);
    for pair in streaming.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(!same(a, b), "a new snapshot per change");
        for part in [
            "status",
            "notices",
            "pendingPrompts",
            "tasks",
            "interrupted",
            "session",
            "extras",
        ] {
            assert!(
                same(&get(a, part), &get(b, part)),
                "{part} keeps its object while only the live text changes"
            );
        }
        let text_changed = get(a, "live.text") != get(b, "live.text");
        let tools_equal = json_of(&get(a, "live.tools")) == json_of(&get(b, "live.tools"));
        let items_equal = json_of(&get(a, "items")) == json_of(&get(b, "items"));
        if text_changed && tools_equal && items_equal {
            text_only += 1;
            assert!(
                tools_len(a) == 0 || same(&get(a, "live.tools"), &get(b, "live.tools")),
                "unchanged live.tools keep their object"
            );
            assert!(!same(&get(a, "live"), &get(b, "live")), "live changed");
            assert!(
                same(&get(a, "items"), &get(b, "items")),
                "items keep their array while only the live text changes"
            );
        }
        if items_len(b) > items_len(a) {
            item_added += 1;
            assert!(
                !same(&get(a, "items"), &get(b, "items")),
                "changed items are a new array"
            );
        }
        // One place per call: a durable call is an item, not a live tool.
        let items = json_of(&get(b, "items"));
        let durable: Vec<&str> = items
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["call_id"].as_str())
            .collect();
        for tool in json_of(&get(b, "live.tools"))
            .as_array()
            .into_iter()
            .flatten()
        {
            let call = tool["call_id"].as_str().unwrap_or_default();
            assert!(
                !durable.contains(&call),
                "{call} is in items and live.tools at once"
            );
        }
    }
    assert!(
        text_only >= 2,
        "text streamed with nothing else changing: {text_only}"
    );
    assert!(
        item_added >= 1,
        "the tool card became an item while streaming"
    );
    client.close();
}
