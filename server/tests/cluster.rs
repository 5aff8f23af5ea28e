//! Several `replay-server` processes on one Postgres (issue 27): a write
//! through any node reaches the live streams, scoped and multiplexed, on
//! every node, in seq order, with dense seqs and no gap at the handoff.
//! Needs `REPLAY_TEST_POSTGRES` (`cargo xtask test` starts a throwaway one).

mod cluster_support;
mod common;

use std::collections::HashSet;
use std::time::Duration;

use cluster_support::{assert_dense, durable_until, fresh_db, Node};
use futures_util::StreamExt;
use replay_core::protocol::{Envelope, Event, Role, Transcript};
use replay_core::transcript::{fold, transcript_eq};

fn completed(events: &[Envelope]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.event, Event::TurnCompleted(_)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_on_one_node_sees_every_event_written_through_another() {
    let Some(db) = fresh_db("follow").await else {
        return;
    };
    let a = Node::start(&db, &[]);
    let b = Node::start(&db, &[]);
    // Created through B, followed on A at once: A may not have published it yet.
    let sid = b.server.create_session().await;
    let mut scoped = a
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    let mut mux = a
        .server
        .stream(&format!("/v1/stream?sub=session:{sid}:0"), None)
        .await;
    assert_eq!(scoped.status, 200);
    assert_eq!(mux.status, 200);
    for i in 0..20 {
        let turn = b.server.send(&sid, &format!("m{i}"), "hi").await;
        // Every other message waits for its turn: the handoff is crossed
        // both while B is idle and while it writes.
        if i % 2 == 0 {
            b.server.wait_turn_end(&sid, &turn).await;
        }
    }
    let long = Duration::from_secs(60);
    let seen = durable_until(&mut scoped, long, |e| completed(e) == 20).await;
    let muxed = durable_until(&mut mux, long, |e| completed(e) == 20).await;
    assert_dense(&seen);
    assert_eq!(
        seen, muxed,
        "the multiplexed stream carries the same events"
    );
    // What B has stored, event for event.
    let stored = b.server.events(&format!("sessions/{sid}")).await;
    assert_eq!(seen, stored[..seen.len()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_messages_over_three_nodes_fold_to_one_transcript() {
    let Some(db) = fresh_db("thousand").await else {
        return;
    };
    let caps = [
        "--max-queued-turns",
        "2000",
        "--max-queued-turns-total",
        "4000",
    ];
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(&db, &caps)).collect();
    let sid = nodes[0].server.create_session().await;
    let mut scoped = nodes[0]
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    let mut mux = nodes[1]
        .server
        .stream(&format!("/v1/stream?sub=session:{sid}:0"), None)
        .await;
    const N: usize = 1000;
    let sent: Vec<String> = futures_util::stream::iter(0..N)
        .map(|i| {
            let server = &nodes[i % nodes.len()].server;
            let sid = sid.clone();
            async move { server.send(&sid, &format!("m{i}"), "hi").await }
        })
        .buffer_unordered(48)
        .collect()
        .await;
    assert_eq!(
        sent.iter().collect::<HashSet<_>>().len(),
        N,
        "one turn per message"
    );

    let long = Duration::from_secs(240);
    let seen = durable_until(&mut scoped, long, |e| completed(e) == N).await;
    let muxed = durable_until(&mut mux, long, |e| completed(e) == N).await;
    assert_dense(&seen);
    assert_eq!(seen, muxed);
    let users: HashSet<&str> = seen
        .iter()
        .filter_map(|e| match &e.event {
            Event::MessageCommitted(m) if m.role == Role::User => Some(m.message_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(users.len(), N, "every message committed once");

    // The independent fold of what the follower got equals the transcript
    // each node serves, and covers the whole log.
    for node in &nodes {
        let r = node
            .server
            .http
            .get(node.server.url(&format!("/v1/sessions/{sid}/transcript")))
            .send()
            .await
            .expect("GET transcript");
        assert_eq!(r.status(), 200);
        let theirs: Transcript =
            replay_core::json::from_slice(&r.bytes().await.expect("body")).expect("a transcript");
        let ours = fold(&theirs.epoch, &seen);
        assert_eq!(ours.cursor, theirs.cursor, "{}", node.server.base);
        assert!(
            transcript_eq(&ours, &theirs),
            "{} folds differently",
            node.server.base
        );
    }
}
