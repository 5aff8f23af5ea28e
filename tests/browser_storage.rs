//! Every storage kind, quota exceeded and a corrupt stored value, in
//! Chromium against a real replay-server.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use js_sys::{Object, Promise, Reflect};
use replay_client::core::machine::{Config, Machine};
use replay_client::wasm::{Client, StorageChoice};
use support::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen(inline_js = r#"
export function makeAdapter(mode) {
  const map = new Map();
  const wrap = (v) => (mode === "async" ? Promise.resolve(v) : v);
  // "hang": a get that never settles (a stuck IndexedDB open, say).
  const never = new Promise(() => {});
  const adapter = {
    map,
    sets: 0,
    get(key) { return mode === "hang" ? never : wrap(map.has(key) ? map.get(key) : null); },
    set(key, value) {
      adapter.sets += 1;
      if (mode === "quota") throw new DOMException("quota", "QuotaExceededError");
      if (mode === "reject") return Promise.reject(new DOMException("quota", "QuotaExceededError"));
      map.set(key, value);
      return wrap(undefined);
    },
    remove(key) { map.delete(key); return wrap(undefined); },
  };
  return adapter;
}
// One transaction on the client's store, as another tab would make it.
function idb(mode, f) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open("replay-client", 1);
    req.onupgradeneeded = () => req.result.createObjectStore("kv");
    req.onerror = () => reject(req.error);
    req.onsuccess = () => {
      const tx = req.result.transaction("kv", mode);
      const r = f(tx.objectStore("kv"));
      tx.oncomplete = () => { resolve(r.result ?? null); req.result.close(); };
      tx.onerror = () => reject(tx.error);
    };
  });
}
export function idbWrite(key, value) {
  return idb("readwrite", (s) => s.put(value, key));
}
export function idbRead(key) {
  return idb("readonly", (s) => s.get(key));
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = makeAdapter)]
    fn make_adapter(mode: &str) -> Object;
    #[wasm_bindgen(js_name = idbRead)]
    fn idb_read(key: &str) -> Promise;
    #[wasm_bindgen(js_name = idbWrite)]
    fn idb_write(key: &str, value: &str) -> Promise;
}

fn adapter_value(adapter: &Object, key: &str) -> Option<String> {
    let map: js_sys::Map = Reflect::get(adapter, &"map".into())
        .unwrap()
        .unchecked_into();
    map.get(&key.into()).as_string()
}

fn adapter_sets(adapter: &Object) -> f64 {
    Reflect::get(adapter, &"sets".into())
        .unwrap()
        .as_f64()
        .unwrap()
}

fn session_storage() -> web_sys::Storage {
    Reflect::get(&js_sys::global(), &"sessionStorage".into())
        .unwrap()
        .unchecked_into()
}

/// Follows one turn with `storage`, closes (which flushes), and checks
/// that the stored value carries the epoch and the cursor.
async fn follow_and_close(storage: StorageChoice) -> (String, serde_json::Value, &'static str) {
    let session = create_session().await;
    post_message(&session, "m1", "/tool store me").await;
    let c = Client::connect(options(&session, storage));
    let server = converge(&c, &session, 15_000).await;
    let label = c.storage_label();
    c.close();
    (session, server, label)
}

/// The stored value of `session` holds the server's epoch and cursor, and
/// the state at that cursor (read back as a reload reads it).
fn assert_stored(value: Option<String>, server: &serde_json::Value, session: &str) {
    let value = value.expect("a value was stored");
    let stored: serde_json::Value = serde_json::from_str(&value).expect("stored JSON");
    assert_eq!(stored["epoch"], server["epoch"]);
    assert_eq!(stored["cursor"], server["cursor"]);
    let read = Machine::new(Config::session(session), Some(value.as_bytes()), 0);
    assert_eq!(Some(read.cursor()), server["cursor"].as_u64());
    let state = serde_json::to_value(read.transcript().expect("a session's state")).unwrap();
    assert_eq!(state["items"], server["items"], "the state at the cursor");
}

/// The client's restore started from a stored cursor, not from 0 (the
/// `restored` notice says "caught up" then, "loaded … of history" from 0).
fn restored_from_storage(c: &Client) -> bool {
    c.notices()
        .iter()
        .any(|n| n.code == "restored" && n.message.starts_with("caught up"))
}

#[wasm_bindgen_test]
async fn local_storage_keeps_epoch_cursor_and_state_together() {
    let (session, server, label) = follow_and_close(StorageChoice::Local).await;
    assert_eq!(label, "local");
    assert_stored(
        local_storage().get_item(&key(&session)).unwrap(),
        &server,
        &session,
    );
}

