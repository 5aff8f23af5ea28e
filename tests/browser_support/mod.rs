//! Helpers of the `browser_*` suites: the server's address (baked in at
//! build time), raw HTTP calls to it, fault injection and bounded waits.
#![allow(dead_code)]

use js_sys::{Promise, Reflect};
use serde_json::Value;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use std::cell::Cell;
use std::rc::Rc;

use js_sys::Function;
use replay_client::core::machine::Target;
use replay_client::wasm::{Client, Options, ReplayClient, StorageChoice};

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = fetch)]
    fn fetch_with_init(url: &str, init: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(f: &js_sys::Function, ms: i32) -> JsValue;
}

/// The reference server the suites run against.
pub fn server() -> &'static str {
    // Checked at run time so the suites still compile without a server.
    match option_env!("REPLAY_SERVER_URL") {
        Some(url) => url,
        None => panic!(
            "REPLAY_SERVER_URL must be set at build time to a replay-server started with \
             --faults --allow-origin '*' (cargo xtask test does this)"
        ),
    }
}

/// Resolves after `ms`.
pub async fn sleep(ms: i32) {
    let p = Promise::new(&mut |resolve, _| {
        set_timeout(&resolve, ms);
    });
    JsFuture::from(p).await.unwrap();
}

/// Polls `cond` every 20 ms for at most `ms`; returns whether it held.
pub async fn wait_until(ms: u32, mut cond: impl FnMut() -> bool) -> bool {
    let start = js_sys::Date::now();
    loop {
        if cond() {
            return true;
        }
        if js_sys::Date::now() - start > ms as f64 {
            return false;
        }
        sleep(20).await;
    }
}

/// `method path` with an optional JSON body; returns status and JSON body.
pub async fn call(method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let init = js_sys::Object::new();
    Reflect::set(&init, &"method".into(), &method.into()).unwrap();
    if let Some(b) = body {
        let headers = js_sys::Object::new();
        Reflect::set(&headers, &"Content-Type".into(), &"application/json".into()).unwrap();
        Reflect::set(&init, &"headers".into(), &headers).unwrap();
        Reflect::set(&init, &"body".into(), &b.to_string().into()).unwrap();
    }
    let url = server().to_owned() + path;
    let resp: web_sys::Response = JsFuture::from(fetch_with_init(&url, &init))
        .await
        .expect("server reachable")
        .unchecked_into();
    let text = JsFuture::from(resp.text().unwrap()).await.unwrap();
    let text = text.as_string().unwrap_or_default();
    (
        resp.status(),
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// A fresh session's id.
pub async fn create_session() -> String {
    let (status, body) = call(
        "POST",
        "/v1/sessions",
        Some(serde_json::json!({"title": "t"})),
    )
    .await;
    assert_eq!(status, 201, "create session: {body}");
    body["session_id"].as_str().unwrap().to_owned()
}

/// Posts a user message outside any client (the server starts a turn).
pub async fn post_message(session: &str, id: &str, text: &str) -> String {
    let path = format!("/v1/sessions/{session}/messages");
    let body = serde_json::json!({"message_id": id, "text": text});
    let (status, reply) = call("POST", &path, Some(body)).await;
    assert_eq!(status, 202, "post message: {reply}");
    reply["turn_id"].as_str().unwrap().to_owned()
}

/// Switches a fault on (`POST /v1/admin/faults`).
pub async fn fault(spec: Value) -> Value {
    let (status, reply) = call("POST", "/v1/admin/faults", Some(spec.clone())).await;
    assert_eq!(status, 201, "fault {spec}: {reply}");
    reply
}

/// The server's own transcript of a session (the oracle).
pub async fn server_transcript(session: &str) -> Value {
    let (status, body) = call("GET", &format!("/v1/sessions/{session}/transcript"), None).await;
    assert_eq!(status, 200, "transcript: {body}");
    body
}

/// The client's transcript as JSON.
pub fn client_transcript(c: &Client) -> Value {
    serde_json::to_value(c.transcript().unwrap_or_default()).unwrap()
}

/// Waits until the client's committed items and cursor equal the server's
/// and the server has no running turn; returns the last server transcript.
pub async fn converge(c: &Client, session: &str, ms: u32) -> Value {
    let start = js_sys::Date::now();
    loop {
        let server = server_transcript(session).await;
        let mine = client_transcript(c);
        let settled = server["items"]
            .as_array()
            .and_then(|items| items.last())
            .is_some_and(|last| last["kind"] == "turn_end");
        if settled && mine["items"] == server["items"] && mine["cursor"] == server["cursor"] {
            return server;
        }
        if js_sys::Date::now() - start > ms as f64 {
            panic!(
                "client did not converge: status {:?}\nclient {mine}\nserver {server}",
                c.status()
            );
        }
        sleep(50).await;
    }
}

/// Options for a session with the given storage, a fixed seed and fast
/// notifications.
pub fn options(session: &str, storage: StorageChoice) -> Options {
    let mut o = Options::session(server(), session);
    o.storage = storage;
    o.seed = Some(7);
    o
}

/// True when a notice with this code was seen.
pub fn has_notice(c: &Client, code: &str) -> bool {
    c.notices().iter().any(|n| n.code == code)
}

/// `localStorage`.
pub fn local_storage() -> web_sys::Storage {
    Reflect::get(&js_sys::global(), &"localStorage".into())
        .unwrap()
        .unchecked_into()
}

/// The storage key the client uses for a session.
pub fn key(session: &str) -> String {
    Target::session(session).storage_key(server())
}

/// A tiny deterministic generator for fault offsets.
pub struct Rng(pub u64);

impl Rng {
    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

// The JS surface (`ReplayClient`), as the JS suites drive it.

/// `v.a.b` (undefined when absent).
pub fn get(v: &JsValue, path: &str) -> JsValue {
    path.split('.').fold(v.clone(), |o, k| {
        Reflect::get(&o, &k.into()).unwrap_or(JsValue::UNDEFINED)
    })
}

/// A JS value as JSON.
pub fn json_of(v: &JsValue) -> Value {
    let text = js_sys::JSON::stringify(v).unwrap().as_string().unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `ReplayClient.connect(options)`; panics on a bad option.
pub fn connect(options: Value) -> ReplayClient {
    let o = js_sys::JSON::parse(&options.to_string()).unwrap();
    ReplayClient::connect(o).unwrap_or_else(|e| panic!("connect: {e:?}"))
}

/// Subscribes a counter of notifications; returns it and the unsubscribe function.
pub fn counter(client: &ReplayClient) -> (Rc<Cell<u32>>, Function) {
    let n = Rc::new(Cell::new(0));
    let m = n.clone();
    let f = Closure::<dyn FnMut()>::new(move || m.set(m.get() + 1)).into_js_value();
    let off = client.subscribe(f.unchecked_into());
    (n, off.unchecked_into())
}
