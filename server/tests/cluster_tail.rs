//! The cluster's live tail: a turn running on one node streams
//! on every node. A stream on another node, scoped or multiplexed, carries
//! every `turn.delta` in order and the `tasks.snapshot`s, and a replay there
//! mid-turn returns the `live_turn`; with Redis killed mid-answer nothing
//! durable is lost or repeated and the turn's end arrives, and once Redis is
//! back the tails flow again. Needs `REPLAY_TEST_POSTGRES` and
//! `REPLAY_TEST_REDIS` (`cargo xtask test` starts both).

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::{assert_dense, fresh_db, redis_url, Node, OwnRedis};
use common::{Frame, Server, Sse};
use replay_core::protocol::{Envelope, Event};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

/// The frames of `sse` up to and including the durable end of `turn_id`.
async fn frames_until_end(sse: &mut Sse, turn_id: &str) -> Vec<Envelope> {
    let deadline = Instant::now() + LONG;
    let mut out = Vec::new();
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .expect("the turn ends in time");
        let Some(frame) = sse.next(left).await else {
            panic!("stream ended before {turn_id} did ({} frames)", out.len());
        };
        let Some(env) = frame.env().cloned() else {
            continue;
        };
        let end = ends(&env, turn_id);
        out.push(env);
        if end {
            return out;
        }
    }
}

/// [`frames_until_end`], then what `sse` carries for `more` after it:
/// transients travel apart from the log, so one sent just before the end
/// may arrive on another node just after it.
async fn frames_around_end(sse: &mut Sse, turn_id: &str, more: Duration) -> Vec<Envelope> {
    let mut out = frames_until_end(sse, turn_id).await;
    let rest = sse.collect_for(more).await;
    out.extend(rest.iter().filter_map(Frame::env).cloned());
    out
}

fn ends(env: &Envelope, turn_id: &str) -> bool {
    match &env.event {
        Event::TurnCompleted(t) | Event::TurnCancelled(t) => t.turn_id == turn_id,
        Event::TurnFailed(t) => t.turn_id == turn_id,
        _ => false,
    }
}

/// `(offset, text)` of every `turn.delta` of `turn_id`, in stream order.
fn deltas(envs: &[Envelope], turn_id: &str) -> Vec<(u64, String)> {
    envs.iter()
        .filter_map(|e| match &e.event {
            Event::TurnDelta(d) if d.turn_id == turn_id => Some((d.offset, d.text.clone())),
            _ => None,
        })
        .collect()
}

/// The highest task version in `envs`' `tasks.snapshot`s with a task.
fn task_versions(envs: &[Envelope]) -> Vec<u64> {
    envs.iter()
        .filter_map(|e| match &e.event {
            Event::TasksSnapshot(t) if !t.tasks.is_empty() => Some(t.version),
            _ => None,
        })
        .collect()
}

fn durable(envs: &[Envelope]) -> Vec<Envelope> {
    envs.iter().filter(|e| e.is_durable()).cloned().collect()
}

/// Reads `sse` until it has carried `n` deltas of `turn_id` (their frames
/// are returned).
async fn until_deltas(sse: &mut Sse, turn_id: &str, n: usize) -> Vec<Envelope> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while deltas(&out, turn_id).len() < n {
        let left = deadline.checked_duration_since(Instant::now());
        let frame = match left {
            Some(left) => sse.next(left).await,
            None => None,
        };
        match frame {
            Some(Frame::Event { env, .. }) => out.push(env),
            Some(Frame::Retry(_)) => {}
            None => panic!(
                "{} of {n} deltas of {turn_id}, then nothing for 20 s: {:?}",
                deltas(&out, turn_id).len(),
                out.iter().map(|e| e.event.type_name()).collect::<Vec<_>>()
            ),
        }
    }
    out
}

async fn tail_of(server: &Server) -> Value {
    server.get("/v1/diagnostics").await.1["tail"].clone()
}

