//! The JS surface (`ReplayClient`) in Chromium against a real
//! replay-server: errors, snapshots, close, writes, followers.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "browser_support/mod.rs"]
mod support;

use js_sys::{Array, Object};
use replay_client::core::machine::{Config, Notify, Target};
use replay_client::wasm::{Options, ReplayClient, StorageChoice};
use serde_json::json;
use support::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::wasm_bindgen_test;

fn assert_replay_error(e: &JsValue, code: &str) {
    assert!(
        e.is_instance_of::<js_sys::Error>(),
        "an Error instance: {e:?}"
    );
    assert_eq!(get(e, "name").as_string().as_deref(), Some("ReplayError"));
    assert_eq!(get(e, "code").as_string().as_deref(), Some(code));
}

#[wasm_bindgen_test]
fn invalid_options_throw_a_replay_error() {
    let url = server();
    let session = |extra: serde_json::Value| {
        let mut o = json!({"baseUrl": url, "sessionId": "s"});
        o.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        o
    };
    for (bad, why) in [
        (json!("nope"), "options must be an object"),
        (json!({}), "baseUrl must be a non-empty string"),
        (json!({"baseUrl": ""}), "baseUrl must be a non-empty string"),
        // Without a scheme or as a path it would be resolved against the page.
        (
            json!({"baseUrl": "127.0.0.1:8787", "sessionId": "s"}),
            r#"baseUrl must be an absolute http:// or https:// URL, e.g. "http://127.0.0.1:8787" (got "127.0.0.1:8787")"#,
        ),
        (
            json!({"baseUrl": "/api", "sessionId": "s"}),
            r#"baseUrl must be an absolute http:// or https:// URL, e.g. "http://127.0.0.1:8787" (got "/api")"#,
        ),
        (json!({"baseUrl": url, "scope": "planet"}), "unknown scope"),
        (
            json!({"baseUrl": url}),
            "sessionId or scopeId is required for this scope",
        ),
        (
            json!({"baseUrl": url, "scope": "team", "sessionId": "s"}),
            "sessionId or scopeId is required for this scope",
        ),
        (
            session(json!({"prefetchDepth": -1})),
            "prefetchDepth must be a number >= 0",
        ),
        (session(json!({"seed": null})), "seed must be a number >= 0"),
        (
            session(json!({"connectTimeoutMs": "5"})),
            "connectTimeoutMs must be a number >= 0",
        ),
        (
            session(json!({"headers": {"x-a": 1}})),
            "headers values must be strings",
        ),
        (
            session(json!({"headers": "x"})),
            "headers must be an object",
        ),
        (
            session(json!({"getToken": 1})),
            "getToken must be a function",
        ),
        (
            session(json!({"credentials": "always"})),
            r#"credentials must be "omit", "same-origin" or "include""#,
        ),
        (session(json!({"fetch": 1})), "fetch must be a function"),
        (
            session(json!({"multiplex": "yes"})),
            "multiplex must be a boolean",
        ),
        (
            session(json!({"outboxMaxAgeMs": -1})),
            "outboxMaxAgeMs must be a number >= 0",
        ),
        (session(json!({"storage": "disk"})), "unknown storage kind"),
        (
            session(json!({"storage": {"get": 1}})),
            "storage must be a kind or an object with get, set and remove",
        ),
        (
            session(json!({"notify": "often"})),
            "notify must be \"frame\", \"sync\" or a number",
        ),
        (
            session(json!({"notify": -5})),
            "notify must be \"frame\", \"sync\" or a number",
        ),
    ] {
        let o = js_sys::JSON::parse(&bad.to_string()).unwrap();
        match ReplayClient::connect(o) {
            Err(e) => {
                assert_replay_error(&e, "invalid_options");
                assert_eq!(
                    get(&e, "message").as_string().unwrap(),
                    format!("invalid options: {why}"),
                    "{bad}"
                );
            }
            Ok(_) => panic!("accepted {bad}"),
        }
    }
    // Defaults and the scopes that need no id.
    for (good, scope, scope_id) in [
        (
            session(json!({"storage": "memory", "notify": 16, "seed": 7})),
            "session",
            "s",
        ),
        (
            json!({"baseUrl": url, "scopeId": "t", "scope": "team", "storage": "memory"}),
            "team",
            "t",
        ),
        (
            json!({"baseUrl": url, "scope": "system", "storage": "memory"}),
            "system",
            "runtime",
        ),
        (
            json!({"baseUrl": url, "scope": "global", "storage": "memory"}),
            "global",
            "",
        ),
    ] {
        let client = connect(good.clone());
        let view = client.view();
        assert_eq!(
            get(&view, "scope").as_string().as_deref(),
            Some(scope),
            "{good}"
        );
        assert_eq!(
            get(&view, "scopeId").as_string().as_deref(),
            Some(scope_id),
            "{good}"
        );
        client.close();
    }
}

