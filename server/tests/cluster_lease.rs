//! Turns across nodes: a turn is run by the node that accepted
//! it, under a lease in Postgres. When that node is SIGKILLed mid-turn,
//! another node writes the turn's honest end (`turn.failed`,
//! `worker_restart`) once the lease has run out, exactly once although every
//! live node looks for expired leases. Needs `REPLAY_TEST_POSTGRES`.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::{assert_dense, durable_until, ended_after_kill, fresh_db, Node};
use replay_core::protocol::{Event, REASON_WORKER_RESTART};

const LEASE_MS: u64 = 1500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_of_a_killed_node_is_ended_once_by_another_within_the_lease() {
    let Some(db) = fresh_db("lease").await else {
        return;
    };
    let lease = LEASE_MS.to_string();
    let flags = ["--turn-lease-ms", lease.as_str(), "--delta-ms", "40"];
    let mut victim = Node::start(&db, &flags);
    let others = [Node::start(&db, &flags), Node::start(&db, &flags)];
    let sid = others[0].server.create_session().await;
    let mut follower = others[0]
        .server
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    // A slow turn (deltas 400 ms apart) on the victim.
    let turn = victim.server.send(&sid, "m1", "/slow hello there").await;
    let started = |t: &str| {
        let t = t.to_owned();
        move |e: &[replay_core::protocol::Envelope]| {
            e.iter()
                .any(|e| matches!(&e.event, Event::TurnStarted(s) if s.turn_id == t))
        }
    };
    let mut seen = durable_until(&mut follower, Duration::from_secs(20), started(&turn)).await;
    victim.kill();
    let killed = Instant::now();

    let failed = |t: &str| {
        let t = t.to_owned();
        move |e: &[replay_core::protocol::Envelope]| {
            e.iter()
                .any(|e| matches!(&e.event, Event::TurnFailed(f) if f.turn_id == t))
        }
    };
    // The lease runs out at most LEASE_MS after the kill; the live nodes look
    // every third of a lease. Then two more leases: no second end from the
    // other node.
    let rest = ended_after_kill(
        &mut follower,
        killed,
        failed(&turn),
        Duration::from_millis(LEASE_MS * 2 + 1000),
        "ended",
        Duration::from_millis(LEASE_MS * 2),
    )
    .await;
    seen.extend(rest);
    assert_dense(&seen);
    let ends: Vec<_> = seen
        .iter()
        .filter(|e| match &e.event {
            Event::TurnFailed(f) => f.turn_id == turn,
            Event::TurnCompleted(c) | Event::TurnCancelled(c) => c.turn_id == turn,
            _ => false,
        })
        .collect();
    assert_eq!(ends.len(), 1, "one end of the turn: {ends:?}");
    let Event::TurnFailed(f) = &ends[0].event else {
        panic!("not a failure: {:?}", ends[0]);
    };
    assert_eq!(f.reason, REASON_WORKER_RESTART);
    // Every node's store says the same.
    for node in &others {
        let stored = node.server.events(&format!("sessions/{sid}")).await;
        assert_eq!(stored, seen, "{}", node.server.base);
    }
}

/// The claim behind "exactly once": two nodes looking for expired leases at
/// the same moment never both get the same turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_never_claim_the_same_expired_turn() {
    use replay_core::protocol::{Scope, SessionCreated};
    use replay_server::store::pg::{self, PgDb};
    let Some(db) = fresh_db("claim").await else {
        return;
    };
    let nodes = tokio::task::spawn_blocking(move || {
        let pool = pg::block(pg::connect(&db))?;
        // The node that accepted the turns holds them for 1 ms only.
        let gone = pg::block(PgDb::open(pool.clone(), Duration::from_millis(1)))?;
        let a = pg::block(PgDb::open(pool.clone(), Duration::from_secs(60)))?;
        let b = pg::block(PgDb::open(pool, Duration::from_secs(60)))?;
        gone.set_owner("b_gone");
        a.set_owner("b_a");
        b.set_owner("b_b");
        let created = Event::SessionCreated(SessionCreated::default());
        gone.append(Scope::Session, "s", &created)?;
        for i in 0..20 {
            gone.accept_message("s", &format!("t{i}"), &format!("m{i}"), "hi")?;
        }
        Ok::<_, replay_server::store::StoreError>((a, b))
    })
    .await
    .unwrap()
    .expect("a store with 20 turns");
    tokio::time::sleep(Duration::from_millis(50)).await; // every lease has run out
    let (a, b) = (std::sync::Arc::new(nodes.0), std::sync::Arc::new(nodes.1));
    let claim = |db: std::sync::Arc<PgDb>| tokio::task::spawn_blocking(move || db.open_turns());
    let (got_a, got_b) = tokio::join!(claim(a), claim(b));
    let (got_a, got_b) = (got_a.unwrap().unwrap(), got_b.unwrap().unwrap());
    let mut all: Vec<String> = got_a
        .iter()
        .chain(&got_b)
        .map(|t| t.turn_id.clone())
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(
        got_a.len() + got_b.len(),
        20,
        "claimed once each: {} + {}",
        got_a.len(),
        got_b.len()
    );
    assert_eq!(all.len(), 20);
}