/// Waits until both nodes say their tail is connected (or not).
async fn wait_connected(nodes: &[&Node], connected: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in nodes {
        while tail_of(&node.server).await["connected"] != connected {
            assert!(Instant::now() < deadline, "tail connected != {connected}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Two nodes on a fresh database and `redis`, with deltas `delta_ms` apart,
/// their tails connected.
async fn two_nodes(db: &str, redis: &str, delta_ms: &str) -> (Node, Node) {
    let flags = ["--redis", redis, "--delta-ms", delta_ms];
    let (a, b) = (Node::start(db, &flags), Node::start(db, &flags));
    wait_connected(&[&a, &b], true).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_replays_on_another_node_carry_the_turn_live() {
    let (Some(db), Some(redis)) = (fresh_db("tail").await, redis_url()) else {
        return;
    };
    let (a, b) = two_nodes(&db, &redis, "2").await;
    let sid = a.server.create_session().await;
    let path = format!("/v1/sessions/{sid}/events?after_seq=0");
    let (mut on_a, mut on_b) = (
        a.server.stream(&path, None).await,
        b.server.stream(&path, None).await,
    );
    let mut mux_b = b
        .server
        .stream(&format!("/v1/stream?sub=session:{sid}:0"), None)
        .await;

    let turn = a.server.send(&sid, "m1", "/long 3000").await;
    // Mid-turn on B: a replay and a new stream's opening snapshot show it.
    let mut seen_b = until_deltas(&mut on_b, &turn, 20).await;
    let (status, replay) = b.server.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert_eq!(status, 200);
    assert_eq!(replay["live_turn"]["turn_id"], turn.as_str(), "{replay}");
    assert!(!replay["live_turn"]["text"].as_str().unwrap().is_empty());
    let mut late = b.server.stream(&path, None).await;
    let opening = late
        .until(LONG, |f| common::is_type(f, "live_turn.snapshot"))
        .await
        .expect("an opening snapshot");
    match &opening.env().unwrap().event {
        Event::LiveTurnSnapshot(s) => {
            let live = s.live_turn.as_ref().expect("the running turn's");
            assert_eq!(live.turn_id, turn);
        }
        other => panic!("{other:?}"),
    }

    let settle = Duration::from_millis(500);
    seen_b.extend(frames_around_end(&mut on_b, &turn, settle).await);
    let seen_a = frames_around_end(&mut on_a, &turn, settle).await;
    let muxed_b = frames_around_end(&mut mux_b, &turn, settle).await;
    let ran = deltas(&seen_a, &turn);
    assert!(ran.len() > 100, "a long answer: {} deltas", ran.len());
    assert_eq!(
        deltas(&seen_b, &turn),
        ran,
        "B's scoped stream: every delta, in order"
    );
    assert_eq!(deltas(&muxed_b, &turn), ran, "B's multiplexed stream too");
    assert_eq!(durable(&seen_b), durable(&seen_a));

    // One boot id for the whole cluster's tail; each node's own in diagnostics.
    let (_, replay_a) = a.server.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert_eq!(replay_a["boot_id"], replay["boot_id"]);
    let (diag_a, diag_b) = (
        a.server.get("/v1/diagnostics").await.1,
        b.server.get("/v1/diagnostics").await.1,
    );
    assert_ne!(diag_a["boot_id"], diag_b["boot_id"]);
    assert_eq!(diag_a["tail"]["boot_id"], replay["boot_id"]);

    // A background task's snapshots reach B as they reach A, up to the
    // task's end (it runs 3 s, past its turn).
    let bg = a.server.send(&sid, "m2", "/bg").await;
    let task_time = Duration::from_secs(5);
    let on_a_bg = frames_around_end(&mut on_a, &bg, task_time).await;
    let on_b_bg = frames_around_end(&mut on_b, &bg, task_time).await;
    let ran = task_versions(&on_a_bg);
    assert!(ran.len() >= 2, "the task's snapshots on A: {ran:?}");
    assert_eq!(task_versions(&on_b_bg), ran);
    let finished = on_b_bg.iter().any(|e| {
        matches!(&e.event, Event::TasksSnapshot(t)
            if !t.tasks.is_empty() && t.background_wait.is_none())
    });
    assert!(finished, "the finished task's snapshot on B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_answer_loses_nothing_and_tails_flow_again_once_back() {
    let (Some(db), Some(_)) = (fresh_db("tail_outage").await, redis_url()) else {
        return;
    };
    let mut redis = OwnRedis::start();
    let (a, b) = two_nodes(&db, &redis.url(), "3").await;
    let sid = a.server.create_session().await;
    let path = format!("/v1/sessions/{sid}/events?after_seq=0");
    let mut on_b = b.server.stream(&path, None).await;

    let turn = a.server.send(&sid, "m1", "/long 3000").await;
    let mut seen = until_deltas(&mut on_b, &turn, 20).await;
    redis.kill();
    wait_connected(&[&a, &b], false).await;
    seen.extend(frames_until_end(&mut on_b, &turn).await);
    let answered = durable(&seen);
    assert_dense(&answered);
    assert!(matches!(
        answered.last().unwrap().event,
        Event::TurnCompleted(_)
    ));
    assert_eq!(answered, a.server.events(&format!("sessions/{sid}")).await);
    // Durable only meanwhile: replay answers, without a live turn.
    let (status, _) = b.server.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert_eq!(status, 200);

    redis.restart();
    wait_connected(&[&a, &b], true).await;
    let next = a.server.send(&sid, "m2", "/long 1500").await;
    let on_b_next = frames_around_end(&mut on_b, &next, Duration::from_millis(500)).await;
    let mut all = answered;
    all.extend(durable(&on_b_next));
    assert_dense(&all);
    assert_eq!(all, a.server.events(&format!("sessions/{sid}")).await);
    let deltas_b = deltas(&on_b_next, &next);
    assert!(
        deltas_b.len() > 50,
        "tails flow again: {} deltas",
        deltas_b.len()
    );
    let mut end = 0;
    for (offset, text) in &deltas_b {
        assert_eq!(*offset, end, "in order, none missing");
        end += text.chars().count() as u64;
    }
}