#[wasm_bindgen_test]
async fn session_storage_is_used_when_asked() {
    let (session, server, label) = follow_and_close(StorageChoice::Session).await;
    assert_eq!(label, "session");
    assert_stored(
        session_storage().get_item(&key(&session)).unwrap(),
        &server,
        &session,
    );
    assert_eq!(local_storage().get_item(&key(&session)).unwrap(), None);
}

#[wasm_bindgen_test]
async fn memory_storage_writes_nothing() {
    let (session, _server, label) = follow_and_close(StorageChoice::Memory).await;
    assert_eq!(label, "memory");
    assert_eq!(local_storage().get_item(&key(&session)).unwrap(), None);
    assert_eq!(session_storage().get_item(&key(&session)).unwrap(), None);
    let in_idb = JsFuture::from(idb_read(&key(&session))).await.unwrap();
    assert!(in_idb.is_null(), "{in_idb:?}");
}

#[wasm_bindgen_test]
async fn indexeddb_stores_and_restores() {
    let (session, server, label) = follow_and_close(StorageChoice::IndexedDb).await;
    assert_eq!(label, "indexeddb");
    let mut stored = None;
    // The write is asynchronous: poll IndexedDB itself.
    for _ in 0..100 {
        stored = JsFuture::from(idb_read(&key(&session)))
            .await
            .unwrap()
            .as_string();
        if stored.is_some() {
            break;
        }
        sleep(20).await;
    }
    assert_stored(stored, &server, &session);
    // A new client reads it asynchronously: `connecting` meanwhile, then the
    // stored state, then a restore that ends equal to the server.
    let c = Client::connect(options(&session, StorageChoice::IndexedDb));
    assert!(
        c.with_view(|v| v.is_none()),
        "no view before the stored value is read"
    );
    assert!(wait_until(5_000, || has_notice(&c, "restored")).await);
    assert!(
        restored_from_storage(&c),
        "restored from the stored cursor: {:?}",
        c.notices()
    );
    converge(&c, &session, 10_000).await;
    c.close();
}

#[wasm_bindgen_test]
async fn custom_sync_and_async_adapters() {
    for mode in ["sync", "async"] {
        let adapter = make_adapter(mode);
        let (session, server, label) =
            follow_and_close(StorageChoice::Custom(adapter.clone())).await;
        assert_eq!(label, "custom");
        assert_stored(adapter_value(&adapter, &key(&session)), &server, &session);
        // Reconnect through the same adapter: the stored state is used.
        let c = Client::connect(options(&session, StorageChoice::Custom(adapter.clone())));
        assert!(
            wait_until(5_000, || c.position().cursor
                == server["cursor"].as_u64().unwrap())
            .await
        );
        assert!(
            wait_until(5_000, || has_notice(&c, "restored")).await,
            "{mode}"
        );
        assert!(
            restored_from_storage(&c),
            "{mode}: restored from the stored cursor: {:?}",
            c.notices()
        );
        assert!(!has_notice(&c, "corrupt_storage"));
        converge(&c, &session, 10_000).await;
        c.close();
    }
}

#[wasm_bindgen_test]
async fn quota_exceeded_falls_back_to_memory_with_a_notice() {
    for mode in ["quota", "reject"] {
        let adapter = make_adapter(mode);
        let session = create_session().await;
        post_message(&session, "m1", "/tool quota").await;
        let c = Client::connect(options(&session, StorageChoice::Custom(adapter.clone())));
        assert!(
            wait_until(10_000, || has_notice(&c, "storage_fallback")).await,
            "{mode}"
        );
        assert_eq!(c.storage_label(), "memory-fallback");
        converge(&c, &session, 15_000).await;
        let sets = adapter_sets(&adapter);
        post_message(&session, "m2", "more").await;
        converge(&c, &session, 15_000).await;
        assert_eq!(adapter_sets(&adapter), sets, "no writes after the fallback");
        let fallbacks = c
            .notices()
            .iter()
            .filter(|n| n.code == "storage_fallback")
            .count();
        assert_eq!(fallbacks, 1, "one notice");
        c.close();
    }
}

#[wasm_bindgen_test]
async fn corrupt_stored_value_is_discarded_with_a_notice() {
    let session = create_session().await;
    post_message(&session, "m1", "/tool corrupt").await;
    local_storage()
        .set_item(&key(&session), "{\"v\":1,\"epoch\":")
        .unwrap();
    let c = Client::connect(options(&session, StorageChoice::Local));
    assert!(
        has_notice(&c, "corrupt_storage"),
        "notice at once: {:?}",
        c.notices()
    );
    let server = converge(&c, &session, 15_000).await;
    c.close();
    assert_stored(
        local_storage().get_item(&key(&session)).unwrap(),
        &server,
        &session,
    );
}