/// Each name of `ConnectOptions` arrives as the setting it names (the
/// options cross from JS to Rust by name).
#[wasm_bindgen_test]
fn named_options_reach_the_client() {
    let url = server();
    // Every name at once, each with a value that is not its default: a name
    // read as another (or not read) leaves the default and fails here.
    let o = js_sys::JSON::parse(
        &json!({
            "baseUrl": "http://127.0.0.1:1/",
            "scope": "process",
            "scopeId": "proc_9",
            "headers": {"x-a": "1"},
            "credentials": "include",
            "storage": "indexeddb",
            "notify": 25,
            "connectTimeoutMs": 1234,
            "prefetchDepth": 5,
            "outboxMaxAgeMs": 5678,
            "tail": 7,
            "seed": 42,
            "multiplex": true,
        })
        .to_string(),
    )
    .unwrap();
    for f in ["getToken", "fetch"] {
        let body = js_sys::Function::new_no_args("return 't'");
        js_sys::Reflect::set(&o, &f.into(), &body).unwrap();
    }
    let opts = Options::from_js(&o).unwrap_or_else(|e| panic!("{e}"));
    let defaults = Options::new("http://127.0.0.1:1", Target::Global);
    assert_eq!(opts.base_url, "http://127.0.0.1:1");
    assert_eq!(opts.target.key(), "process:proc_9");
    assert_eq!(opts.headers, vec![("x-a".to_owned(), "1".to_owned())]);
    assert_eq!(opts.credentials.as_str(), "include");
    assert!(matches!(opts.storage, StorageChoice::IndexedDb));
    assert_eq!(opts.notify, Notify::Every(25));
    assert_eq!(opts.connect_timeout_ms, 1234);
    assert_eq!(opts.prefetch_depth, 5);
    assert_eq!(opts.outbox_max_age_ms, 5678);
    assert_eq!(opts.tail, 7);
    assert_eq!(opts.seed, Some(42));
    assert!(opts.multiplex);
    assert!(opts.get_token.is_some());
    assert!(opts.fetch.is_some());
    assert!(opts.cross_origin, "another origin than the test page");
    assert_ne!(opts.notify, defaults.notify);
    assert_ne!(opts.connect_timeout_ms, defaults.connect_timeout_ms);
    assert_ne!(opts.prefetch_depth, defaults.prefetch_depth);
    assert_ne!(opts.outbox_max_age_ms, defaults.outbox_max_age_ms);
    assert!(defaults.seed.is_none() && !defaults.multiplex);
    // `sessionId` names the session's scope id.
    let o =
        js_sys::JSON::parse(&json!({"baseUrl": url, "sessionId": "ses_9"}).to_string()).unwrap();
    let opts = Options::from_js(&o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(opts.target.key(), "session:ses_9");
    // Left out, `tail` is the core's default; 0 reads the whole history.
    assert_eq!(opts.tail, Config::DEFAULT_TAIL);
    assert_eq!(defaults.tail, Config::DEFAULT_TAIL);
    let o = js_sys::JSON::parse(&json!({"baseUrl": url, "sessionId": "s", "tail": 0}).to_string())
        .unwrap();
    assert_eq!(
        Options::from_js(&o).unwrap_or_else(|e| panic!("{e}")).tail,
        0
    );
    for (scope, scope_id) in [
        ("process", "proc_1"),
        ("worktree", "wt_1"),
        ("session", "s"),
    ] {
        let client = connect(
            json!({"baseUrl": url, "scope": scope, "scopeId": scope_id, "storage": "memory"}),
        );
        let view = client.view();
        assert_eq!(get(&view, "scope").as_string().as_deref(), Some(scope));
        assert_eq!(get(&view, "scopeId").as_string().as_deref(), Some(scope_id));
        client.close();
    }
    let adapter = Object::new();
    for method in ["get", "set", "remove"] {
        let f = js_sys::Function::new_no_args("return null");
        js_sys::Reflect::set(&adapter, &method.into(), &f).unwrap();
    }
    for (storage, label) in [
        (JsValue::UNDEFINED, "local"),
        ("local".into(), "local"),
        ("session".into(), "session"),
        ("indexeddb".into(), "indexeddb"),
        ("memory".into(), "memory"),
        (adapter.into(), "custom"),
    ] {
        let o =
            js_sys::JSON::parse(&json!({"baseUrl": url, "sessionId": "s"}).to_string()).unwrap();
        js_sys::Reflect::set(&o, &"storage".into(), &storage).unwrap();
        let client = ReplayClient::connect(o).unwrap_or_else(|e| panic!("connect: {e:?}"));
        let diag = json_of(&client.diagnostics());
        assert_eq!(diag["storage"], label, "{storage:?}");
        client.close();
    }
}

#[wasm_bindgen_test]
async fn view_is_one_frozen_object_until_something_changed() {
    let session = create_session().await;
    let client = connect(
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "notify": "sync"}),
    );
    let first = client.view();
    assert!(Object::is_frozen(first.unchecked_ref::<Object>()));
    assert!(
        Object::is(&first, &client.view()),
        "same object while nothing changed"
    );
    post_message(&session, "m1", "/tool one").await;
    let done = || {
        get(&client.view(), "status.state").as_string().as_deref() == Some("live")
            && json_of(&get(&client.view(), "items"))
                .as_array()
                .is_some_and(|a| a.len() >= 4)
    };
    assert!(wait_until(15_000, done).await);
    let before = client.view();
    let first_item = Array::from(&get(&before, "items")).get(0);
    post_message(&session, "m2", "two").await;
    let grew = || {
        Array::from(&get(&client.view(), "items")).length()
            > Array::from(&get(&before, "items")).length()
    };
    assert!(wait_until(15_000, grew).await);
    let after = client.view();
    assert!(
        !Object::is(&before, &after),
        "a new snapshot after a change"
    );
    assert!(
        Object::is(&first_item, &Array::from(&get(&after, "items")).get(0)),
        "unchanged items keep their object"
    );
    assert!(Object::is_frozen(
        get(&after, "items").unchecked_ref::<Object>()
    ));
    client.close();
}

