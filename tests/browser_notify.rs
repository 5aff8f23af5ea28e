//! Notification pacing and status of the JS `ReplayClient` in Chromium
//! against a real replay-server.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Function};
use replay_client::wasm::ReplayClient;
use serde_json::json;
use support::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen(inline_js = r#"
let frames = 0;
let running = false;
export function startFrameCounter() {
  if (running) return;
  running = true;
  const tick = () => { frames += 1; requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
}
export function frameCount() { return frames; }
// A page whose frames never come although it is visible, as in a
// display:none iframe: requestAnimationFrame takes callbacks and never
// calls them.
let realRaf = null;
export function stopFrames() {
  realRaf = globalThis.requestAnimationFrame;
  globalThis.requestAnimationFrame = () => 1;
}
export function restartFrames() {
  if (realRaf) globalThis.requestAnimationFrame = realRaf;
}
// A hidden page: visibilityState says so (and the event is sent), and its
// frame callbacks wait until it shows again (run by showPage).
let waiting = [];
export function hidePage() {
  realRaf = globalThis.requestAnimationFrame;
  globalThis.requestAnimationFrame = (f) => waiting.push(f);
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
  document.dispatchEvent(new Event("visibilitychange"));
}
export function showPage() {
  delete document.visibilityState;
  globalThis.requestAnimationFrame = realRaf;
  document.dispatchEvent(new Event("visibilitychange"));
  const due = waiting;
  waiting = [];
  for (const f of due) f(performance.now());
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = startFrameCounter)]
    fn start_frame_counter();
    #[wasm_bindgen(js_name = frameCount)]
    fn frame_count() -> u32;
    #[wasm_bindgen(js_name = stopFrames)]
    fn stop_frames();
    #[wasm_bindgen(js_name = restartFrames)]
    fn restart_frames();
    #[wasm_bindgen(js_name = hidePage)]
    fn hide_page();
    #[wasm_bindgen(js_name = showPage)]
    fn show_page();
}

fn turn_ended(client: &ReplayClient) -> bool {
    json_of(&get(&client.view(), "items"))
        .as_array()
        .is_some_and(|a| a.iter().any(|i| i["kind"] == "turn_end"))
}

/// A client of a new session, stored in memory, live, its notifications
/// counted (the counter's subscription is the last value).
async fn live_and_counted() -> (String, ReplayClient, Rc<Cell<u32>>, Function) {
    let session = create_session().await;
    let client = connect(json!({"baseUrl": server(), "sessionId": session, "storage": "memory"}));
    let (calls, off) = counter(&client);
    assert!(
        wait_until(10_000, || get(&client.view(), "status.state")
            .as_string()
            .as_deref()
            == Some("live"))
        .await
    );
    (session, client, calls, off)
}

#[wasm_bindgen_test]
async fn a_visible_page_whose_frames_never_come_still_follows() {
    let (session, client, calls, _off) = live_and_counted().await;
    stop_frames();
    let heard = calls.get();
    post_message(&session, "m1", "/long 600 in a frameless page").await;
    let followed = wait_until(10_000, || turn_ended(&client)).await;
    let notified = calls.get() > heard;
    restart_frames();
    assert!(followed, "the answer reached the view");
    assert!(notified, "subscribers were called");
    client.close();
}

#[wasm_bindgen_test]
async fn a_hidden_page_follows_and_its_subscribers_hear_when_it_shows() {
    let (session, client, calls, _off) = live_and_counted().await;
    hide_page();
    let heard = calls.get();
    post_message(&session, "m1", "/long 600 while hidden").await;
    let followed = wait_until(10_000, || turn_ended(&client)).await;
    sleep(300).await;
    let heard_hidden = calls.get() - heard;
    show_page();
    let heard_shown = calls.get() - heard;
    assert!(followed, "the answer reached the view while hidden");
    assert_eq!(heard_hidden, 0, "no frame, no call, while hidden");
    assert_eq!(heard_shown, 1, "one call when the page shows");
    client.close();
}

