//! A session's turns on a cluster: whichever node a client's
//! request reaches, an answer reaches the turn that asked, a cancel stops
//! the turn wherever it runs, and a session's turns run one at a time in
//! the order they were accepted. Needs `REPLAY_TEST_POSTGRES`.

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::{assert_dense, durable_until, fresh_db, Node};
use replay_core::protocol::{Envelope, Event};
use serde_json::json;

fn asked(events: &[Envelope]) -> Option<String> {
    events.iter().find_map(|e| match &e.event {
        Event::QuestionAsked(q) => Some(q.question_id.clone()),
        _ => None,
    })
}

/// The turn a durable event ends, if it ends one.
fn ended_turn(e: &Envelope) -> Option<&str> {
    match &e.event {
        Event::TurnCompleted(t) | Event::TurnCancelled(t) => Some(&t.turn_id),
        Event::TurnFailed(t) => Some(&t.turn_id),
        _ => None,
    }
}

/// Two nodes started with `flags` on `db`, a session created through the
/// first, and a scoped follower of it on the second.
async fn two_nodes_following(db: &str, flags: &[&str]) -> (Node, Node, String, common::Sse) {
    let (a, b) = (Node::start(db, flags), Node::start(db, flags));
    let sid = a.server.create_session().await;
    let follower = b
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    (a, b, sid, follower)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_posted_to_another_node_reaches_the_turn_that_asked() {
    let Some(db) = fresh_db("answer").await else {
        return;
    };
    // Questions are persisted at once, so the other node finds them.
    let (a, b, sid, mut follower) = two_nodes_following(&db, &["--ask-persist-ms", "0"]).await;
    let turn = a.server.send(&sid, "m1", "/ask").await;
    let seen = durable_until(&mut follower, Duration::from_secs(20), |e| {
        asked(e).is_some()
    })
    .await;
    let qid = asked(&seen).expect("asked");
    let path = format!("/v1/sessions/{sid}/questions/{qid}/answer");
    let posted = std::time::Instant::now();
    let r = b
        .server
        .http
        .post(b.server.url(&path))
        .json(&json!({"answer": "yes"}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    // B answers once it publishes `question.answered`, not at the end of
    // its wait (`cluster::FORWARD_WAIT`, 10 s).
    let took = posted.elapsed();
    assert!(
        took < replay_server::cluster::FORWARD_WAIT / 2,
        "the forwarded answer took {took:?}"
    );
    // The forwarded answer's reply, byte for byte (key order included).
    assert_eq!(
        body,
        format!(r#"{{"question_id":"{qid}","status":"answered"}}"#)
    );
    let rest = durable_until(&mut follower, Duration::from_secs(20), |e| {
        e.iter().any(|e| ended_turn(e) == Some(&turn))
    })
    .await;
    let all: Vec<Envelope> = seen.into_iter().chain(rest).collect();
    assert_dense(&all);
    let answered: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.event {
            Event::QuestionAnswered(q) => Some(q.answer.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        answered,
        ["yes"],
        "answered once, with the answer sent to B"
    );
    assert!(
        matches!(all.last().map(|e| &e.event), Some(Event::TurnCompleted(_))),
        "the turn went on to complete: {:?}",
        all.last()
    );
    // A second answer, on either node, finds the question closed.
    for node in [&a, &b] {
        let (status, _) = node.server.post(&path, json!({"answer": "no"})).await;
        assert_eq!(status, 409, "{}", node.server.base);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_posted_to_another_node_stops_the_turn() {
    let Some(db) = fresh_db("cancel").await else {
        return;
    };
    let (a, b, sid, mut follower) = two_nodes_following(&db, &["--delta-ms", "40"]).await;
    let turn = a.server.send(&sid, "m1", "/slow /long 2000").await;
    durable_until(&mut follower, Duration::from_secs(20), |e| {
        e.iter()
            .any(|e| matches!(&e.event, Event::TurnStarted(t) if t.turn_id == turn))
    })
    .await;
    let (status, body) = b
        .server
        .post(&format!("/v1/sessions/{sid}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["turn_id"], turn.as_str(), "B names the turn A runs");
    let seen = durable_until(&mut follower, Duration::from_secs(10), |e| {
        e.iter().any(|e| ended_turn(e) == Some(&turn))
    })
    .await;
    assert!(
        matches!(&seen.last().expect("an end").event, Event::TurnCancelled(_)),
        "{:?}",
        seen.last()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_turns_run_one_at_a_time_in_accepted_order_across_nodes() {
    let Some(db) = fresh_db("order").await else {
        return;
    };
    let flags = ["--delta-ms", "2"];
    let nodes = [Node::start(&db, &flags), Node::start(&db, &flags)];
    let sid = nodes[0].server.create_session().await;
    let mut follower = nodes[0]
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    // Accepted one after the other, alternately by each node, while the
    // first turns still run.
    const N: usize = 8;
    let mut turns = Vec::new();
    for i in 0..N {
        let node = &nodes[i % 2];
        turns.push(node.server.send(&sid, &format!("m{i}"), "/long 300").await);
    }
    let seen = durable_until(&mut follower, Duration::from_secs(60), |e| {
        e.iter().filter(|e| ended_turn(e).is_some()).count() == N
    })
    .await;
    assert_dense(&seen);
    // Between a turn's start and its end, no other turn starts or ends.
    let mut running: Option<String> = None;
    let mut started = Vec::new();
    for e in &seen {
        if let Event::TurnStarted(t) = &e.event {
            assert_eq!(running, None, "{} started while {running:?} ran", t.turn_id);
            running = Some(t.turn_id.clone());
            started.push(t.turn_id.clone());
        } else if let Some(t) = ended_turn(e) {
            assert_eq!(running.as_deref(), Some(t), "an end of a turn not running");
            running = None;
        }
    }
    assert_eq!(started, turns, "in the order they were accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_committed_with_its_reply_lost_fails_once_and_holds_up_no_later_turn() {
    let Some(db) = fresh_db("lost_reply").await else {
        return;
    };
    let flags = ["--turn-lease-ms", "1500"];
    let (a, b, sid, mut follower) = two_nodes_following(&db, &flags).await;
    // A commits the message but answers as if Postgres had dropped the reply.
    a.server
        .fault(json!({"kind": "lose_commit_reply", "count": 1}))
        .await;
    let path = format!("/v1/sessions/{sid}/messages");
    let (status, body) = a
        .server
        .post(&path, json!({"message_id": "m1", "text": "hi"}))
        .await;
    assert_eq!(status, 500, "{body}");
    // The client's retry is told the turn the log holds.
    let lost = a.server.send(&sid, "m1", "hi").await;
    // A later message, through the other node, is not held up for ever.
    let next = b.server.send(&sid, "m2", "hi").await;
    let seen = durable_until(&mut follower, Duration::from_secs(20), |e| {
        e.iter().any(|e| ended_turn(e) == Some(&next))
    })
    .await;
    assert_dense(&seen);
    let ends: Vec<&Event> = seen
        .iter()
        .filter(|e| ended_turn(e).is_some())
        .map(|e| &e.event)
        .collect();
    assert!(
        matches!(ends.as_slice(), [Event::TurnFailed(f), Event::TurnCompleted(c)]
            if f.turn_id == lost && f.reason == "worker_restart" && c.turn_id == next),
        "the lost turn fails once (worker_restart), then the next completes: {ends:?}"
    );
}