#[wasm_bindgen_test]
async fn close_dispatches_nothing_more() {
    let session = create_session().await;
    let opts =
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "notify": "sync"});
    let control = connect(opts.clone());
    let closed = connect(opts);
    let (control_calls, _) = counter(&control);
    let (closed_calls, _) = counter(&closed);
    let live =
        |c: &ReplayClient| get(&c.view(), "status.state").as_string().as_deref() == Some("live");
    assert!(wait_until(5_000, || live(&control) && live(&closed)).await);
    closed.close();
    closed.close();
    let heard = closed_calls.get();
    assert_eq!(
        get(&closed.view(), "status.state").as_string().as_deref(),
        Some("stopped")
    );
    let control_heard = control_calls.get();
    post_message(&session, "m1", "/tool after close").await;
    let ended = || {
        json_of(&get(&control.view(), "items"))
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["kind"] == "turn_end"))
    };
    assert!(
        wait_until(15_000, ended).await,
        "the control client saw the turn"
    );
    assert!(control_calls.get() > control_heard);
    assert_eq!(
        closed_calls.get(),
        heard,
        "nothing dispatched after close()"
    );
    assert_eq!(json_of(&get(&closed.view(), "items")), json!([]));
    match JsFuture::from(closed.send("late".to_owned(), None)).await {
        Err(e) => assert_replay_error(&e, "closed"),
        Ok(v) => panic!("send after close resolved: {v:?}"),
    }
    control.close();
}