#[wasm_bindgen_test]
async fn subscribers_hear_at_most_once_per_frame() {
    start_frame_counter();
    let session = create_session().await;
    let client = connect(json!({"baseUrl": server(), "sessionId": session, "storage": "memory"}));
    let (calls, off) = counter(&client);
    let frames_before = frame_count();
    post_message(&session, "m1", "/long 1200 many deltas").await;
    let ended = || {
        json_of(&get(&client.view(), "items"))
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["kind"] == "turn_end"))
    };
    assert!(wait_until(20_000, ended).await);
    sleep(50).await;
    let frames = frame_count() - frames_before;
    assert!(calls.get() >= 2, "notified: {}", calls.get());
    assert!(
        calls.get() <= frames + 1,
        "{} notifications in {frames} frames",
        calls.get()
    );
    let counters = json_of(&get(&client.diagnostics(), "counters"));
    assert!(
        counters["events"].as_u64().unwrap() > calls.get() as u64 * 2,
        "{counters} vs {}",
        calls.get()
    );
    off.call0(&JsValue::UNDEFINED).unwrap();
    let heard = calls.get();
    post_message(&session, "m2", "after unsubscribe").await;
    let count = |v: &JsValue| Array::from(&get(v, "items")).length();
    let n = count(&client.view());
    assert!(wait_until(15_000, || count(&client.view()) > n).await);
    assert_eq!(calls.get(), heard, "unsubscribed listeners hear nothing");
    client.close();
}

#[wasm_bindgen_test]
async fn notify_every_n_ms_paces_subscribers() {
    let session = create_session().await;
    let client = connect(
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "notify": 250}),
    );
    let (calls, _off) = counter(&client);
    let start = js_sys::Date::now();
    post_message(&session, "m1", "/long 1200 paced").await;
    let ended = || {
        json_of(&get(&client.view(), "items"))
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["kind"] == "turn_end"))
    };
    assert!(wait_until(20_000, ended).await);
    sleep(300).await;
    let elapsed = js_sys::Date::now() - start;
    let bound = (elapsed / 250.0).ceil() as u32 + 1;
    assert!(calls.get() >= 1);
    assert!(
        calls.get() <= bound,
        "{} notifications in {elapsed} ms",
        calls.get()
    );
    client.close();
}

fn state(c: &ReplayClient) -> Option<String> {
    get(&c.view(), "status.state").as_string()
}

#[wasm_bindgen_test]
async fn view_status_follows_retries_during_restore_and_live() {
    let session = create_session().await;
    fault(json!({"kind": "fail_requests", "route": "replay", "status": 503, "count": 2})).await;
    let client = connect(
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "notify": "sync", "seed": 3}),
    );
    let (calls, _off) = counter(&client);
    let retrying = || json_of(&get(&client.view(), "status"))["lastError"]["status"] == 503;
    assert!(
        wait_until(5_000, retrying).await,
        "{}",
        json_of(&get(&client.view(), "status"))
    );
    let status = json_of(&get(&client.view(), "status"));
    // The replay waits to be retried: shown as such, not as "restoring".
    assert_eq!(status["state"], "backoff", "{status}");
    assert!(status["nextRetryAt"].as_f64().is_some(), "{status}");
    assert!(calls.get() >= 1, "a retry is worth a notification");
    assert!(wait_until(15_000, || state(&client).as_deref() == Some("live")).await);
    // Live, then the stream breaks and is refused: backoff, then live again.
    fault(json!({"kind": "fail_requests", "route": "stream", "status": 503, "count": 2})).await;
    fault(json!({"kind": "close_streams"})).await;
    assert!(wait_until(5_000, || state(&client).as_deref() == Some("backoff")).await);
    assert!(json_of(&get(&client.view(), "status"))["nextRetryAt"]
        .as_f64()
        .is_some());
    assert!(wait_until(15_000, || state(&client).as_deref() == Some("live")).await);
    client.close();
}
