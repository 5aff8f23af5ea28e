//! Several `replay-server` processes on one Postgres: a write
//! through any node reaches the live streams, scoped and multiplexed, on
//! every node, in seq order, with dense seqs and no gap at the handoff.
//! Needs `REPLAY_TEST_POSTGRES` (`cargo xtask test` starts a throwaway one).

mod cluster_support;
mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster_support::{assert_dense, durable_until, fresh_db, threads_of, Node};
use futures_util::StreamExt;
use replay_core::protocol::{Envelope, Event, Role};
use replay_core::transcript::{fold, transcript_eq};

fn completed(events: &[Envelope]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.event, Event::TurnCompleted(_)))
        .count()
}

fn failed(events: &[Envelope]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.event, Event::TurnFailed(_)))
        .count()
}

fn ended(events: &[Envelope]) -> usize {
    completed(events) + failed(events)
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
    let sending = futures_util::stream::iter(0..N)
        .map(|i| {
            let server = &nodes[i % nodes.len()].server;
            let sid = sid.clone();
            async move { server.send(&sid, &format!("m{i}"), "hi").await }
        })
        .buffer_unordered(48)
        .collect::<Vec<String>>();
    // Both followers read while the messages go in, as a client does: a
    // stream whose reader stops for longer than the write timeout is ended,
    // and the sending takes longer than that.
    let long = Duration::from_secs(240);
    let (sent, seen, muxed) = tokio::join!(
        sending,
        durable_until(&mut scoped, long, |e| completed(e) == N),
        durable_until(&mut mux, long, |e| completed(e) == N),
    );
    assert_eq!(
        sent.iter().collect::<HashSet<_>>().len(),
        N,
        "one turn per message"
    );
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
        let theirs = node.server.transcript(&sid).await;
        let ours = fold(&theirs.epoch, &seen);
        assert_eq!(ours.cursor, theirs.cursor, "{}", node.server.base);
        assert!(
            transcript_eq(&ours, &theirs),
            "{} folds differently",
            node.server.base
        );
    }
}

