//! What one client can make the server hold is bounded in bytes and count
//! (issue 26): queued turns, page and transcript bytes, bytes buffered per
//! subscriber, subscriptions per client, admin scope ids. Real server over
//! loopback HTTP.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const SEC: Duration = Duration::from_secs(1);

async fn post_message(s: &Server, sid: &str, mid: &str, text: &str) -> reqwest::Response {
    s.http
        .post(s.url(&format!("/v1/sessions/{sid}/messages")))
        .json(&json!({"message_id": mid, "text": text}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn queued_turns_are_capped_per_session_and_per_process() {
    let s = server_with(|c| {
        c.max_queued_turns = 3;
        c.max_queued_turns_total = 5;
    })
    .await;
    let a = s.create_session().await;
    // `/ask` waits for an answer: every later turn of the session queues.
    let asking = s.send(&a, "a0", "/ask").await;
    let a1 = s.send(&a, "a1", "hello").await;
    s.send(&a, "a2", "hello").await;
    let refused = post_message(&s, &a, "a3", "hello").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "2");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "too_many_turns", "{body}");
    // Nothing was written for it.
    let (_, page) = s.get(&format!("/v1/sessions/{a}/events?limit=5000")).await;
    let users = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "message.committed")
        .count();
    assert_eq!(users, 3, "{page}");
    // A retry of an accepted message is still answered with its turn.
    assert_eq!(s.send(&a, "a1", "hello").await, a1);

    // The process-wide cap: 3 in `a`, 2 more anywhere, then 503.
    let b = s.create_session().await;
    s.send(&b, "b0", "/ask").await;
    s.send(&b, "b1", "hello").await;
    let refused = post_message(&s, &b, "b2", "hello").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "2");

    // Cancelling the waiting turn lets the queue drain; new turns fit again.
    let (st, _) = s
        .post(
            &format!("/v1/sessions/{a}/cancel"),
            json!({"turn_id": asking}),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let deadline = Instant::now() + 10 * SEC;
    loop {
        let r = post_message(&s, &a, "a3", "hello").await;
        if r.status() == StatusCode::ACCEPTED {
            break;
        }
        assert!(Instant::now() < deadline, "the queue never drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn admin_scope_ids_are_at_most_200_bytes() {
    let s = server().await;
    let append = |id: String| {
        let s = &s;
        async move {
            s.post(
                "/v1/admin/events",
                json!({"scope": "team", "scope_id": id, "type": "team.message",
                       "data": {"from": "a", "to": "b", "text": "x"}}),
            )
            .await
        }
    };
    let (st, v) = append("t".repeat(201)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "invalid_event");
    let (st, v) = append("t".repeat(60_000)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, v) = append("t".repeat(200)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}