/// Processes and `/bg` tasks are leased like turns: a
/// node SIGKILLed while it runs a turn's shell process and a background
/// task leaves nothing running: another node fails both once
/// (`process.failed worker_restart`; the task `failed` in the session's
/// tasks with `background_wait` cleared) within the lease, and says so in
/// its `/v1/diagnostics/recovery`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_tasks_of_a_killed_node_are_failed_once_by_another() {
    use replay_core::protocol::{ReplayPage, TaskState};
    let Some(db) = fresh_db("lease_proc").await else {
        return;
    };
    let lease = LEASE_MS.to_string();
    let flags = [
        "--turn-lease-ms",
        lease.as_str(),
        "--delta-ms",
        "40",
        "--bg-ms",
        "60000",
    ];
    let mut victim = Node::start(&db, &flags);
    let others = [Node::start(&db, &flags), Node::start(&db, &flags)];
    let sid = others[0].server.create_session().await;
    let mut global = others[0].server.stream("/v1/events?after_id=0", None).await;
    // A background task, then a slow shell tool (its process runs seconds).
    victim.server.send(&sid, "m1", "/bg /tool /slow go").await;
    let both_started = |e: &[replay_core::protocol::Envelope]| {
        e.iter()
            .filter(|e| matches!(e.event, Event::ProcessStarted(_)))
            .count()
            == 2
    };
    let mut seen = durable_until(&mut global, Duration::from_secs(20), both_started).await;
    let processes: Vec<String> = seen
        .iter()
        .filter(|e| matches!(e.event, Event::ProcessStarted(_)))
        .map(|e| e.scope_id.clone())
        .collect();
    victim.kill();
    let killed = Instant::now();
    let both_failed = |e: &[replay_core::protocol::Envelope]| {
        e.iter()
            .filter(|e| matches!(e.event, Event::ProcessFailed(_)))
            .count()
            >= 2
    };
    // Then two more leases: nothing failed twice.
    let rest = ended_after_kill(
        &mut global,
        killed,
        both_failed,
        Duration::from_millis(LEASE_MS * 2 + 1000),
        "failed",
        Duration::from_millis(LEASE_MS * 2),
    )
    .await;
    seen.extend(rest);
    for p in &processes {
        let ends: Vec<_> = seen
            .iter()
            .filter(|e| &e.scope_id == p)
            .filter(|e| matches!(e.event, Event::ProcessFailed(_) | Event::ProcessExited(_)))
            .collect();
        assert_eq!(ends.len(), 1, "one end of {p}: {ends:?}");
        let Event::ProcessFailed(f) = &ends[0].event else {
            panic!("not a failure: {:?}", ends[0]);
        };
        assert_eq!(f.reason, REASON_WORKER_RESTART, "{p}");
    }
    // The task failed, nothing left to wait for, on every node.
    for node in &others {
        let (status, v) = node.server.get(&format!("/v1/sessions/{sid}/replay")).await;
        assert_eq!(status, 200, "{v}");
        let page: ReplayPage =
            replay_core::json::from_slice(v.to_string().as_bytes()).expect("a replay page");
        let tasks = page.tasks.expect("tasks");
        assert_eq!(tasks.tasks.len(), 1, "{tasks:?}");
        assert_eq!(tasks.tasks[0].state, TaskState::Failed, "{tasks:?}");
        assert_eq!(
            tasks.tasks[0].detail.as_deref(),
            Some(REASON_WORKER_RESTART)
        );
        assert!(tasks.background_wait.is_none(), "{tasks:?}");
        let (_, procs) = node.server.get("/v1/diagnostics/processes").await;
        for p in procs["processes"].as_array().expect("processes") {
            assert_eq!(p["state"], "failed", "{p}");
        }
    }
    // The node that failed them says so.
    let mut reported = Vec::new();
    let mut tasks_reported = 0;
    for node in &others {
        let (_, r) = node.server.get("/v1/diagnostics/recovery").await;
        for p in r["processes_failed"].as_array().expect("processes_failed") {
            reported.push(p.as_str().expect("a process id").to_owned());
        }
        tasks_reported += r["tasks_failed"].as_array().expect("tasks_failed").len();
    }
    reported.sort();
    let mut expected = processes.clone();
    expected.sort();
    assert_eq!(reported, expected, "reported once each");
    assert_eq!(tasks_reported, 1, "the task reported once");
}
