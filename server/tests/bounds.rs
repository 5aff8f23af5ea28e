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

/// Appends `n` events of about `size` bytes to a log through the admin API.
async fn append_big(s: &Server, scope: &str, scope_id: &str, n: usize, size: usize) {
    let text = "x".repeat(size);
    for _ in 0..n {
        let (st, v) = s
            .post(
                "/v1/admin/events",
                json!({"scope": scope, "scope_id": scope_id, "type": "team.message",
                       "data": {"from": "a", "to": "b", "text": text}}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
}

/// Pages through `path` (`{cursor}` is replaced), returning the seqs (or
/// row ids) of every page.
async fn page_through(s: &Server, path: &str, list: &str, cursor: &str) -> Vec<Vec<u64>> {
    let mut pages = Vec::new();
    let mut after = 0;
    for _ in 0..100 {
        let (st, v) = s.get(&path.replace("{cursor}", &after.to_string())).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let ids: Vec<u64> = v[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[cursor].as_u64().unwrap())
            .collect();
        after = *ids.last().expect("a page with has_more moves the cursor");
        pages.push(ids);
        if v["has_more"] == false {
            return pages;
        }
    }
    panic!("more than 100 pages");
}

#[tokio::test]
async fn pages_stop_at_the_byte_budget_and_say_has_more() {
    let s = server_with(|c| c.page_max_bytes = 50_000).await;
    append_big(&s, "team", "big", 10, 20_000).await;
    let sid = s.create_session().await;
    append_big(&s, "session", &sid, 9, 20_000).await;

    // 20 KB events under a 50 KB budget: two a page, whatever `limit` says.
    let pages = page_through(
        &s,
        "/v1/teams/big/events?limit=5000&after_seq={cursor}",
        "events",
        "seq",
    )
    .await;
    assert!(pages.iter().all(|p| p.len() <= 2), "{pages:?}");
    assert_eq!(pages.concat(), (1..=10).collect::<Vec<_>>());

    let pages = page_through(
        &s,
        &format!("/v1/sessions/{sid}/replay?limit=5000&after_cursor={{cursor}}"),
        "history",
        "seq",
    )
    .await;
    assert!(pages.iter().all(|p| p.len() <= 3), "{pages:?}");
    assert_eq!(pages.concat(), (1..=10).collect::<Vec<_>>());

    let pages = page_through(
        &s,
        "/v1/events?limit=5000&after_id={cursor}",
        "events",
        "id",
    )
    .await;
    // The small system and session events share pages with the big ones.
    let ids = pages.concat();
    assert!(pages.len() >= 10, "{pages:?}");
    assert!(
        ids.windows(2).all(|w| w[0] + 1 == w[1]) && ids[0] == 1,
        "{ids:?}"
    );

    // A single event over the budget still makes a page of one.
    let (_, v) = s.get("/v1/teams/big/events?limit=5000&after_seq=0").await;
    assert_eq!(v["events"].as_array().unwrap().len(), 2);
    let s1 = server_with(|c| c.page_max_bytes = 1_000).await;
    append_big(&s1, "team", "big", 2, 20_000).await;
    let (_, v) = s1.get("/v1/teams/big/events?after_seq=0").await;
    assert_eq!(v["events"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["has_more"], true);

    // A stream's backlog is read in such pages, and delivered whole.
    let mut sse = s.stream("/v1/teams/big/events?after_seq=0", None).await;
    let mut seqs = Vec::new();
    while seqs.last() != Some(&10) {
        let frame = sse.next(5 * SEC).await.expect("the backlog is delivered");
        seqs.extend(frame.seq());
    }
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_transcript_is_bounded_in_bytes() {
    let s = server_with(|c| c.transcript_max_bytes = 100_000).await;
    let sid = s.create_session().await;
    append_big(&s, "session", &sid, 4, 20_000).await;
    let (st, v) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    append_big(&s, "session", &sid, 2, 20_000).await;
    let (st, v) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(v["error"], "transcript_too_large");
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("--transcript-max-bytes"));
}
