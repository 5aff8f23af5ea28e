//! The client inside a dedicated Worker: no `window`, no `document`, no
//! `localStorage`; globals are bound on `globalThis`, so it still works.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[path = "browser_support/mod.rs"]
mod support;

use replay_client::wasm::{Client, StorageChoice};
use support::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
async fn follows_a_session_from_a_worker() {
    assert!(js_sys::Reflect::get(&js_sys::global(), &"document".into())
        .unwrap()
        .is_undefined());
    let session = create_session().await;
    post_message(&session, "m1", "/tool from a worker").await;
    // The default storage is unavailable here: memory fallback with a notice.
    let client = Client::connect(options(&session, StorageChoice::Local));
    assert_eq!(client.storage_label(), "memory-fallback");
    assert!(has_notice(&client, "storage_fallback"));
    converge(&client, &session, 15_000).await;
    let turn = client.send("/tool second", None).await.unwrap();
    assert!(!turn.is_empty());
    converge(&client, &session, 15_000).await;
    client.close();
}
