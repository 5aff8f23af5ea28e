//! Postgres stopped under a writer and a follower: two
//! nodes on one Postgres, a session written through node A and followed on
//! node B, then Postgres stopped (`pg_ctl stop -m immediate`). While it is
//! down every answer that needs the store is `503 store_unavailable` with
//! a `Retry-After`, never `404` (a client told `404` gives the session up)
//! nor `500`: posting a message, replay of a known session, and replay,
//! answer, cancel and streams of a session this node has not seen (it may
//! exist: only the store can say). Then Postgres starts again: both nodes
//! accept writes again, and the follower resumes from its cursor and sees
//! the log densely.
//!
//! A binary of its own: stopping Postgres hits every database of the shared
//! test Postgres. Needs `REPLAY_TEST_POSTGRES`, `REPLAY_TEST_POSTGRES_STOP`
//! and `REPLAY_TEST_POSTGRES_START` (`cargo xtask test` sets them).

mod cluster_support;
mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use cluster_support::{assert_dense, durable_until, fresh_db, Node};
use common::Server;
use replay_core::protocol::{Envelope, Event};
use reqwest::StatusCode;
use serde_json::json;

/// How long after Postgres is back each node must accept a write again.
const WRITABLE_WITHIN: Duration = Duration::from_secs(15);

/// The argv (a JSON array) in the environment variable `var`.
fn argv_of(var: &str) -> Option<Vec<String>> {
    let Ok(raw) = std::env::var(var) else {
        eprintln!("skipped: {var} is not set (cargo xtask test sets it)");
        return None;
    };
    let argv: Vec<String> = serde_json::from_str(&raw).expect("a JSON array of strings");
    assert!(!argv.is_empty(), "an empty command in {var}");
    Some(argv)
}

/// Runs `argv` to its end (its output is not read: a started Postgres
/// would hold a pipe open).
fn run(argv: &[String]) {
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("the Postgres command starts");
    assert!(status.success(), "{argv:?}: {status}");
}

/// Starts the stopped Postgres again when dropped, also when an assertion
/// failed meanwhile (the next test binary needs it).
struct StartOnDrop(Option<Vec<String>>);

impl StartOnDrop {
    /// Starts it now.
    fn start(&mut self) {
        if let Some(argv) = self.0.take() {
            run(&argv);
        }
    }
}

impl Drop for StartOnDrop {
    fn drop(&mut self) {
        if let Some(argv) = self.0.take() {
            let _ = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status();
        }
    }
}

/// Asserts one answer of the outage: `503 store_unavailable` with a
/// `Retry-After`.
async fn assert_unavailable(what: &str, resp: reqwest::Response) {
    let status = resp.status();
    let retry_after = resp.headers().get("retry-after").cloned();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
    assert_eq!(body["error"], "store_unavailable", "{what}: {body}");
    assert!(retry_after.is_some(), "{what}: no Retry-After");
}

