//! Writes, the scripted agent, auth, CORS, static files and bad input, over
//! real HTTP on loopback.

mod common;

use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Event, Role};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_retry_is_idempotent() {
    let s = server().await;
    let sid = s.create_session().await;
    // Concurrent and sequential retries of one message_id: one turn.
    let body = json!({"message_id": "m-1", "text": "hello"});
    let path = format!("/v1/sessions/{sid}/messages");
    let (a, b) = tokio::join!(s.post(&path, body.clone()), s.post(&path, body.clone()));
    assert_eq!(a.0, StatusCode::ACCEPTED);
    assert_eq!(a.1["turn_id"], b.1["turn_id"]);
    let turn = a.1["turn_id"].as_str().unwrap().to_owned();
    s.wait_turn_end(&sid, &turn).await;
    assert_eq!(s.send(&sid, "m-1", "hello").await, turn);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events = s.events(&format!("sessions/{sid}")).await;
    let started = events
        .iter()
        .filter(|e| matches!(e.event, Event::TurnStarted(_)))
        .count();
    assert_eq!(started, 1);
    let (_, tr) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    let users: Vec<&Value> = tr["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1);
    // A new id starts a new turn.
    assert_ne!(s.send(&sid, "m-2", "again").await, turn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_rebuild_the_committed_reply_with_scalar_offsets() {
    let s = server().await;
    let sid = s.create_session().await;
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    sse.until(SEC, |f| is_type(f, "tasks.snapshot"))
        .await
        .unwrap();
    let turn = s.send(&sid, "m1", "write /long 700").await;
    let mut text = String::new();
    let committed = loop {
        let f = sse.next(5 * SEC).await.expect("frames");
        match f.env().map(|e| &e.event) {
            Some(Event::TurnDelta(d)) => {
                assert_eq!(d.offset, text.chars().count() as u64, "offset in scalars");
                text.push_str(&d.text);
            }
            Some(Event::MessageCommitted(m)) if m.role == Role::Assistant => break m.text.clone(),
            _ => {}
        }
    };
    assert_eq!(committed.chars().count(), 700);
    assert_eq!(text, committed);
    assert!(
        text.chars().any(|c| c.len_utf16() == 2),
        "emoji exercise offsets"
    );
    assert!(text.contains('é') || text.contains('ï') || text.contains('ç') || text.contains('ñ'));
    s.wait_turn_end(&sid, &turn).await;
    // The live overlay is gone after the commit.
    let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert!(r["live_turn"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_turn_is_bounded_and_revs_increase() {
    let s = server_with(|c| c.delta_ms = 0).await;
    let sid = s.create_session().await;
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    sse.until(SEC, |f| is_type(f, "tasks.snapshot"))
        .await
        .unwrap();
    s.send(&sid, "m1", "/long 40000 /ask").await;
    // While waiting for the answer, the overlay holds the bounded tail.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last_rev = 0;
    let lt = loop {
        let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
        let lt = r["live_turn"].clone();
        if lt.is_object() {
            let rev = lt["rev"].as_u64().unwrap();
            assert!(rev >= last_rev, "rev never goes back");
            last_rev = rev;
            if lt["state"] == "waiting_for_answer" {
                break lt;
            }
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let text = lt["text"].as_str().unwrap();
    assert_eq!(text.chars().count(), 16_384);
    // 20 000 scalars streamed before the question; the head was cut.
    assert_eq!(lt["text_offset"], 20_000 - 16_384);
    let mut revs = Vec::new();
    for f in sse.collect_for(Duration::from_millis(300)).await {
        if let Some(Event::LiveTurnSnapshot(l)) = f.env().map(|e| &e.event) {
            revs.push(l.live_turn.as_ref().map_or(0, |l| l.rev));
        }
    }
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "{revs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_is_live_first_then_persisted_then_answered() {
    let s = server_with(|c| c.ask_persist_ms = 400).await;
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "/ask").await;
    // First only in live_turn.
    let deadline = Instant::now() + Duration::from_secs(5);
    let qid = loop {
        let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
        if let Some(q) = r["live_turn"]["pending_question"]["question_id"].as_str() {
            let persisted = r["history"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == "question.asked");
            assert!(!persisted, "not persisted yet");
            break q.to_owned();
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    s.wait_event(&format!("sessions/{sid}"), |e| {
        matches!(e.event, Event::QuestionAsked(_))
    })
    .await;
    let (_, tr) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["pending_prompts"][0]["question_id"], qid.as_str());
    assert_eq!(tr["pending_prompts"][0]["persisted"], true);
    // Unknown question: 404; the right one: 200 once committed; again: 409.
    let answer = |q: String| {
        let s = &s;
        let sid = sid.clone();
        async move {
            s.post(
                &format!("/v1/sessions/{sid}/questions/{q}/answer"),
                json!({"answer": "yes"}),
            )
            .await
        }
    };
    assert_eq!(answer("q_nope".into()).await.0, StatusCode::NOT_FOUND);
    // The answer reply, byte for byte (key order included).
    let r = s
        .http
        .post(s.url(&format!("/v1/sessions/{sid}/questions/{qid}/answer")))
        .json(&json!({"answer": "yes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.text().await.unwrap(),
        format!(r#"{{"question_id":"{qid}","status":"answered"}}"#)
    );
    let events = s.events(&format!("sessions/{sid}")).await;
    assert!(events
        .iter()
        .any(|e| matches!(&e.event, Event::QuestionAnswered(a) if a.answer == "yes")));
    assert!(matches!(
        s.wait_turn_end(&sid, &turn).await.event,
        Event::TurnCompleted(_)
    ));
    let (st, v) = answer(qid).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("question_closed"))
    );
    let (_, tr) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["pending_prompts"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_and_cancel_end_turns_without_promoting_partial_text() {
    let s = server().await;
    let sid = s.create_session().await;
    let t1 = s.send(&sid, "m1", "/fail").await;
    let end = s.wait_turn_end(&sid, &t1).await;
    assert!(matches!(&end.event, Event::TurnFailed(f) if f.reason == "scripted_failure"));

    let t2 = s.send(&sid, "m2", "/slow /long 2000 /tool").await;
    s.wait_event(
        &format!("sessions/{sid}"),
        |e| matches!(&e.event, Event::TurnStarted(t) if t.turn_id == t2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (st, v) = s
        .post(&format!("/v1/sessions/{sid}/cancel"), json!({}))
        .await;
    assert_eq!(
        (st, v["turn_id"].as_str()),
        (StatusCode::ACCEPTED, Some(t2.as_str()))
    );
    assert!(matches!(
        s.wait_turn_end(&sid, &t2).await.event,
        Event::TurnCancelled(_)
    ));
    let (_, tr) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    let items = tr["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["role"] != "assistant"), "{tr}");
    let outcomes: Vec<&str> = items
        .iter()
        .filter(|i| i["kind"] == "turn_end")
        .map(|i| i["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, vec!["failed", "cancelled"]);
    // Nothing running: cancel is still accepted and names no turn.
    let (st, v) = s
        .post(&format!("/v1/sessions/{sid}/cancel"), json!({}))
        .await;
    assert_eq!(
        (st, v["turn_id"].clone()),
        (StatusCode::ACCEPTED, Value::Null)
    );
}

/// A cancel that names a turn stops only that turn: a retried cancel of a
/// turn that already ended must not stop the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_naming_another_turn_stops_nothing() {
    let s = server().await;
    let sid = s.create_session().await;
    let t1 = s.send(&sid, "m1", "/slow /long 2000").await;
    s.wait_event(
        &format!("sessions/{sid}"),
        |e| matches!(&e.event, Event::TurnStarted(t) if t.turn_id == t1),
    )
    .await;
    let (st, v) = s
        .post(
            &format!("/v1/sessions/{sid}/cancel"),
            json!({"turn_id": "turn_earlier"}),
        )
        .await;
    assert_eq!(
        (st, v["turn_id"].clone()),
        (StatusCode::ACCEPTED, Value::Null)
    );
    let (st, v) = s
        .post(
            &format!("/v1/sessions/{sid}/cancel"),
            json!({"turn_id": t1}),
        )
        .await;
    assert_eq!(
        (st, v["turn_id"].as_str()),
        (StatusCode::ACCEPTED, Some(t1.as_str()))
    );
    assert!(matches!(
        s.wait_turn_end(&sid, &t1).await.event,
        Event::TurnCancelled(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_emits_process_events_and_log() {
    let s = server().await;
    let sid = s.create_session().await;
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    let t = s.send(&sid, "m1", "/tool").await;
    s.wait_turn_end(&sid, &t).await;
    let frames = sse.collect_for(Duration::from_millis(300)).await;
    let progress = frames
        .iter()
        .filter(|f| is_type(f, "turn.tool_progress"))
        .count();
    assert!(progress > 0);
    for f in frames.iter().filter(|f| is_type(f, "turn.tool_progress")) {
        assert!(!f.env().unwrap().critical, "tool progress is droppable");
    }
    let (_, tr) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    let tool = tr["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool["status"], "ok");
    let (_, procs) = s.get("/v1/diagnostics/processes").await;
    let pid = procs["processes"][0]["process_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pe = s.events(&format!("processes/{pid}")).await;
    assert!(matches!(pe[0].event, Event::ProcessStarted(_)));
    assert!(matches!(pe[1].event, Event::ProcessExited(ref x) if x.code == 0));
    let (st, log) = s.get(&format!("/v1/processes/{pid}/log")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(log["text"], tool["output"]);
    let (_, tail) = s.get(&format!("/v1/processes/{pid}/log?offset=5")).await;
    assert_eq!(tail["offset"], 5);
    // The log reply, byte for byte (key order included).
    let full = log["text"].as_str().unwrap();
    let raw = s
        .http
        .get(s.url(&format!("/v1/processes/{pid}/log?offset=5")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        raw,
        format!(
            r#"{{"next_offset":{},"offset":5,"process_id":{},"state":"exited","text":{}}}"#,
            full.len(),
            json!(pid),
            json!(full[5..]),
        )
    );
    assert!(log["text"]
        .as_str()
        .unwrap()
        .ends_with(tail["text"].as_str().unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_task_outlives_the_turn() {
    let s = server_with(|c| c.bg_ms = 600).await;
    let sid = s.create_session().await;
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    let t = s.send(&sid, "m1", "index /bg").await;
    s.wait_turn_end(&sid, &t).await;
    let mut versions = Vec::new();
    let mut saw_wait = false;
    let done = sse
        .until(5 * SEC, |f| {
            matches!(f.env().map(|e| &e.event), Some(Event::TasksSnapshot(t))
                if !t.tasks.is_empty() && t.tasks.iter().all(|t| t.state == replay_core::protocol::TaskState::Succeeded))
        })
        .await;
    assert!(done.is_some(), "task finished after the turn");
    let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert!(r["tasks"]["background_wait"].is_null());
    assert_eq!(r["tasks"]["tasks"][0]["state"], "succeeded");
    // Replay of the stream's snapshots: versions increase, and a wait was shown.
    let mut sse = s
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    for f in sse.collect_for(Duration::from_millis(200)).await {
        if let Some(Event::TasksSnapshot(t)) = f.env().map(|e| &e.event) {
            versions.push(t.version);
        }
    }
    assert_eq!(versions.len(), 1, "a reconnect gets the current snapshot");
    let (_, v) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert!(v["tasks"]["version"].as_u64().unwrap() >= 3);
    // The wait was visible between the turn end and the task end.
    let s2 = s.create_session().await;
    let mut sse = s.stream(&format!("/v1/sessions/{s2}/events"), None).await;
    let t2 = s.send(&s2, "m1", "/bg").await;
    s.wait_turn_end(&s2, &t2).await;
    for f in sse.collect_for(Duration::from_millis(1000)).await {
        if let Some(Event::TasksSnapshot(t)) = f.env().map(|e| &e.event) {
            saw_wait |= t.background_wait.is_some();
        }
    }
    assert!(saw_wait);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_when_configured() {
    let s = server_with(|c| c.token = Some("sekret".into())).await;
    let url = s.url("/v1/diagnostics");
    let r = s.http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "unauthorized");
    let r = s.http.get(&url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = s.http.get(&url).bearer_auth("sekret").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = s
        .http
        .post(s.url("/v1/sessions"))
        .json(&json!({"title": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = s
        .http
        .get(s.url("/v1/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_and_exposed_headers() {
    let s = server_with(|c| {
        c.allow_origins = vec!["http://app.test".into()];
        c.token = Some("t".into());
    })
    .await;
    let r = s
        .http
        .request(Method::OPTIONS, s.url("/v1/sessions/ses_1/events"))
        .header("origin", "http://app.test")
        .header("access-control-request-method", "GET")
        .header(
            "access-control-request-headers",
            "authorization, last-event-id",
        )
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "preflight needs no token: {}",
        r.status()
    );
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "http://app.test");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    for want in [
        "authorization",
        "last-event-id",
        "content-type",
        "accept",
        "cache-control",
    ] {
        assert!(allowed.contains(want), "{allowed}");
    }
    assert_eq!(h["access-control-max-age"], "600");
    let r = s
        .http
        .get(s.url("/v1/diagnostics"))
        .header("origin", "http://app.test")
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(exposed.contains("retry-after") && exposed.contains("content-type"));
    // Another origin gets no allow-origin.
    let r = s
        .http
        .request(Method::OPTIONS, s.url("/v1/diagnostics"))
        .header("origin", "http://evil.test")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_json_error_and_writes_nothing() {
    let s = server().await;
    let sid = s.create_session().await;
    let global_head = || async {
        let (_, v) = s.get("/v1/events").await;
        v["head"].as_u64().unwrap()
    };
    let before = global_head().await;
    let raw = |method: Method, path: String, body: Vec<u8>| {
        let req = s
            .http
            .request(method, s.url(&path))
            .header("content-type", "application/json")
            .body(body);
        async move {
            let r = req.send().await.unwrap();
            let status = r.status();
            let ct = r
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned());
            let v: Value = r.json().await.unwrap_or(Value::Null);
            (status, ct, v)
        }
    };
    let msgs = format!("/v1/sessions/{sid}/messages");
    let cases: Vec<(Method, String, Vec<u8>, StatusCode, &str)> = vec![
        (
            Method::POST,
            msgs.clone(),
            b"{not json".to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        (
            Method::POST,
            msgs.clone(),
            br#"{"text":"no id"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        (
            Method::POST,
            msgs.clone(),
            br#"{"message_id":"","text":"x"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_message_id",
        ),
        (
            Method::POST,
            msgs.clone(),
            format!(r#"{{"message_id":"big","text":"{}"}}"#, "x".repeat(100_000)).into_bytes(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            Method::POST,
            "/v1/sessions".into(),
            b"[1,2]".to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        (
            Method::POST,
            "/v1/sessions/ses_nope/messages".into(),
            br#"{"message_id":"a","text":"b"}"#.to_vec(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::POST,
            "/v1/sessions/ses_nope/cancel".into(),
            vec![],
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/sessions/ses_nope/replay".into(),
            vec![],
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/sessions/ses_nope/events".into(),
            vec![],
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/sessions/ses_nope/transcript".into(),
            vec![],
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/processes/nope/log".into(),
            vec![],
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/v1/nothing/here".into(),
            vec![],
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::DELETE,
            format!("/v1/sessions/{sid}/replay"),
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::GET,
            msgs.clone(),
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::PUT,
            "/v1/sessions".into(),
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::GET,
            format!("/v1/sessions/{sid}/replay?after_cursor=x"),
            vec![],
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
        ),
        (
            Method::GET,
            format!("/v1/sessions/{sid}/events?limit=-2"),
            vec![],
            StatusCode::BAD_REQUEST,
            "invalid_limit",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (st, ct, v) = raw(method.clone(), path.clone(), body).await;
        assert_eq!(st, status, "{method} {path}: {v}");
        assert_eq!(ct.as_deref(), Some("application/json"), "{method} {path}");
        assert_eq!(v["error"], code, "{method} {path}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // A client given `…/v1` as its base URL asks for `/v1/v1/…`: the 404
    // says how to fix it.
    let (st, _, v) = raw(Method::GET, format!("/v1/v1/sessions/{sid}/replay"), vec![]).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/v1 twice") && message.contains("baseUrl"),
        "{v}"
    );
    let (_, _, v) = raw(Method::GET, "/v1/nothing/here".into(), vec![]).await;
    assert_eq!(
        v["message"], "no such endpoint",
        "no hint where it does not apply"
    );
    assert_eq!(global_head().await, before, "nothing written");
    // Admin routes do not exist without --faults.
    let plain = server_with(|c| c.faults = false).await;
    let (st, _) = plain
        .post("/v1/admin/faults", json!({"kind": "clear"}))
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_and_diagnostics() {
    let dir =
        std::env::temp_dir().join(format!("replay-static-{}", replay_server::util::entropy()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>demo</h1>").unwrap();
    let d = dir.to_str().unwrap().to_owned();
    let s = server_with(|c| {
        c.static_dir = Some(d);
        c.token = Some("t".into());
    })
    .await;
    let r = s.http.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "static files need no token");
    assert_eq!(r.text().await.unwrap(), "<h1>demo</h1>");
    for path in [
        "/v1/diagnostics",
        "/v1/diagnostics/recovery",
        "/v1/diagnostics/processes",
        "/v1/diagnostics/comms",
    ] {
        let r = s
            .http
            .get(s.url(path))
            .bearer_auth("t")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let v: Value = r.json().await.unwrap();
        assert!(v.is_object(), "{path}");
    }
    let r = s
        .http
        .get(s.url("/v1/diagnostics"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(v["boot_id"].as_str().unwrap().starts_with("b_"));
    assert_eq!(v["boots"], 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--static` serves as a CDN serves a site: gzip when asked, validators
/// (`ETag`, a match answered 304), HTML revalidated on every visit and the
/// rest reused for `--static-max-age` seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_are_gzipped_with_validators_and_cache_headers() {
    let dir =
        std::env::temp_dir().join(format!("replay-static-{}", replay_server::util::entropy()));
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>demo</h1>").unwrap();
    let wasm: Vec<u8> = (0..64 * 1024).map(|i| (i % 7) as u8).collect();
    std::fs::write(dir.join("pkg/index_bg.wasm"), &wasm).unwrap();
    let d = dir.to_str().unwrap().to_owned();
    let s = server_with(|c| {
        c.static_dir = Some(d);
        c.static_max_age = 600;
    })
    .await;
    // Without reqwest's own decompression, to see what went on the wire.
    let http = reqwest::Client::builder().no_gzip().build().unwrap();
    let get = |path: &str, tag: Option<&str>| {
        let mut req = http
            .get(s.url(path))
            .header("accept-encoding", "gzip, deflate, br");
        if let Some(tag) = tag {
            req = req.header("if-none-match", tag);
        }
        req.send()
    };
    let r = get("/pkg/index_bg.wasm", None).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let h = r.headers().clone();
    assert_eq!(h["content-encoding"], "gzip", "{h:?}");
    assert_eq!(h["cache-control"], "public, max-age=600");
    assert!(h.contains_key("last-modified"));
    let tag = h["etag"].to_str().unwrap().to_owned();
    let body = r.bytes().await.unwrap();
    assert!(body.len() < wasm.len() / 4, "gzipped: {} bytes", body.len());
    let r = get("/pkg/index_bg.wasm", Some(&tag)).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), tag);
    assert_eq!(r.headers()["cache-control"], "public, max-age=600");
    let r = get("/pkg/index_bg.wasm", Some("W/\"other\""))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "another tag: the file");
    // The page: revalidated each time, by its own tag.
    let r = get("/", None).await.unwrap();
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let tag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(r.text().await.unwrap(), "<h1>demo</h1>");
    let r = get("/", Some(&tag)).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    // A client that kept only the date (no tag) revalidates by it.
    let modified = h["last-modified"].to_str().unwrap();
    let r = http
        .get(s.url("/pkg/index_bg.wasm"))
        .header("if-modified-since", modified)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "by date");
    assert_eq!(r.headers()["cache-control"], "public, max-age=600");
    // A tag that differs wins over a matching date (RFC 9110 §13.2.2).
    let r = http
        .get(s.url("/pkg/index_bg.wasm"))
        .header("if-none-match", "W/\"other\"")
        .header("if-modified-since", modified)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the tag decides");
    let _ = std::fs::remove_dir_all(&dir);
}
