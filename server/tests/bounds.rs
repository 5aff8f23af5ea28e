//! What one client can make the server hold is bounded in bytes and count,
//! so no client can exhaust the server's memory: queued turns, page and
//! transcript bytes, bytes buffered per subscriber, subscriptions per
//! client, admin scope ids. Real server over loopback HTTP.

mod common;

use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Event, Scope, TeamMessage};
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

/// Appends `n` events of about `size` bytes to a log through the admin
/// API, eight requests at a time (seqs in commit order, not request order).
async fn append_big(s: &Server, scope: &str, scope_id: &str, n: usize, size: usize) {
    let body = json!({"scope": scope, "scope_id": scope_id, "type": "team.message",
                      "data": {"from": "a", "to": "b", "text": "x".repeat(size)}});
    for chunk in (0..n).collect::<Vec<_>>().chunks(8) {
        let posts = chunk
            .iter()
            .map(|_| s.post("/v1/admin/events", body.clone()));
        for (st, v) in futures_util::future::join_all(posts).await {
            assert_eq!(st, StatusCode::CREATED, "{v}");
        }
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

#[tokio::test]
async fn a_reader_too_far_behind_is_ended_by_bytes_and_resumes() {
    let s = server_with(|c| c.subscriber_buffer_bytes = 64 << 10).await;
    append_big(&s, "team", "slow", 1, 10).await;
    let mut sse = s.stream("/v1/teams/slow/events?after_seq=1", None).await;
    sse.until(5 * SEC, |f| is_type(f, "hello")).await.unwrap();
    // The stream writes nothing while stalled: what is published piles up
    // in its subscriber's buffer, 20 KB a frame, far below 1024 frames.
    s.fault(json!({"kind": "stall"})).await;
    append_big(&s, "team", "slow", 8, 20_000).await;
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    assert_eq!(comms["lagged"], 1, "{comms}");
    s.fault(json!({"kind": "clear"})).await;
    // What was buffered is delivered, then the stream ends.
    let mut last = None;
    while let Some(f) = sse.next(5 * SEC).await {
        last = f.seq().or(last);
    }
    assert!(sse.ended, "the stream still runs");
    let last = last.expect("the buffered frames are delivered");
    assert!((2..9).contains(&last), "{last}");
    // The client resumes after the last frame it got.
    let mut again = s
        .stream("/v1/teams/slow/events", Some(&last.to_string()))
        .await;
    let f = again
        .until(5 * SEC, |f| f.seq().is_some())
        .await
        .expect("resumes");
    assert_eq!(f.seq(), Some(last + 1));
}

/// `GET /v1/stream` with one sub per team `t0..t{n}` from `client`.
async fn multiplexed(s: &Server, client: &reqwest::Client, n: usize) -> Sse {
    let subs: Vec<String> = (0..n).map(|i| format!("sub=team:t{i}:0")).collect();
    open_sse(
        client,
        &s.url(&format!("/v1/stream?{}", subs.join("&"))),
        None,
    )
    .await
}

#[tokio::test]
async fn thirty_two_full_multiplexed_streams_do_not_lock_out_other_clients() {
    let s = server().await;
    for i in 0..64 {
        s.append("team", &format!("t{i}"), 0).await;
    }
    // One client opens 32 streams of 64 subs: it holds its cap (512
    // subscriptions, 8 streams), each new stream ending its oldest.
    let mut held = Vec::new();
    for _ in 0..32 {
        let mut sse = multiplexed(&s, &s.http, 64).await;
        assert_eq!(sse.status, StatusCode::OK, "{:?}", sse.error_body);
        sse.until(5 * SEC, |f| is_type(f, "hello")).await.unwrap();
        held.push(sse);
    }
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    assert_eq!(comms["evicted_for_fairness"], 24, "{comms}");
    // The 24 ended streams are gone from the server.
    let t0 = std::time::Instant::now();
    let mut comms = s.get("/v1/diagnostics/comms").await.1;
    while comms["streams_open"] != 8 && t0.elapsed() < 3 * SEC {
        tokio::time::sleep(SEC / 20).await;
        comms = s.get("/v1/diagnostics/comms").await.1;
    }
    assert_eq!(comms["streams_open"], 8, "{comms}");
    assert_eq!(comms["streams"], 512, "{comms}");
    // Another client (another loopback address) still gets streams.
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let mut sse = multiplexed(&s, &other, 64).await;
    assert_eq!(sse.status, StatusCode::OK, "{:?}", sse.error_body);
    sse.until(5 * SEC, |f| is_type(f, "hello")).await.unwrap();
    let scoped = open_sse(&other, &s.url("/v1/teams/t0/events"), None).await;
    assert_eq!(scoped.status, StatusCode::OK, "{:?}", scoped.error_body);
}

/// A request for `path` from a socket with a small receive buffer that
/// then reads nothing: its answer stays in the server until the write
/// timeout.
async fn non_reading(s: &Server, path: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr: std::net::SocketAddr = s.base.strip_prefix("http://").unwrap().parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut c = sock.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    c
}

#[tokio::test]
async fn answers_held_by_peers_that_do_not_read_share_one_byte_budget() {
    // Pages of up to 8 MiB reserve 16 MiB + 64 KiB while they are built
    // and keep what they encode to until written (less what the kernel's
    // socket buffers took); 20 MiB in all.
    let s = server_with(|c| {
        c.page_max_bytes = 8 << 20;
        c.max_response_bytes = 20 << 20;
    })
    .await;
    // In process: 150 appends over HTTP take seconds in a debug build.
    let app = s.running.as_ref().unwrap().app();
    let text = "x".repeat(60_000);
    for _ in 0..150 {
        let event = Event::TeamMessage(TeamMessage {
            from: "a".into(),
            to: "b".into(),
            text: text.clone(),
        });
        app.log.append(Scope::Team, "big", event).unwrap();
    }
    let path = "/v1/teams/big/events?after_seq=0&limit=5000";
    let _a = non_reading(&s, path).await;
    let _b = non_reading(&s, path).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let r = s.http.get(s.url(path)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "it waited for room first"
    );
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "busy", "{body}");
    // Once those peers are gone, their room is free again.
    drop((_a, _b));
    let deadline = Instant::now() + 5 * SEC;
    loop {
        let (st, v) = s.get(path).await;

        if st == StatusCode::OK {
            assert_eq!(v["has_more"], true);
            break;
        }
        assert!(Instant::now() < deadline, "the room never came back");
    }
}
