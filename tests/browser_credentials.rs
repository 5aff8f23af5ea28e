//! Cookie-authenticated runtimes and the `fetch` option, in Chromium
//! against real replay-servers: a page following a runtime at another
//! origin that takes its token as the `replay_token` cookie goes live with
//! `credentials: "include"`, and without it fails with a 401 whose message
//! names that option; a `fetch` option carries every request a client makes.
//!
//! The cookie is the page's own `document.cookie`: cookies belong to a
//! host, not to a port, so one set by this page (`127.0.0.1:A`) goes with a
//! credentialed request to the runtime at `127.0.0.1:B`, as a session
//! cookie of an app's own login would (`cargo xtask test` starts that
//! runtime with `--token`, `--allow-credentials` and this page's origin,
//! which it fixes through `WASM_BINDGEN_TEST_ADDRESS`).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use js_sys::{Function, Object, Promise, Reflect};
use replay_client::wasm::ReplayClient;
use support::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

/// The runtime that takes the `replay_token` cookie (another origin).
fn credentials_server() -> &'static str {
    // Checked at run time so the suites still compile without the server.
    match option_env!("REPLAY_CREDENTIALS_URL") {
        Some(url) => url,
        None => panic!(
            "REPLAY_CREDENTIALS_URL must be set at build time to a replay-server started with \
             --token, --allow-credentials and this page's --allow-origin (cargo xtask test does this)"
        ),
    }
}

/// Its `--token`.
fn credentials_token() -> &'static str {
    match option_env!("REPLAY_CREDENTIALS_TOKEN") {
        Some(token) => token,
        None => panic!("REPLAY_CREDENTIALS_TOKEN must be set at build time (cargo xtask test)"),
    }
}

/// Sets (or with `None` expires) this page's `replay_token` cookie.
fn set_cookie(token: Option<&str>) {
    let document = Reflect::get(&js_sys::global(), &"document".into()).unwrap();
    let cookie = match token {
        Some(t) => format!("replay_token={t}; path=/"),
        None => "replay_token=; path=/; max-age=0".to_owned(),
    };
    Reflect::set(&document, &"cookie".into(), &cookie.into()).unwrap();
}

