//! Following another node's writes from their wake-ups:
//! each group's `NOTIFY` carries its events, so a node publishes what
//! another node appended without reading the log when nothing was missed,
//! and fills from the log, in order, what a lost wake-up left out. Needs
//! `REPLAY_TEST_POSTGRES` (`cargo xtask test` starts a throwaway one).

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::{assert_dense, durable_until, fresh_db, Node};
use common::Sse;
use futures_util::StreamExt;
use serde_json::{json, Value};

/// `store.follow` of a node's diagnostics.
async fn follow(node: &Node) -> Value {
    let (s, v) = node.server.get("/v1/diagnostics").await;
    assert_eq!(s, 200, "{v}");
    v["store"]["follow"].clone()
}

fn count(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// `key` in `after` minus `key` in `before`.
fn grew(before: &Value, after: &Value, key: &str) -> u64 {
    count(after, key) - count(before, key)
}

/// Nodes A and B on a fresh database `name`, team log `log` created
/// through B, and a scoped stream on A after its first event (`None`
/// without Postgres).
async fn two_nodes_on(name: &str, log: &str) -> Option<(Node, Node, Sse)> {
    let db = fresh_db(name).await?;
    let a = Node::start(&db, &[]);
    let b = Node::start(&db, &[]);
    b.server.append("team", log, 0).await;
    let scoped = a
        .server
        .stream(&format!("/v1/teams/{log}/events?after_seq=1"), None)
        .await;
    assert_eq!(scoped.status, 200);
    Some((a, b, scoped))
}

/// Appends through B, one at a time and then concurrently (groups): A's
/// streams get every event in order, all of them published from B's
/// wake-ups, none read from the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_another_nodes_appends_from_their_wakeups_alone() {
    let Some((a, b, mut scoped)) = two_nodes_on("wakeups", "w").await else {
        return;
    };
    let mut mux = a.server.stream("/v1/stream?sub=team:w:1", None).await;
    assert_eq!(mux.status, 200);
    let before = follow(&a).await;
    const ONE_BY_ONE: usize = 30;
    const CONCURRENT: usize = 200;
    for i in 1..=ONE_BY_ONE {
        b.server.append("team", "w", i as u64).await;
    }
    futures_util::stream::iter(0..CONCURRENT)
        .map(|i| b.server.append("team", "w", 1000 + i as u64))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let n = ONE_BY_ONE + CONCURRENT;
    let long = Duration::from_secs(60);
    let seen = durable_until(&mut scoped, long, |e| e.len() == n).await;
    let muxed = durable_until(&mut mux, long, |e| e.len() == n).await;
    let stored = b.server.events("teams/w").await;
    assert_eq!(seen, stored[1..], "every event, in order");
    assert_eq!(muxed, seen, "the multiplexed stream: the same");
    let after = follow(&a).await;
    assert_eq!(
        grew(&before, &after, "from_wakeups"),
        n as u64,
        "published from B's wake-ups: {before} → {after}"
    );
    assert_eq!(
        grew(&before, &after, "read"),
        0,
        "nothing read from the log: {before} → {after}"
    );
}

/// A's next wake-ups are lost (fault `lose_wakeups`): the gaps they leave
/// are read from the log, and A's streams still get every event once, in
/// order, without waiting for the 2 s safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_wakeups_are_read_from_the_log_in_order() {
    let Some((a, b, mut scoped)) = two_nodes_on("lost_wakeups", "l").await else {
        return;
    };
    let before = follow(&a).await;
    let v = a
        .server
        .fault(json!({"kind": "lose_wakeups", "count": 3}))
        .await;
    assert_eq!(v["done"], true, "{v}");
    const N: usize = 20;
    for i in 1..=N {
        b.server.append("team", "l", i as u64).await;
        // One group per append: the first three wake-ups are lost.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = durable_until(&mut scoped, Duration::from_secs(30), |e| e.len() == N).await;
    let mut all = vec![b.server.events("teams/l").await[0].clone()];
    all.extend(seen.iter().cloned());
    assert_dense(&all);
    let stored = b.server.events("teams/l").await;
    assert_eq!(seen, stored[1..], "every event, in order");
    let after = follow(&a).await;
    assert_eq!(grew(&before, &after, "wakeups_dropped"), 3, "{after}");
    assert!(
        grew(&before, &after, "gap_reads") >= 1,
        "a gap read: {before} → {after}"
    );
    assert!(
        grew(&before, &after, "read") >= 3,
        "the lost groups read from the log: {before} → {after}"
    );
    // Nothing more, nothing twice.
    let late = scoped.collect_for(Duration::from_millis(500)).await;
    assert!(
        late.iter().filter_map(|f| f.env()).all(|e| !e.is_durable()),
        "no durable event after the last one"
    );
}
