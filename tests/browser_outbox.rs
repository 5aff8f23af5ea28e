//! The outbox in Chromium against a real replay-server: a message sent
//! while the server cannot be reached is shown pending, survives a reload
//! through the storage, and is committed once when a client reaches the
//! server; messages queued together are committed in order; a 4xx fails a
//! message until `retry`; a discarded or expired message is never sent.
//! "The server down" is a client of an address nothing listens on, sharing
//! its storage slot with the client of the live server (the slot ignores
//! the key, which names the base URL).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use js_sys::Object;
use replay_client::core::machine::{PendingMessage, PendingState, Target};
use replay_client::wasm::{Client, Options, StorageChoice};
use serde_json::{json, Value};
use support::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen(inline_js = r#"
export function oneSlot() {
  const slot = { value: null, get() { return slot.value; }, set(_k, v) { slot.value = v; }, remove() { slot.value = null; } };
  return slot;
}
export function idbValue(key) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open("replay-client", 1);
    open.onupgradeneeded = () => open.result.createObjectStore("kv");
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const get = open.result.transaction("kv").objectStore("kv").get(key);
      get.onsuccess = () => { open.result.close(); resolve(get.result ?? null); };
      get.onerror = () => reject(get.error);
    };
  });
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = oneSlot)]
    fn one_slot() -> Object;
    #[wasm_bindgen(js_name = idbValue)]
    fn idb_value(key: &str) -> js_sys::Promise;
}

/// Nothing listens there: every request fails at the transport.
const DOWN: &str = "http://127.0.0.1:9";

fn client(base: &str, session: &str, slot: &Object) -> Client {
    let mut o = Options::session(base, session);
    o.storage = StorageChoice::Custom(slot.clone());
    o.seed = Some(7);
    Client::connect(o)
}

fn pending(c: &Client) -> Vec<(String, PendingState)> {
    c.pending()
        .into_iter()
        .map(|p: PendingMessage| (p.message_id, p.state))
        .collect()
}

/// Sends without waiting for the outcome (it settles when accepted).
fn send(c: &Client, id: &str) {
    let sent = c.send(&format!("text of {id}"), Some(id.to_owned()));
    wasm_bindgen_futures::spawn_local(async move {
        let _ = sent.await;
    });
}

