//! Leases of healthy nodes hold under load: two nodes on
//! one Postgres with 300 ms turn leases, 16 writers appending through both
//! as fast as they are answered (the cluster bench's load), and turns
//! running on both meanwhile. A node renews its leases on a task and a
//! connection of its own, so renewal never waits behind appends or reaping:
//! no turn of a live node fails. A binary of its own: the load would slow
//! the timing of other tests. Needs `REPLAY_TEST_POSTGRES`.

mod cluster_support;
mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cluster_support::{fresh_db, Node};
use common::Server;
use replay_core::protocol::Event;
use serde_json::json;

const WRITERS: usize = 16;
const TURNS_PER_SESSION: usize = 6;
const SESSIONS: usize = 4;

/// Appends team events through `bases` in turn until `stop`.
async fn load(bases: Vec<String>, writer: usize, stop: Arc<AtomicBool>, done: Arc<AtomicUsize>) {
    let http = reqwest::Client::new();
    let mut i = writer;
    while !stop.load(Ordering::Relaxed) {
        let base = &bases[i % bases.len()];
        let answer = http
            .post(format!("{base}/v1/admin/events"))
            .json(
                &json!({"scope": "team", "scope_id": format!("load{}", i % 10),
                          "type": "team.message",
                          "data": {"from": "load", "to": "all", "text": "x".repeat(200)}}),
            )
            .send()
            .await;
        if answer.is_ok_and(|r| r.status() == 201) {
            done.fetch_add(1, Ordering::Relaxed);
        }
        i += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_leases_fail_no_turn_of_a_healthy_node_under_load() {
    let Some(db) = fresh_db("lease_load").await else {
        return;
    };
    let flags = ["--turn-lease-ms", "300", "--delta-ms", "10"];
    let nodes = [Node::start(&db, &flags), Node::start(&db, &flags)];
    let bases: Vec<String> = nodes.iter().map(|n| n.server.url("")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(load(
                bases.clone(),
                w,
                Arc::clone(&stop),
                Arc::clone(&appended),
            ))
        })
        .collect();
    let started = Instant::now();
    // Each session's turns, one after another, through both nodes in turn.
    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        sessions.push(nodes[s % 2].server.create_session().await);
    }
    let runs: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(s, sid)| {
            let servers: Vec<Server> = bases.iter().cloned().map(Server::remote).collect();
            let sid = sid.clone();
            tokio::spawn(async move {
                let mut turns = Vec::new();
                for t in 0..TURNS_PER_SESSION {
                    let server = &servers[(s + t) % 2];
                    let turn = server
                        .send(&sid, &format!("m{t}"), "tell me about leases")
                        .await;
                    server.wait_turn_end(&sid, &turn).await;
                    turns.push(turn);
                }
                turns
            })
        })
        .collect();
    let mut turns = 0;
    for run in runs {
        turns += run.await.expect("a session's turns").len();
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer");
    }
    let took = started.elapsed();
    let appended = appended.load(Ordering::Relaxed);
    eprintln!("{turns} turns and {appended} appends in {took:?}");
    assert!(appended > 1000, "the load was light: {appended} appends");
    let mut failed = Vec::new();
    for sid in &sessions {
        for e in nodes[0].server.events(&format!("sessions/{sid}")).await {
            if let Event::TurnFailed(f) = &e.event {
                failed.push(format!("{sid} {} {}", f.turn_id, f.reason));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {turns} turns failed: {failed:?}",
        failed.len()
    );
}