/// Ends every connection the nodes hold to `db` (what a Postgres restart
/// does to them), from a connection of the test's own.
async fn cut_connections(db: &str) {
    let (client, conn) = tokio_postgres::connect(db, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let cut = client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("terminate");
    assert!(cut > 0, "the nodes had connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reconnect_and_catch_up_after_losing_postgres() {
    let Some(db) = fresh_db("cut").await else {
        return;
    };
    let lease = ["--turn-lease-ms", "1500"];
    let a = Node::start(&db, &lease);
    let b = Node::start(&db, &lease);
    let sid = b.server.create_session().await;
    let mut follower = a
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    // Past its opening (backlog and snapshots read from the store) before
    // the first cut: from then on only the follower feeds it. An opening
    // whose read meets a dead connection ends the stream, and the client
    // reconnects: not what this test is about.
    let mut first = durable_until(&mut follower, Duration::from_secs(20), |e| !e.is_empty()).await;
    follower
        .until(Duration::from_secs(20), |f| {
            common::is_type(f, "tasks.snapshot")
        })
        .await
        .expect("the opening ends with tasks.snapshot");
    let mut sent = 0;
    for round in 0..3 {
        cut_connections(&db).await;
        for i in 0..5 {
            // A write that met a dead connection is retried, as a client
            // does; the same message_id starts one turn.
            let path = format!("/v1/sessions/{sid}/messages");
            let body = serde_json::json!({"message_id": format!("m{round}.{i}"), "text": "hi"});
            let mut tries = 0;
            loop {
                let (status, v) = b.server.post(&path, body.clone()).await;
                if status == 202 {
                    break;
                }
                tries += 1;
                assert!(tries < 20, "{status} {v}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            sent += 1;
        }
    }
    // A turn that met a dead connection mid-way is ended by the lease
    // (`turn.failed`); every turn ends once.
    let rest = durable_until(&mut follower, Duration::from_secs(60), |e| ended(e) == sent).await;
    first.extend(rest);
    let seen = first;
    assert_dense(&seen);
    assert_eq!(completed(&seen) + failed(&seen), sent);
    let stored = b.server.events(&format!("sessions/{sid}")).await;
    assert_eq!(seen, stored[..seen.len()]);
}

/// Concurrent appends through one node share transactions (group commit,
/// for throughput): fewer commits than events, every log still dense, ids dense
/// in the global list, and the node's own stream gets every event in
/// order, published from the commit (not read back) once grouped. Another
/// node's follower sees the same log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_through_one_node_commit_in_groups_and_stay_dense() {
    let Some(db) = fresh_db("groups").await else {
        return;
    };
    let a = Node::start(&db, &[]);
    let b = Node::start(&db, &[]);
    const LOGS: usize = 4;
    const N: usize = 400;
    for log in 0..LOGS {
        a.server.append("team", &format!("g{log}"), 0).await;
    }
    let mut own = a
        .server
        .stream("/v1/teams/g0/events?after_seq=1", None)
        .await;
    let mut other = b.server.stream("/v1/stream?sub=team:g0:1", None).await;
    assert_eq!(own.status, 200);
    assert_eq!(other.status, 200);
    let before = appends(&a).await;
    futures_util::stream::iter(1..=N)
        .map(|i| {
            let server = &a.server;
            async move {
                server
                    .append("team", &format!("g{}", i % LOGS), i as u64)
                    .await
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let after = appends(&a).await;
    let (txs, events) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(events, N as u64, "every append counted once");
    assert!(
        txs < events,
        "{N} concurrent appends committed in {txs} transactions: none grouped"
    );
    assert!(
        after.2 > before.2,
        "own groups published without reading back"
    );
    for log in 0..LOGS {
        let stored = a.server.events(&format!("teams/g{log}")).await;
        assert_eq!(stored.len(), 1 + N / LOGS, "g{log}");
        assert_dense(&stored);
    }
    let (s, v) = a.server.get("/v1/events?after_id=0&limit=5000").await;
    assert_eq!(s, 200, "{v}");
    let ids: Vec<u64> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    // The nodes' own boot events are in the global list too.
    assert!(ids.len() >= LOGS + N, "{} ids", ids.len());
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "ids dense");
    let long = Duration::from_secs(60);
    let n = N / LOGS;
    let seen = durable_until(&mut own, long, |e| e.len() == n).await;
    let theirs = durable_until(&mut other, long, |e| e.len() == n).await;
    let stored = a.server.events("teams/g0").await;
    assert_eq!(
        seen,
        stored[1..],
        "node A's own stream: every event in order"
    );
    assert_eq!(theirs, seen, "node B's follower: the same");
}

/// Appends waiting for their group hold no thread each: a
/// blocked worker thread hands its tasks to a new one, and with 16 appends
/// in flight a node ran ~30 threads on 2 cores, switching between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_in_flight_hold_no_thread_each() {
    let Some(db) = fresh_db("threads").await else {
        return;
    };
    let a = Node::start(&db, &[]);
    a.server.append("team", "t0", 0).await;
    let pid = a.pid();
    let idle = threads_of(pid);
    let most = Arc::new(AtomicUsize::new(idle));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (most, done) = (Arc::clone(&most), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(threads_of(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    futures_util::stream::iter(1..=400u64)
        .map(|i| {
            let server = &a.server;
            async move { server.append("team", &format!("t{}", i % 4), i).await }
        })
        .buffer_unordered(48)
        .collect::<Vec<_>>()
        .await;
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let most = most.load(Ordering::Relaxed);
    assert!(idle > 0, "the node's threads are visible in /proc");
    assert!(
        most <= idle + 8,
        "48 appends in flight: {most} threads at most, {idle} idle"
    );
}

/// Writes queued behind a node-wide write that waits on Postgres hold no
/// worker thread: a node with one worker thread keeps serving
/// reads meanwhile. Here Postgres holds the session counter's row (a
/// transaction of the test's own), so a session's creation waits there with
/// the node's write lock, and two more wait for that lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_waiting_for_a_node_wide_write_leave_the_node_serving() {
    let Some(db) = fresh_db("lockwait").await else {
        return;
    };
    let a = Node::start(&db, &["--threads", "1"]);
    let (s, v) = a
        .server
        .post("/v1/sessions", serde_json::json!({"title": "first"}))
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["session_id"].as_str().expect("a session id").to_owned();
    let pg = hold_row(&db, "SELECT value FROM counters WHERE name = 'session'").await;
    let creates = futures_util::future::join_all((0..3).map(|_| {
        a.server
            .post("/v1/sessions", serde_json::json!({"title": "t"}))
    }));
    let (created, read) = tokio::join!(creates, read_then_release(&a, &pg, &id));
    let (s, v) = read.expect("a read answered while writes waited");
    assert_eq!(s, 200, "{v}");
    for (s, v) in created {
        assert_eq!(s, 201, "{v}");
    }
}

/// A turn writing its session's tasks while Postgres makes it wait (the
/// session's row held by a transaction of the test's own) holds that
/// session's live state; a cancel of the session waits for it on the node's
/// one worker thread. Meanwhile the node serves: that wait hands the
/// worker's other tasks over first (`util::lock_handing_off`), as a wait for
/// the writer's lock does, instead of stopping every stream and read of the
/// node until Postgres answers the holder.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_waiting_for_postgres_leaves_the_node_serving() {
    let Some(db) = fresh_db("livewait").await else {
        return;
    };
    let a = Node::start(&db, &["--threads", "1"]);
    let mut ids = Vec::new();
    for title in ["held", "other"] {
        let (s, v) = a
            .server
            .post("/v1/sessions", serde_json::json!({ "title": title }))
            .await;
        assert_eq!(s, 201, "{v}");
        ids.push(v["session_id"].as_str().expect("a session id").to_owned());
    }
    let (held, other) = (&ids[0], &ids[1]);
    let pg = hold_row(
        &db,
        &format!("SELECT 1 FROM sessions WHERE session_id = '{held}'"),
    )
    .await;
    let (s, v) = a
        .server
        .post(
            &format!("/v1/sessions/{held}/messages"),
            serde_json::json!({"message_id": "m1", "text": "index /bg"}),
        )
        .await;
    assert_eq!(s, 202, "{v}");
    // The turn reaches its background task and waits for the row.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancel_path = format!("/v1/sessions/{held}/cancel");
    let cancel = a.server.post(&cancel_path, serde_json::json!({}));
    // A stream opening on the held session waits for its live state too,
    // and a message to the other session then needs the node's map of
    // sessions: the opening must not hold the map while it waits.
    let stream = {
        let (http, url) = (
            a.server.http.clone(),
            a.server.url(&format!("/v1/sessions/{held}/events")),
        );
        tokio::spawn(async move { common::open_sse(&http, &url, None).await })
    };
    let other_path = format!("/v1/sessions/{other}/messages");
    let post_other = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let body = serde_json::json!({"message_id": "o1", "text": "hi"});
        tokio::time::timeout(Duration::from_secs(15), a.server.post(&other_path, body)).await
    };
    let (cancelled, read, posted) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(15), cancel),
        read_then_release(&a, &pg, other),
        post_other
    );
    stream.abort();
    let (s, v) = read.expect("a read answered while the session waited for Postgres");
    assert_eq!(s, 200, "{v}");
    let (s, v) = posted.expect("the other session's message answered");
    assert_eq!(s, 202, "{v}");
    let (s, v) = cancelled.expect("the cancel answered");
    assert!(s == 202 || s == 200, "{s} {v}");
}

/// A connection to `db` whose open transaction holds the rows `select`
/// reads (`FOR UPDATE`) until [`read_then_release`] commits it.
async fn hold_row(db: &str, select: &str) -> tokio_postgres::Client {
    let (pg, conn) = tokio_postgres::connect(db, tokio_postgres::NoTls)
        .await
        .expect("pg");
    tokio::spawn(conn);
    pg.batch_execute(&format!("BEGIN; {select} FOR UPDATE"))
        .await
        .expect("the row held");
    pg
}

/// After 300 ms (the node's writes are waiting by then), a read of
/// `session`'s events on `node`, given 5 s, while `pg` still holds its
/// rows; then `pg` commits.
async fn read_then_release(
    node: &Node,
    pg: &tokio_postgres::Client,
    session: &str,
) -> Result<(reqwest::StatusCode, serde_json::Value), tokio::time::error::Elapsed> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let path = format!("/v1/sessions/{session}/events?after_seq=0");
    let read = tokio::time::timeout(Duration::from_secs(5), node.server.get(&path)).await;
    pg.batch_execute("COMMIT").await.expect("released");
    read
}

/// `store.appends` of a node's diagnostics: (transactions, events,
/// published_own).
async fn appends(node: &Node) -> (u64, u64, u64) {
    let (s, v) = node.server.get("/v1/diagnostics").await;
    assert_eq!(s, 200, "{v}");
    let a = &v["store"]["appends"];
    let n = |k: &str| a[k].as_u64().unwrap_or_else(|| panic!("{k} in {a}"));
    (n("transactions"), n("events"), n("published_own"))
}