/// The user messages of the server's transcript, by `message_id`.
async fn server_messages(session: &str) -> Vec<String> {
    let t = server_transcript(session).await;
    t["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "message" && i["role"] == "user")
        .map(|i| i["message_id"].as_str().unwrap().to_owned())
        .collect()
}

fn client_messages(c: &Client) -> Vec<String> {
    client_transcript(c)["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "message" && i["role"] == "user")
        .map(|i| i["message_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until `c` shows `ids` committed and nothing pending.
async fn committed(c: &Client, ids: &[&str]) {
    let ok = wait_until(20_000, || {
        c.pending().is_empty() && client_messages(c) == ids.to_vec()
    })
    .await;
    assert!(
        ok,
        "pending {:?}, items {:?}, status {:?}",
        pending(c),
        client_messages(c),
        c.status()
    );
}

#[wasm_bindgen_test]
async fn a_message_sent_with_the_server_down_survives_a_reload_and_is_committed_once() {
    let session = create_session().await;
    let slot = one_slot();
    let down = client(DOWN, &session, &slot);
    send(&down, "out_1");
    assert_eq!(pending(&down).len(), 1, "shown at once");
    assert!(
        wait_until(5_000, || pending(&down)
            == vec![("out_1".to_owned(), PendingState::Queued)])
        .await
    );
    sleep(300).await;
    down.close();
    // A reload, the server still down: still shown, still queued.
    let again = client(DOWN, &session, &slot);
    assert!(wait_until(5_000, || pending(&again).len() == 1).await);
    assert_eq!(pending(&again)[0].0, "out_1");
    sleep(300).await;
    again.close();
    // The server is back: committed once, shown once, pending empty.
    let up = client(server(), &session, &slot);
    committed(&up, &["out_1"]).await;
    assert_eq!(server_messages(&session).await, vec!["out_1"]);
    up.close();
}

/// The value stored in IndexedDB under `key`, or "".
async fn stored_in_idb(key: &str) -> String {
    let v = wasm_bindgen_futures::JsFuture::from(idb_value(key))
        .await
        .unwrap();
    v.as_string().unwrap_or_default()
}

#[wasm_bindgen_test]
async fn two_clients_of_one_session_in_indexeddb_keep_both_their_messages() {
    // Two tabs' clients at one cursor (nothing read yet, the server down):
    // each save merges its outbox into the stored one inside IndexedDB's
    // transaction, so the second save keeps the first client's message.
    let session = create_session().await;
    let idb = |session: &str| {
        let mut o = Options::session(DOWN, session);
        o.storage = StorageChoice::IndexedDb;
        o.seed = Some(7);
        Client::connect(o)
    };
    let key = Target::session(session.as_str()).storage_key(DOWN);
    let first = idb(&session);
    let second = idb(&session);
    send(&first, "idb_a");
    sleep(100).await;
    send(&second, "idb_b");
    let mut stored = String::new();
    for _ in 0..50 {
        stored = stored_in_idb(&key).await;
        if stored.contains("idb_a") && stored.contains("idb_b") {
            break;
        }
        sleep(100).await;
    }
    assert!(
        stored.contains("idb_a") && stored.contains("idb_b"),
        "{stored}"
    );
    first.close();
    second.close();
    sleep(200).await;
    // The next client of the session (a reload of either) shows both.
    let next = idb(&session);
    assert!(
        wait_until(5_000, || pending(&next).len() == 2).await,
        "{:?}",
        pending(&next)
    );
    let ids: Vec<String> = pending(&next).into_iter().map(|p| p.0).collect();
    assert_eq!(ids, vec!["idb_a", "idb_b"]);
    next.close();
}

#[wasm_bindgen_test]
async fn three_messages_queued_while_down_are_committed_in_order() {
    let session = create_session().await;
    let slot = one_slot();
    let down = client(DOWN, &session, &slot);
    for id in ["q1", "q2", "q3"] {
        send(&down, id);
    }
    sleep(300).await;
    down.close();
    let up = client(server(), &session, &slot);
    committed(&up, &["q1", "q2", "q3"]).await;
    assert_eq!(server_messages(&session).await, vec!["q1", "q2", "q3"]);
    up.close();
}

#[wasm_bindgen_test]
async fn a_4xx_fails_the_message_and_a_retry_commits_it_once() {
    let session = create_session().await;
    let c = client(server(), &session, &one_slot());
    // Wait for the client to be live, so the fault meets its send.
    assert!(
        wait_until(10_000, || c.status().state
            == replay_client::core::machine::State::Live)
        .await
    );
    fault(json!({"kind": "fail_requests", "route": "messages", "status": 400, "error": "refused_here"})).await;
    let sent = c.send("text of f1", Some("f1".into()));
    let err = sent.await.expect_err("rejected when failed");
    assert_eq!(err.code(), "refused_here");
    let shown = c.pending();
    assert_eq!(shown[0].state, PendingState::Failed);
    assert_eq!(shown[0].error.as_ref().unwrap().code, "refused_here");
    assert!(server_messages(&session).await.is_empty());
    let turn = c.retry("f1").expect("pending").await.expect("accepted");
    assert!(turn.is_some_and(|t| !t.is_empty()), "a message's turn");
    committed(&c, &["f1"]).await;
    assert_eq!(server_messages(&session).await, vec!["f1"]);
    c.close();
}

#[wasm_bindgen_test]
async fn a_discarded_or_expired_message_is_never_sent() {
    let session = create_session().await;
    let slot = one_slot();
    let mut o = Options::session(DOWN, &session);
    o.storage = StorageChoice::Custom(slot.clone());
    o.outbox_max_age_ms = 500;
    let down = Client::connect(o);
    send(&down, "gone");
    send(&down, "late");
    assert!(wait_until(5_000, || pending(&down).len() == 2).await);
    assert!(down.discard("gone"));
    assert_eq!(pending(&down)[0].0, "late");
    let expired = wait_until(5_000, || {
        down.pending()
            .first()
            .and_then(|p| p.error.clone())
            .is_some_and(|e| e.code == "expired")
    })
    .await;
    assert!(expired, "{:?}", down.pending());
    down.close();
    // A client of the live server: the expired one is shown failed, never sent.
    let up = client(server(), &session, &slot);
    assert!(
        wait_until(10_000, || up.status().state
            == replay_client::core::machine::State::Live)
        .await
    );
    sleep(500).await;
    assert_eq!(
        pending(&up),
        vec![("late".to_owned(), PendingState::Failed)]
    );
    assert!(server_messages(&session).await.is_empty());
    let _: Value = server_transcript(&session).await;
    up.close();
}

#[wasm_bindgen_test]
async fn the_js_view_shows_a_send_in_pending_at_once_and_discard_removes_it() {
    let session = create_session().await;
    let c = connect(json!({"baseUrl": DOWN, "sessionId": session, "storage": "memory"}));
    let before = c.view();
    let _sent = c.send("text of js1".into(), Some("js1".into()));
    // The same tick: no await between the send and the view.
    let after = c.view();
    assert!(!before.loose_eq(&after), "a new snapshot");
    let shown = json_of(&get(&after, "pending"));
    assert_eq!(shown[0]["message_id"], "js1");
    assert_eq!(shown[0]["text"], "text of js1");
    assert!(["queued", "sending"].contains(&shown[0]["state"].as_str().unwrap()));
    assert!(shown[0]["at"].as_f64().unwrap() > 1.6e12, "wall-clock ms");
    assert!(c.discard("js1".into()));
    assert_eq!(json_of(&get(&c.view(), "pending")), json!([]));
    assert!(!c.discard("js1".into()));
    c.close();
}

/// The JS client of `base` over `slot`.
fn js_client(base: &str, session: &str, slot: &Object) -> replay_client::wasm::ReplayClient {
    let o =
        js_sys::JSON::parse(&json!({"baseUrl": base, "sessionId": session}).to_string()).unwrap();
    js_sys::Reflect::set(&o, &"storage".into(), slot).unwrap();
    replay_client::wasm::ReplayClient::connect(o).unwrap()
}

/// The view's first open question, as JSON.
fn first_prompt(c: &replay_client::wasm::ReplayClient) -> Value {
    json_of(&get(&c.view(), "pendingPrompts"))[0].clone()
}

/// The server's `question` items: (question_id, outcome, answer).
async fn server_answers(session: &str) -> Vec<(String, String, String)> {
    let t = server_transcript(session).await;
    (t["items"].as_array().unwrap().iter())
        .filter(|i| i["kind"] == "question")
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or_default().to_owned();
            (s("question_id"), s("outcome"), s("answer"))
        })
        .collect()
}

#[wasm_bindgen_test]
async fn an_answer_given_with_the_server_down_survives_a_reload_and_is_answered_once() {
    let session = create_session().await;
    let slot = one_slot();
    // The question is asked and stored while the server is up.
    let up = js_client(server(), &session, &slot);
    let _asked = up.send("/ask may I".into(), Some("ask_1".into()));
    assert!(wait_until(15_000, || first_prompt(&up)["persisted"] == true).await);
    let question = first_prompt(&up)["question_id"]
        .as_str()
        .unwrap()
        .to_owned();
    sleep(300).await;
    up.close();
    // The server is down: answered; shown on its question at once.
    let down = js_client(DOWN, &session, &slot);
    assert!(
        wait_until(5_000, || first_prompt(&down)["question_id"]
            == question.as_str())
        .await
    );
    let _answered = down.answer(question.clone(), "yes".into());
    let shown = first_prompt(&down)["answer"].clone();
    assert_eq!(shown["text"], "yes", "{shown}");
    assert!(["queued", "sending"].contains(&shown["state"].as_str().unwrap()));
    sleep(300).await;
    down.close();
    // A reload, still down: the answer is still on its question.
    let again = js_client(DOWN, &session, &slot);
    assert!(
        wait_until(5_000, || first_prompt(&again)["answer"]["text"] == "yes").await,
        "{}",
        first_prompt(&again)
    );
    sleep(300).await;
    again.close();
    // The server is back: answered once, the question and its answer gone
    // from the prompts.
    let back = js_client(server(), &session, &slot);
    let done = wait_until(20_000, || {
        json_of(&get(&back.view(), "pendingPrompts")) == json!([])
    })
    .await;
    assert!(done, "{}", json_of(&get(&back.view(), "pendingPrompts")));
    let answers = server_answers(&session).await;
    assert_eq!(answers, vec![(question, "answered".into(), "yes".into())]);
    back.close();
}

/// Asks the server's runtime a question in `c`'s session (`/ask`, message
/// `mid`) and waits for it on a prompt: its id.
async fn asked(c: &replay_client::wasm::ReplayClient, mid: &str, before: Option<&str>) -> String {
    let _asked = c.send(format!("/ask {mid}"), Some(mid.into()));
    let new = |c: &replay_client::wasm::ReplayClient| {
        let p = first_prompt(c);
        p["persisted"] == true && p["question_id"].as_str() != before
    };
    assert!(wait_until(15_000, || new(c)).await, "{}", first_prompt(c));
    first_prompt(c)["question_id"].as_str().unwrap().to_owned()
}

/// Answers `question`; the refused answer's rejection code.
async fn refused_answer(c: &replay_client::wasm::ReplayClient, question: &str) -> String {
    fault(
        json!({"kind": "fail_requests", "route": "answer", "status": 400, "error": "refused_here"}),
    )
    .await;
    let answered = wasm_bindgen_futures::JsFuture::from(c.answer(question.into(), "yes".into()));
    let err = answered.await.expect_err("rejected when failed");
    get(&err, "code").as_string().unwrap_or_default()
}

#[wasm_bindgen_test]
async fn a_refused_answer_fails_with_its_code_and_retry_or_discard_name_it_by_its_question() {
    let session = create_session().await;
    let c = js_client(server(), &session, &one_slot());
    let q1 = asked(&c, "ask_retry", None).await;
    assert_eq!(refused_answer(&c, &q1).await, "refused_here");
    let shown = first_prompt(&c)["answer"].clone();
    assert_eq!(shown["state"], "failed", "{shown}");
    assert_eq!(shown["error"]["code"], "refused_here", "{shown}");
    assert_eq!(shown["error"]["status"], 400, "{shown}");
    assert!(server_answers(&session).await.is_empty());
    // The server takes answers again: `retry` by the question's id.
    let retried = wasm_bindgen_futures::JsFuture::from(c.retry(q1.clone()))
        .await
        .expect("answered");
    assert!(retried.is_undefined(), "an answer names no turn");
    let ended = wait_until(15_000, || first_prompt(&c)["question_id"] != q1.as_str()).await;
    assert!(ended, "{}", first_prompt(&c));
    let once = vec![(q1.clone(), "answered".to_owned(), "yes".to_owned())];
    assert_eq!(server_answers(&session).await, once);
    // Another question, its answer refused, then discarded: gone from its
    // prompt, the question still open, nothing more sent.
    let q2 = asked(&c, "ask_discard", Some(&q1)).await;
    assert_eq!(refused_answer(&c, &q2).await, "refused_here");
    assert!(c.discard(q2.clone()));
    let prompt = first_prompt(&c);
    assert_eq!(prompt["question_id"], q2.as_str(), "{prompt}");
    assert!(prompt.get("answer").is_none(), "{prompt}");
    assert!(!c.discard(q2.clone()), "nothing left to discard");
    sleep(1_000).await;
    assert_eq!(server_answers(&session).await, once, "nothing sent for q2");
    assert_eq!(first_prompt(&c)["question_id"], q2.as_str());
    c.close();
}