/// A session of the cookie runtime, created with the page's cookie.
async fn create_cookie_session() -> String {
    let init = js(&[
        ("method", "POST".into()),
        ("credentials", "include".into()),
        (
            "headers",
            js(&[("Content-Type", "application/json".into())]).into(),
        ),
        ("body", r#"{"title":"cookie"}"#.into()),
    ]);
    let url = credentials_server().to_owned() + "/v1/sessions";
    let fetch: Function = Reflect::get(&js_sys::global(), &"fetch".into())
        .unwrap()
        .unchecked_into();
    let answer = fetch
        .call2(&JsValue::UNDEFINED, &url.into(), &init)
        .unwrap();
    let r: web_sys::Response = JsFuture::from(Promise::from(answer))
        .await
        .unwrap()
        .unchecked_into();
    assert_eq!(r.status(), 201, "the page's cookie creates a session");
    let body = JsFuture::from(r.json().unwrap()).await.unwrap();
    get(&body, "session_id").as_string().unwrap()
}

/// A JS object of these properties.
fn js(pairs: &[(&str, JsValue)]) -> Object {
    let o = Object::new();
    for (k, v) in pairs {
        Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    o
}

/// `ReplayClient.connect` following `session` at `base` with `extra` options.
fn connect_with(base: &str, session: &str, extra: &[(&str, JsValue)]) -> ReplayClient {
    let o = js(&[
        ("baseUrl", base.into()),
        ("sessionId", session.into()),
        ("storage", "memory".into()),
        ("notify", "sync".into()),
        ("seed", 7.into()),
    ]);
    for (k, v) in extra {
        Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    ReplayClient::connect(o.into()).unwrap_or_else(|e| panic!("connect: {e:?}"))
}

fn state(c: &ReplayClient) -> String {
    get(&c.view(), "status.state")
        .as_string()
        .unwrap_or_default()
}

/// The view's items end with the end of a turn.
fn turn_ended(c: &ReplayClient) -> bool {
    let items: js_sys::Array = get(&c.view(), "items").unchecked_into();
    let last = items.get(items.length().wrapping_sub(1));
    !last.is_undefined() && get(&last, "kind").as_string().as_deref() == Some("turn_end")
}

/// Sends `text` and waits for its turn's end in the view.
async fn send_and_see_the_end(c: &ReplayClient, text: &str) {
    let turn = JsFuture::from(c.send(text.to_owned(), None))
        .await
        .unwrap_or_else(|e| panic!("send: {}", json_of(&e)));
    assert!(get(&turn, "turnId").as_string().is_some(), "a turn id");
    assert!(
        wait_until(15_000, || turn_ended(c)).await,
        "the turn's end shows: {}",
        json_of(&c.view())
    );
}

#[wasm_bindgen_test]
async fn a_cookie_reaches_a_runtime_at_another_origin_with_credentials_include() {
    set_cookie(Some(credentials_token()));
    let session = create_cookie_session().await;
    let client = connect_with(
        credentials_server(),
        &session,
        &[("credentials", "include".into())],
    );
    assert!(
        wait_until(10_000, || state(&client) == "live").await,
        "live with the cookie: {}",
        json_of(&client.view())
    );
    send_and_see_the_end(&client, "/tool with a cookie").await;
    // The multiplexed stream carries it too.
    let shared = connect_with(
        credentials_server(),
        &session,
        &[
            ("credentials", "include".into()),
            ("multiplex", true.into()),
        ],
    );
    assert!(
        wait_until(10_000, || state(&shared) == "live").await,
        "multiplexed with the cookie: {}",
        json_of(&shared.view())
    );
    assert_eq!(
        get(&shared.diagnostics(), "transport")
            .as_string()
            .as_deref(),
        Some("multiplexed")
    );
    shared.close();
    client.close();
    set_cookie(None);
}

#[wasm_bindgen_test]
async fn without_credentials_the_401_names_the_fix() {
    set_cookie(Some(credentials_token()));
    let session = create_cookie_session().await;
    // The cookie is there, but fetch's default sends it to this page's origin only.
    let client = connect_with(credentials_server(), &session, &[]);
    assert!(
        wait_until(10_000, || state(&client) == "failed").await,
        "failed: {}",
        json_of(&client.view())
    );
    let error = get(&client.view(), "status.lastError");
    assert_eq!(
        get(&error, "code").as_string().as_deref(),
        Some("unauthorized")
    );
    assert_eq!(get(&error, "status").as_f64(), Some(401.0));
    let message = get(&error, "message").as_string().unwrap();
    assert!(
        message.starts_with("unauthorized (HTTP 401)")
            && message.contains(r#"credentials: "include""#),
        "{message}"
    );
    assert!(message.contains("getToken"), "{message}");
    let notices: js_sys::Array = get(&client.view(), "notices").unchecked_into();
    let named = notices.iter().any(|n| {
        get(&n, "code").as_string().as_deref() == Some("unauthorized")
            && get(&n, "message")
                .as_string()
                .is_some_and(|m| m.contains(r#"credentials: "include""#))
    });
    assert!(named, "a notice names the fix: {}", json_of(&notices));
    let status = client.status();
    assert!(
        get(&status, "lastError.message")
            .as_string()
            .is_some_and(|m| m.contains(r#"credentials: "include""#)),
        "status(): {}",
        json_of(&status)
    );
    client.close();
    // A same-origin runtime would have had the cookie: no hint for a
    // client that sends credentials and still gets a 401.
    set_cookie(Some("wrong"));
    let included = connect_with(
        credentials_server(),
        &session,
        &[("credentials", "include".into())],
    );
    assert!(wait_until(10_000, || state(&included) == "failed").await);
    let message = get(&included.view(), "status.lastError.message")
        .as_string()
        .unwrap();
    assert!(!message.contains("credentials:"), "{message}");
    included.close();
    set_cookie(None);
}

/// A `fetch` option that counts each request by kind in `seen`, and a
/// global `fetch` that counts the requests that bypass it.
struct Counted {
    seen: Object,
    fetch: Function,
    global: Function,
}

impl Counted {
    fn install() -> Counted {
        let seen = Object::new();
        let make = Function::new_with_args(
            "seen",
            r#"
            const original = globalThis.fetch;
            const count = (name) => { seen[name] = (seen[name] ?? 0) + 1; };
            seen.credentials = [];
            globalThis.fetch = (url, init) => (count("global"), original(url, init));
            return [original, (url, init) => {
              const path = new URL(url).pathname;
              const accept = new Headers(init?.headers).get("accept") ?? "";
              if (init?.mode === "no-cors") count("probe");
              else if (path === "/v1/stream") { count("multiplexed"); seen.credentials.push(init.credentials); }
              else if (accept.includes("event-stream")) count("stream");
              else if (init?.method === "POST") count("post");
              else count("json");
              return original(url, init);
            }];
            "#,
        );
        let pair: js_sys::Array = make
            .call1(&JsValue::UNDEFINED, &seen)
            .unwrap()
            .unchecked_into();
        Counted {
            seen,
            global: pair.get(0).unchecked_into(),
            fetch: pair.get(1).unchecked_into(),
        }
    }

    fn count(&self, kind: &str) -> u32 {
        get(&self.seen, kind).as_f64().unwrap_or(0.0) as u32
    }

    fn uninstall(&self) {
        Reflect::set(&js_sys::global(), &"fetch".into(), &self.global).unwrap();
    }
}

#[wasm_bindgen_test]
async fn a_fetch_option_carries_every_request() {
    let session = create_session().await;
    let counted = Counted::install();
    let fetch = || ("fetch", JsValue::from(counted.fetch.clone()));
    let client = connect_with(server(), &session, &[fetch()]);
    // Two clients of one multiplexed stream each per credentials mode.
    let mux = connect_with(server(), &session, &[fetch(), ("multiplex", true.into())]);
    let omit = [
        fetch(),
        ("multiplex", true.into()),
        ("credentials", "omit".into()),
    ];
    let mux_omit = connect_with(server(), &session, &omit);
    let all = [&client, &mux, &mux_omit];
    assert!(
        wait_until(10_000, || all.iter().all(|c| state(c) == "live")).await,
        "live: {}",
        json_of(&counted.seen)
    );
    send_and_see_the_end(&client, "/tool through the fetch option").await;
    assert!(wait_until(10_000, || turn_ended(&mux) && turn_ended(&mux_omit)).await);
    for c in all {
        c.close();
    }
    counted.uninstall();
    let seen = json_of(&counted.seen);
    assert_eq!(
        counted.count("global"),
        0,
        "every request went through the option: {seen}"
    );
    for kind in ["stream", "json", "post", "multiplexed"] {
        assert!(counted.count(kind) >= 1, "{kind}: {seen}");
    }
    // Clients of other credentials do not share a multiplexed stream.
    let modes = &seen["credentials"];
    for mode in ["same-origin", "omit"] {
        assert!(
            modes.as_array().unwrap().iter().any(|m| m == mode),
            "a multiplexed stream with credentials {mode}: {seen}"
        );
    }
}

#[wasm_bindgen_test]
async fn bad_credentials_or_fetch_options_are_refused() {
    for (name, value) in [
        ("credentials", JsValue::from("cookies")),
        ("fetch", JsValue::from("fetch")),
    ] {
        let o = js(&[
            ("baseUrl", server().into()),
            ("sessionId", "ses_x".into()),
            (name, value),
        ]);
        let err = ReplayClient::connect(o.into()).err().expect("refused");
        assert_eq!(
            get(&err, "code").as_string().as_deref(),
            Some("invalid_options")
        );
        let message = get(&err, "message").as_string().unwrap();
        assert!(message.contains(name), "{message}");
    }
}

/// A `getToken` whose promise settles later is awaited before each request
/// and its token sent: this runtime refuses every request without it, so
/// going live, reading the backlog and a committed write each show it (a
/// request sent before the token came, or without it, would get 401).
#[wasm_bindgen_test]
async fn a_js_get_token_is_awaited_and_its_token_sent_with_every_request() {
    set_cookie(Some(credentials_token()));
    let session = create_cookie_session().await;
    // From here on only the token authenticates.
    set_cookie(None);
    Reflect::set(&js_sys::global(), &"tokenCalls".into(), &0.into()).unwrap();
    let get_token = Function::new_no_args(&format!(
        "globalThis.tokenCalls++; \
         return new Promise((resolve) => setTimeout(() => resolve({:?}), 30));",
        credentials_token()
    ));
    let client = connect_with(
        credentials_server(),
        &session,
        &[("getToken", get_token.into())],
    );
    assert!(
        wait_until(10_000, || state(&client) == "live").await,
        "live with the awaited token: {}",
        json_of(&client.status())
    );
    let calls = || {
        Reflect::get(&js_sys::global(), &"tokenCalls".into())
            .unwrap()
            .as_f64()
            .unwrap_or(0.0)
    };
    let before = calls();
    assert!(
        before >= 2.0,
        "the stream and the backlog each asked: {before}"
    );
    send_and_see_the_end(&client, "with an awaited token").await;
    assert!(calls() > before, "the write asked too");
    client.close();
}