/// Posts `message_id` through `server` until it is acknowledged or
/// `within` passed; returns how long that took.
async fn post_until_accepted(server: &Server, sid: &str, message_id: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let (status, body) = server
            .post(
                &format!("/v1/sessions/{sid}/messages"),
                json!({"message_id": message_id, "text": "hi"}),
            )
            .await;
        if status == StatusCode::ACCEPTED {
            return;
        }
        assert_ne!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(
            start.elapsed() < within,
            "not writable {within:?} after Postgres started: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A follower as a client is one: reads the session's stream from its
/// cursor, reopens it from there after a lost stream or a refused one,
/// until `done` holds for every durable event seen.
async fn follow_until(
    server: &Server,
    sid: &str,
    mut seen: Vec<Envelope>,
    timeout: Duration,
    done: impl Fn(&[Envelope]) -> bool,
) -> Vec<Envelope> {
    let deadline = Instant::now() + timeout;
    while !done(&seen) {
        assert!(
            Instant::now() < deadline,
            "the follower saw {} events",
            seen.len()
        );
        let cursor = seen.last().and_then(|e| e.seq).unwrap_or(0);
        let path = format!("/v1/sessions/{sid}/events?after_seq={cursor}");
        let mut sse = server.stream(&path, None).await;
        if sse.status != StatusCode::OK {
            assert_ne!(sse.status, StatusCode::NOT_FOUND, "{:?}", sse.error_body);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        while let Some(frame) = sse.next(Duration::from_secs(2)).await {
            if let Some(env) = frame.env().filter(|e| e.is_durable()) {
                seen.push(env.clone());
            }
            if done(&seen) {
                break;
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_outage_answers_503_never_404() {
    let (Some(stop), Some(start)) = (
        argv_of("REPLAY_TEST_POSTGRES_STOP"),
        argv_of("REPLAY_TEST_POSTGRES_START"),
    ) else {
        return;
    };
    let Some(url) = fresh_db("outage").await else {
        return;
    };
    let a = Node::start(&url, &[]);
    let b = Node::start(&url, &[]);
    let sid = a.server.create_session().await;
    let turn = a.server.send(&sid, "before", "hi").await;
    a.server.wait_turn_end(&sid, &turn).await;
    // The follower on B has the whole session before the outage.
    let mut sse = b
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    let before = durable_until(&mut sse, Duration::from_secs(10), |evs| {
        evs.iter()
            .any(|e| matches!(&e.event, Event::TurnCompleted(t) if t.turn_id == turn))
    })
    .await;

    run(&stop);
    let mut stopped = StartOnDrop(Some(start));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let (base_a, base_b) = (a.server.url(""), b.server.url(""));
    let post = http
        .post(format!("{base_a}/v1/sessions/{sid}/messages"))
        .json(&json!({"message_id": "during", "text": "hi"}))
        .send()
        .await
        .expect("POST during the outage");
    assert_unavailable("a message to a known session", post).await;
    let replay = http
        .get(format!("{base_b}/v1/sessions/{sid}/replay"))
        .send()
        .await
        .expect("GET replay");
    assert_unavailable("replay of a known session", replay).await;
    // A session B has never seen may exist: only the store can say.
    let unseen = "ses_999999";
    let replay = http
        .get(format!("{base_b}/v1/sessions/{unseen}/replay"))
        .send()
        .await
        .expect("GET replay");
    assert_unavailable("replay of an unseen session", replay).await;
    let answer = http
        .post(format!(
            "{base_b}/v1/sessions/{unseen}/questions/q_1/answer"
        ))
        .json(&json!({"answer": "yes"}))
        .send()
        .await
        .expect("POST answer");
    assert_unavailable("an answer in an unseen session", answer).await;
    let cancel = http
        .post(format!("{base_b}/v1/sessions/{unseen}/cancel"))
        .json(&json!({}))
        .send()
        .await
        .expect("POST cancel");
    assert_unavailable("a cancel in an unseen session", cancel).await;
    let stream = http
        .get(format!("{base_b}/v1/sessions/{unseen}/events?after_seq=0"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET stream");
    assert_unavailable("a stream of an unseen session", stream).await;

    stopped.start();
    post_until_accepted(&a.server, &sid, "after_a", WRITABLE_WITHIN).await;
    post_until_accepted(&b.server, &sid, "after_b", WRITABLE_WITHIN).await;
    let seen = follow_until(&b.server, &sid, before, Duration::from_secs(30), |evs| {
        let ended = |mid: &str| {
            evs.iter()
                .any(|e| matches!(&e.event, Event::MessageCommitted(m) if m.message_id == mid))
        };
        ended("after_a") && ended("after_b")
    })
    .await;
    assert_dense(&seen);
    let log = a.server.events(&format!("sessions/{sid}")).await;
    assert_dense(&log);
    assert!(
        !log.iter()
            .any(|e| matches!(&e.event, Event::MessageCommitted(m) if m.message_id == "during")),
        "a message answered 503 was committed"
    );
}