#[wasm_bindgen_test]
async fn js_writes_transcript_and_diagnostics() {
    let session = create_session().await;
    let client = connect(
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "connectTimeoutMs": 5000}),
    );
    let reply = JsFuture::from(client.send("/ask may I".to_owned(), Some("msg_js".to_owned())))
        .await
        .unwrap();
    assert!(get(&reply, "turnId")
        .as_string()
        .is_some_and(|t| !t.is_empty()));
    let prompt = || {
        let prompts = json_of(&get(&client.view(), "pendingPrompts"));
        prompts
            .as_array()
            .and_then(|p| p.first())
            .map(|p| p["question_id"].as_str().unwrap().to_owned())
    };
    assert!(
        wait_until(15_000, || prompt().is_some()).await,
        "a pending question shows"
    );
    let question = prompt().unwrap();
    JsFuture::from(client.answer(question, "yes".to_owned()))
        .await
        .unwrap();
    // The answer lets the turn end; the client shows the server's transcript.
    let mut server = json!(null);
    for _ in 0..300 {
        server = server_transcript(&session).await;
        let done = server["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "turn_end");
        if done && json_of(&client.transcript().unwrap())["items"] == server["items"] {
            break;
        }
        sleep(50).await;
    }
    assert_eq!(
        json_of(&client.transcript().unwrap())["items"],
        server["items"],
        "the answered turn ended and the client shows it"
    );
    assert!(
        server["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "turn_end"),
        "the answered turn ended: {server}"
    );
    assert_eq!(
        json_of(&client.transcript().unwrap())["cursor"],
        server["cursor"]
    );
    let diag = json_of(&client.diagnostics());
    assert_eq!(diag["storage"], "memory");
    assert_eq!(diag["epoch"], server["epoch"]);
    assert!(diag["bootId"].is_string(), "{diag}");
    assert!(diag["counters"]["bytes"].as_u64().unwrap() > 0);
    client.close();
}

#[wasm_bindgen_test]
async fn a_process_scope_follower_shows_its_events_and_has_no_transcript() {
    let session = create_session().await;
    post_message(&session, "m1", "/bg work").await;
    let mut process = None;
    for _ in 0..300 {
        let t = server_transcript(&session).await;
        process = t["tasks"]["tasks"][0]["process_id"]
            .as_str()
            .map(str::to_owned);
        if process.is_some() {
            break;
        }
        sleep(50).await;
    }
    let process = process.expect("the background task's process");
    let follower = connect(
        json!({"baseUrl": server(), "scope": "process", "scopeId": process, "storage": "memory"}),
    );
    let types = || {
        json_of(&get(&follower.view(), "events"))
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e["type"].as_str().unwrap_or("").to_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(20_000, || types().iter().any(|t| t == "process.exited")).await,
        "{:?}",
        types()
    );
    assert_eq!(types()[0], "process.started");
    assert_eq!(
        get(&follower.view(), "scope").as_string().as_deref(),
        Some("process")
    );
    match follower.transcript() {
        Err(e) => assert_replay_error(&e, "invalid_options"),
        Ok(_) => panic!("transcript of a process scope"),
    }
    follower.close();
}

#[wasm_bindgen_test]
async fn a_multi_page_restore_paints_the_whole_transcript() {
    // Over one replay page (2000), with a tool card started on the first page
    // and completed on the second: the JS items (converted while pages
    // arrived, see src/wasm/stage.rs and its deterministic unit test) must
    // end up exactly as the server's transcript.
    let session = create_session().await;
    for i in 0..2040u32 {
        let (ty, data) = match i {
            1995 => (
                "tool.started",
                json!({"turn_id": "t1", "call_id": "c1", "name": "sh", "input": {"cmd": "ls"}}),
            ),
            2010 => (
                "tool.completed",
                json!({"turn_id": "t1", "call_id": "c1", "status": "ok", "output": "done"}),
            ),
            _ => (
                "message.committed",
                json!({"message_id": format!("m{i}"), "turn_id": "t1", "role": "user", "text": format!("é {i}")}),
            ),
        };
        let body = json!({"scope": "session", "scope_id": session, "type": ty, "data": data});
        let (status, reply) = call("POST", "/v1/admin/events", Some(body)).await;
        assert!(status < 300, "append: {reply}");
    }
    let expected = server_transcript(&session).await;
    let head = expected["cursor"].as_u64().unwrap();
    // The default window of prefetched pages, and none at all.
    for options in [
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory"}),
        json!({"baseUrl": server(), "sessionId": session, "storage": "memory", "prefetchDepth": 0}),
    ] {
        let client = connect(options.clone());
        let (notified, _off) = counter(&client);
        let live = || {
            let v = client.view();
            get(&v, "status.state").as_string().as_deref() == Some("live")
                && get(&v, "cursor").as_f64() == Some(head as f64)
        };
        assert!(
            wait_until(20_000, live).await,
            "restored and live: {options}"
        );
        assert_eq!(json_of(&get(&client.view(), "items")), expected["items"]);
        // Subscribers hear once per animation frame: let that frame (and a
        // few more) pass before counting.
        assert!(
            wait_until(2_000, || notified.get() > 0).await,
            "told: {options}"
        );
        sleep(100).await;
        assert_eq!(notified.get(), 1, "one repaint for the restore: {options}");
        client.close();
    }
}

/// `ReplayClient.connect` with `getToken` set to a JS function of `body`.
fn connect_with_token(session: &str, body: &str) -> ReplayClient {
    let options = json!({"baseUrl": server(), "sessionId": session, "storage": "memory"});
    let o = js_sys::JSON::parse(&options.to_string()).unwrap();
    js_sys::Reflect::set(&o, &"getToken".into(), &js_sys::Function::new_no_args(body)).unwrap();
    ReplayClient::connect(o).unwrap_or_else(|e| panic!("connect: {e:?}"))
}

fn token_calls() -> f64 {
    get(&js_sys::global(), "tokenCalls").as_f64().unwrap_or(0.0)
}

#[wasm_bindgen_test]
async fn a_js_get_token_is_called_for_every_request() {
    let session = create_session().await;
    js_sys::Reflect::set(&js_sys::global(), &"tokenCalls".into(), &0.into()).unwrap();
    let client = connect_with_token(
        &session,
        "globalThis.tokenCalls++; return Promise.resolve('token-' + globalThis.tokenCalls);",
    );
    let live = || get(&client.status(), "state").as_string().as_deref() == Some("live");
    assert!(wait_until(5_000, live).await);
    let before = token_calls();
    assert!(before >= 2.0, "stream and replay each asked: {before}");
    JsFuture::from(client.send("with a token".into(), None))
        .await
        .unwrap();
    assert_eq!(token_calls(), before + 1.0, "the write asked once more");
    client.close();
}

/// The stream's requests fail with `unauthorized` and are retried (the
/// application may sign in again); a write rejects with the same.
#[wasm_bindgen_test]
async fn a_failing_js_get_token_is_reported_as_the_last_error() {
    let session = create_session().await;
    for (body, expected) in [
        (
            "throw new Error('signed out')",
            "getToken failed: signed out",
        ),
        (
            "return Promise.reject(new Error('expired'))",
            "getToken failed: expired",
        ),
        (
            "return 42",
            "getToken failed: getToken must return a string",
        ),
    ] {
        let client = connect_with_token(&session, body);
        let reported = || {
            let status = client.status();
            get(&status, "lastError.code").as_string().as_deref() == Some("unauthorized")
                && get(&status, "lastError.message").as_string().as_deref() == Some(expected)
                && get(&status, "state").as_string().as_deref() != Some("failed")
        };
        assert!(
            wait_until(5_000, reported).await,
            "{body}: {:?}",
            json_of(&client.status())
        );
        let rejected = JsFuture::from(client.send("no token".into(), None))
            .await
            .unwrap_err();
        assert_replay_error(&rejected, "unauthorized");
        assert_eq!(
            get(&rejected, "message").as_string().as_deref(),
            Some(expected)
        );
        client.close();
    }
}

#[wasm_bindgen_test]
async fn a_view_during_a_restore_shows_one_moment_of_the_session() {
    // The stored state is read asynchronously (IndexedDB) and the restore's
    // requests fail: views built meanwhile must not pair the stored cursor
    // with the items of the view built before the state was read (seen in
    // the shared host: cursor 7, no items, `backoff`).
    let session = create_session().await;
    post_message(&session, "m1", "/tool before the reload").await;
    // The turn's end: the server's cursor stops moving.
    let mut expected = server_transcript(&session).await;
    loop {
        sleep(300).await;
        let now = server_transcript(&session).await;
        if now["cursor"] == expected["cursor"] {
            break;
        }
        expected = now;
    }
    let head = expected["cursor"].as_f64().unwrap();
    let options = json!({"baseUrl": server(), "sessionId": session, "storage": "indexeddb"});
    let first = connect(options.clone());
    let live = |c: &ReplayClient| {
        let v = c.view();
        get(&v, "status.state").as_string().as_deref() == Some("live")
            && get(&v, "cursor").as_f64() == Some(head)
    };
    assert!(
        wait_until(15_000, || live(&first)).await,
        "first client live"
    );
    first.close();
    sleep(300).await;
    fault(json!({"kind": "clear"})).await;
    for route in ["replay", "events", "stream"] {
        fault(json!({"kind": "fail_requests", "route": route, "status": 503, "count": 50})).await;
    }
    let second = connect(options);
    let first_view = second.view();
    let backoff = || get(&second.view(), "status.state").as_string().as_deref() == Some("backoff");
    let waited = wait_until(10_000, backoff).await;
    let during = second.view();
    fault(json!({"kind": "clear"})).await;
    assert!(waited, "the failing restore backs off");
    let shown = |v: &JsValue| {
        let items = get(v, "items").unchecked_into::<Array>().length();
        (get(v, "cursor").as_f64().unwrap(), items)
    };
    let (cursor, items) = shown(&during);
    assert!(
        (cursor, items) == shown(&first_view) || (cursor == head && items > 0),
        "one moment: cursor {cursor} with {items} items (first view {:?}, head {head})",
        shown(&first_view)
    );
    let went_live = wait_until(20_000, || live(&second)).await;
    let v = second.view();
    assert!(
        went_live,
        "live once the server answers: {} cursor {:?}",
        json_of(&get(&v, "status")),
        get(&v, "cursor").as_f64()
    );
    assert_eq!(json_of(&get(&second.view(), "items")), expected["items"]);
    second.close();
}
