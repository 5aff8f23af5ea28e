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

fn tools_len(view: &JsValue) -> u32 {
    let tools = get(view, "live.tools");
    if tools.is_object() {
        Array::from(&tools).length()
    } else {
        0
    }
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

    let (mut text_only, mut tool_added) = (0, 0);
    for pair in streaming.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(!same(a, b), "a new snapshot per change");
        for part in [
            "status",
            "notices",
            "pendingPrompts",
            "tasks",
            "interrupted",
        ] {
            assert!(
                same(&get(a, part), &get(b, part)),
                "{part} keeps its object while only the live text changes"
            );
        }
        let text_changed = get(a, "live.text") != get(b, "live.text");
        if tools_len(a) == tools_len(b) && tools_len(a) > 0 && text_changed {
            text_only += 1;
            let same_tools = same(&get(a, "live.tools"), &get(b, "live.tools"));
            let tools_equal = json_of(&get(a, "live.tools")) == json_of(&get(b, "live.tools"));
            assert!(
                same_tools || !tools_equal,
                "unchanged live.tools keep their object"
            );
            assert!(!same(&get(a, "live"), &get(b, "live")), "live changed");
            if tools_equal {
                assert!(
                    same(&get(a, "items"), &get(b, "items")),
                    "items keep their array while only the live text changes"
                );
            }
        }
        if tools_len(b) > tools_len(a) {
            tool_added += 1;
            assert!(
                !same(&get(a, "live.tools"), &get(b, "live.tools")),
                "changed live.tools are a new object"
            );
        }
    }
    assert!(
        text_only >= 2,
        "text streamed beside a tool card: {text_only}"
    );
    assert!(tool_added >= 1, "the tool card appeared while streaming");
    client.close();
}