/// A storage whose `get` never settles does not leave the client
/// `connecting` forever: after `connectTimeoutMs` it starts without the
/// stored value, keeps its state in memory and says so once.
#[wasm_bindgen_test]
async fn a_storage_that_never_answers_falls_back_to_memory_after_the_connect_timeout() {
    let session = create_session().await;
    post_message(&session, "m1", "/tool hang").await;
    let mut o = options(&session, StorageChoice::Custom(make_adapter("hang")));
    o.connect_timeout_ms = 400;
    let c = Client::connect(o);
    assert!(c.with_view(|v| v.is_none()), "still reading the storage");
    assert!(wait_until(5_000, || has_notice(&c, "storage_fallback")).await);
    assert_eq!(c.storage_label(), "memory-fallback");
    converge(&c, &session, 15_000).await;
    let fallbacks = c
        .notices()
        .iter()
        .filter(|n| n.code == "storage_fallback")
        .count();
    assert_eq!(fallbacks, 1);
    c.close();
}

/// The value stored under `key` in `storage` (local or IndexedDB).
async fn stored(storage: &StorageChoice, key: &str) -> Option<String> {
    match storage {
        StorageChoice::IndexedDb => JsFuture::from(idb_read(key)).await.unwrap().as_string(),
        _ => local_storage().get_item(key).unwrap(),
    }
}

/// What another tab does: stores `value` under `key`.
async fn store(storage: &StorageChoice, key: &str, value: &str) {
    match storage {
        StorageChoice::IndexedDb => {
            JsFuture::from(idb_write(key, value)).await.unwrap();
        }
        _ => local_storage().set_item(key, value).unwrap(),
    }
}

fn cursor_of(value: &Option<String>) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(value.as_deref()?).ok()?;
    v["cursor"].as_u64()
}

/// `value` as another tab of the same epoch would have stored it at `cursor`.
fn at_cursor(value: &str, cursor: u64) -> String {
    let mut v: serde_json::Value = serde_json::from_str(value).unwrap();
    v["cursor"] = cursor.into();
    v.to_string()
}

/// Polls the stored cursor for up to `ms`; the first one `until` accepts,
/// else the last seen.
async fn watch_cursor(
    storage: &StorageChoice,
    key: &str,
    ms: u32,
    until: impl Fn(Option<u64>) -> bool,
) -> Option<u64> {
    let start = js_sys::Date::now();
    loop {
        let cursor = cursor_of(&stored(storage, key).await);
        if until(cursor) || js_sys::Date::now() - start > ms as f64 {
            return cursor;
        }
        sleep(25).await;
    }
}

/// Two tabs on one scope share its stored value: a save
/// replaces an older value of the same epoch, never a newer one.
async fn a_save_never_replaces_a_newer_value(storage: StorageChoice) {
    let session = create_session().await;
    post_message(&session, "m1", "first").await;
    let k = key(&session);
    let c = Client::connect(options(&session, storage.clone()));
    converge(&c, &session, 15_000).await;
    let first = watch_cursor(&storage, &k, 5_000, |c| c.is_some()).await;
    assert!(first.is_some(), "the client saved");
    let value = stored(&storage, &k).await.unwrap();

    // Another tab stored an older cursor: the next save replaces it.
    store(&storage, &k, &at_cursor(&value, 1)).await;
    post_message(&session, "m2", "second").await;
    let server = converge(&c, &session, 15_000).await;
    let head = server["cursor"].as_u64().unwrap();
    let replaced = watch_cursor(&storage, &k, 5_000, |c| c == Some(head)).await;
    assert_eq!(replaced, Some(head), "an older stored value is replaced");

    // Another tab is ahead: no save of this one replaces its value, not
    // even the one `close` makes.
    let ahead = head + 1_000;
    store(&storage, &k, &at_cursor(&value, ahead)).await;
    post_message(&session, "m3", "third").await;
    let server = converge(&c, &session, 15_000).await;
    assert!(server["cursor"].as_u64().unwrap() < ahead);
    // Saves come at most once a second (`persist_throttle_ms`).
    let seen = watch_cursor(&storage, &k, 2_500, |c| c != Some(ahead)).await;
    assert_eq!(
        seen,
        Some(ahead),
        "a newer stored value is kept while following"
    );
    c.close();
    let seen = watch_cursor(&storage, &k, 1_000, |c| c != Some(ahead)).await;
    assert_eq!(seen, Some(ahead), "a newer stored value is kept by close");
}

#[wasm_bindgen_test]
async fn local_storage_never_replaces_a_newer_value_another_tab_stored() {
    a_save_never_replaces_a_newer_value(StorageChoice::Local).await;
}

#[wasm_bindgen_test]
async fn indexeddb_never_replaces_a_newer_value_another_tab_stored() {
    a_save_never_replaces_a_newer_value(StorageChoice::IndexedDb).await;
}
