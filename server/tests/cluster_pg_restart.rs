//! Postgres restarted under load: two nodes on one Postgres,
//! writers posting through both, live followers (scoped and multiplexed) on
//! both, and the Postgres restarted like a crash (`pg_ctl restart -m
//! immediate`) mid-way. Afterwards: every acknowledged message is in the
//! log, seqs are dense, every turn ends exactly once (completed, or failed
//! with `worker_restart` when the outage stopped it), followers that lost
//! their stream resumed from their cursor and saw exactly the log, and both
//! nodes accept writes again within a bound. Run twice: with a turn lease
//! longer than the outage, and with one shorter (leases run out while their
//! nodes live; a node's late writes for a turn another node has claimed
//! must be refused, or the turn ends twice).
//!
//! A binary of its own: the restart hits every database of the shared test
//! Postgres, so nothing may run beside it (one test here, its two runs one
//! after the other). Needs
//! `REPLAY_TEST_POSTGRES` and `REPLAY_TEST_POSTGRES_RESTART` (`cargo xtask
//! test` sets both).

mod cluster_support;
mod common;

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::{assert_dense, fresh_db, Node};
use common::{is_type, open_sse, Server};
use replay_core::protocol::{Envelope, Event, Role, REASON_WORKER_RESTART};
use replay_core::transcript::{fold, transcript_eq};
use serde_json::json;

const SESSIONS: usize = 3;
const WRITERS_PER_NODE: usize = 2;
/// Writing before the restart, and after Postgres is back.
const BEFORE: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(4);
/// How long after Postgres is back each node must accept a write again.
const WRITABLE_WITHIN: Duration = Duration::from_secs(10);

/// `REPLAY_TEST_POSTGRES_RESTART`: the argv that restarts the test Postgres.
fn restart_argv() -> Option<Vec<String>> {
    let Ok(raw) = std::env::var("REPLAY_TEST_POSTGRES_RESTART") else {
        eprintln!("skipped: REPLAY_TEST_POSTGRES_RESTART is not set (cargo xtask test sets it)");
        return None;
    };
    let argv: Vec<String> = serde_json::from_str(&raw).expect("a JSON array of strings");
    assert!(!argv.is_empty(), "an empty restart command");
    Some(argv)
}

/// A message the server acknowledged (`202`).
struct Ack {
    sid: String,
    message_id: String,
    turn_id: String,
    node: usize,
    sent: Instant,
    acked: Instant,
}

/// What the writers met besides acknowledgements.
struct Tally {
    since: Instant,
    /// Answers a store outage must not give (e.g. `404` for a session that
    /// exists), with when.
    unexpected: Mutex<Vec<String>>,
    /// Transport errors and `5xx` other than a full queue: retried.
    failed: AtomicUsize,
    /// `429`/`503 too_many_turns`: retried later.
    busy: AtomicUsize,
    /// Given up at the end without an answer (not acknowledged, so not checked).
    abandoned: AtomicUsize,
}

/// Posts messages to the sessions through one node until `stop`, each
/// retried with its `message_id` until acknowledged, as a client does.
async fn write(
    node: usize,
    writer: usize,
    base: String,
    sessions: Arc<Vec<String>>,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Ack>>>,
    tally: Arc<Tally>,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("a client");
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let sid = &sessions[(i + writer) % sessions.len()];
        let message_id = format!("n{node}w{writer}m{i}");
        let url = format!("{base}/v1/sessions/{sid}/messages");
        let body = json!({"message_id": message_id, "text": "hi"});
        let mut tries = 0;
        loop {
            let sent = Instant::now();
            let answer = http.post(&url).json(&body).send().await;
            match answer {
                Ok(r) if r.status() == 202 => {
                    let v: serde_json::Value = r.json().await.expect("a JSON answer");
                    acks.lock().unwrap().push(Ack {
                        sid: sid.clone(),
                        message_id: message_id.clone(),
                        turn_id: v["turn_id"].as_str().expect("turn_id").to_owned(),
                        node,
                        sent,
                        acked: Instant::now(),
                    });
                    break;
                }
                Ok(r) if matches!(r.status().as_u16(), 429 | 503) => {
                    tally.busy.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(r) => {
                    let status = r.status();
                    if !status.is_server_error() {
                        let text = r.text().await.unwrap_or_default();
                        let seen = format!("{status} {text} at {:?}", tally.since.elapsed());
                        tally.unexpected.lock().unwrap().push(seen);
                    }
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            tries += 1;
            if stop.load(Ordering::Relaxed) && tries > 40 {
                tally.abandoned.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// Which stream a follower holds.
#[derive(Clone)]
enum Follow {
    /// `/v1/sessions/{sid}/events?after_seq=…`
    Scoped(String),
    /// `/v1/stream?sub=session:{sid}:…` for each session.
    Mux(Vec<String>),
}

/// What one follower saw: durable events per session, in arrival order.
struct Seen {
    name: String,
    events: HashMap<String, Vec<Envelope>>,
    /// Streams the server ended or refused (then reopened from the cursor).
    lost: usize,
    /// Streams this follower closed itself to reopen them (a client's
    /// network blip), before, during and after the outage.
    reopened: usize,
    /// Streams opened while the restart command ran.
    opened_in_outage: usize,
}

/// Where the test is: writing before the restart, restarting, after.
const BEFORE_RESTART: u8 = 0;
const RESTARTING: u8 = 1;
const AFTER_RESTART: u8 = 2;

/// The seq a follower resumes after: the last one it saw.
fn cursor(events: &HashMap<String, Vec<Envelope>>, sid: &str) -> u64 {
    events
        .get(sid)
        .and_then(|v| v.last())
        .and_then(|e| e.seq)
        .unwrap_or(0)
}

/// Follows until it has seen each session up to `heads` (set once the
/// writing is over), reconnecting with its cursor whenever the stream
/// ends, is refused or a subscription fails; with `reopen`, also every
/// 400 ms, and every 50 ms while Postgres restarts.
async fn follow(
    base: String,
    what: Follow,
    reopen: bool,
    phase: Arc<AtomicU8>,
    heads: Arc<Mutex<Option<HashMap<String, u64>>>>,
    deadline: Instant,
) -> Seen {
    let http = reqwest::Client::new();
    let sids = match &what {
        Follow::Scoped(sid) => vec![sid.clone()],
        Follow::Mux(sids) => sids.clone(),
    };
    let name = match &what {
        Follow::Scoped(sid) => format!("scoped {sid} on {base}"),
        Follow::Mux(_) => format!("multiplexed on {base}"),
    };
    let mut seen = Seen {
        name,
        events: HashMap::new(),
        lost: 0,
        reopened: 0,
        opened_in_outage: 0,
    };
    let done = |events: &HashMap<String, Vec<Envelope>>| {
        heads.lock().unwrap().as_ref().is_some_and(|heads| {
            sids.iter()
                .all(|sid| cursor(events, sid) >= heads.get(sid).copied().unwrap_or(0))
        })
    };
    loop {
        let path = match &what {
            Follow::Scoped(sid) => format!(
                "/v1/sessions/{sid}/events?after_seq={}",
                cursor(&seen.events, sid)
            ),
            Follow::Mux(sids) => {
                let subs: Vec<String> = sids
                    .iter()
                    .map(|sid| format!("sub=session:{sid}:{}", cursor(&seen.events, sid)))
                    .collect();
                format!("/v1/stream?{}", subs.join("&"))
            }
        };
        let opened = Instant::now();
        if phase.load(Ordering::Relaxed) == RESTARTING {
            seen.opened_in_outage += 1;
        }
        let mut sse = open_sse(&http, &format!("{base}{path}"), None).await;
        let mut mine = false;
        while sse.status == 200 {
            let every = match phase.load(Ordering::Relaxed) {
                RESTARTING => Duration::from_millis(50),
                _ => Duration::from_millis(400),
            };
            if reopen && opened.elapsed() > every {
                mine = true;
                break;
            }
            match sse.next(Duration::from_millis(50)).await {
                Some(f) if is_type(&f, "subscription.error") => break,
                Some(f) => {
                    if let Some(env) = f.env().filter(|e| e.is_durable()) {
                        let list = seen.events.entry(env.scope_id.clone()).or_default();
                        list.push(env.clone());
                    }
                }
                None if sse.ended => break,
                None => {}
            }
            if done(&seen.events) {
                return seen;
            }
            assert!(Instant::now() < deadline, "{} never caught up", seen.name);
        }
        if done(&seen.events) {
            return seen;
        }
        assert!(Instant::now() < deadline, "{} never caught up", seen.name);
        if mine {
            seen.reopened += 1;
        } else {
            seen.lost += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The turn an event of a plain message's turn names.
fn turn_of(event: &Event) -> Option<&str> {
    match event {
        Event::TurnStarted(t) => Some(&t.turn_id),
        Event::MessageCommitted(m) => Some(&m.turn_id),
        Event::TurnCompleted(t) | Event::TurnCancelled(t) => Some(&t.turn_id),
        Event::TurnFailed(t) => Some(&t.turn_id),
        _ => None,
    }
}

fn is_end(event: &Event) -> bool {
    matches!(
        event,
        Event::TurnCompleted(_) | Event::TurnCancelled(_) | Event::TurnFailed(_)
    )
}

/// Every session's stored log, read from `server`.
async fn logs(server: &Server, sessions: &[String]) -> HashMap<String, Vec<Envelope>> {
    let mut out = HashMap::new();
    for sid in sessions {
        out.insert(sid.clone(), server.events(&format!("sessions/{sid}")).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_clients_ride_out_a_postgres_restart_under_load() {
    let Some(restart) = restart_argv() else {
        return;
    };
    // Short enough that the turns the outage stopped end within the test,
    // longer than the outage (about 0.2 s here).
    restart_under_load(&restart, 1500).await;
    // Shorter than the outage: the turns running or queued then are
    // claimed by one node while the other still runs them.
    restart_under_load(&restart, 150).await;
}

/// One run of the scenario with turn leases of `lease_ms`.
async fn restart_under_load(restart: &[String], lease_ms: u64) {
    let Some(db) = fresh_db("pgrestart").await else {
        return;
    };
    let lease = lease_ms.to_string();
    // A few ms between deltas: turns are running when Postgres goes away.
    let flags = ["--turn-lease-ms", lease.as_str(), "--delta-ms", "3"];
    let nodes = [Node::start(&db, &flags), Node::start(&db, &flags)];
    let bases: Vec<String> = nodes.iter().map(|n| n.server.base.clone()).collect();
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        sessions.push(nodes[i % 2].server.create_session().await);
    }
    let sessions = Arc::new(sessions);
    let started = Instant::now();

    let heads: Arc<Mutex<Option<HashMap<String, u64>>>> = Arc::default();
    let phase = Arc::new(AtomicU8::new(BEFORE_RESTART));
    let deadline = started + Duration::from_secs(45);
    let mut followers = Vec::new();
    for (node, base) in bases.iter().enumerate() {
        let mut what: Vec<Follow> = sessions.iter().cloned().map(Follow::Scoped).collect();
        what.push(Follow::Mux(sessions.to_vec()));
        for (i, w) in what.into_iter().enumerate() {
            // Half the followers also drop and reopen their stream now and
            // then, so that some reconnect while Postgres is down.
            let reopen = (node + i) % 2 == 1;
            followers.push(tokio::spawn(follow(
                base.clone(),
                w,
                reopen,
                Arc::clone(&phase),
                Arc::clone(&heads),
                deadline,
            )));
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    let tally = Arc::new(Tally {
        since: started,
        unexpected: Mutex::default(),
        failed: AtomicUsize::default(),
        busy: AtomicUsize::default(),
        abandoned: AtomicUsize::default(),
    });
    let mut writers = Vec::new();
    for (node, base) in bases.iter().enumerate() {
        for writer in 0..WRITERS_PER_NODE {
            writers.push(tokio::spawn(write(
                node,
                writer,
                base.clone(),
                Arc::clone(&sessions),
                Arc::clone(&stop),
                Arc::clone(&acks),
                Arc::clone(&tally),
            )));
        }
    }

    tokio::time::sleep(BEFORE).await;
    let acked_before = acks.lock().unwrap().len();
    assert!(acked_before > 0, "writes went through before the restart");
    let crashed = Instant::now();
    phase.store(RESTARTING, Ordering::Relaxed);
    let restart = restart.to_vec();
    let status = tokio::task::spawn_blocking(move || {
        // Not captured: a command without `-l` leaves the restarted
        // postmaster holding pg_ctl's output open, so reading it to its
        // end would never return.
        std::process::Command::new(&restart[0])
            .args(&restart[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("the restart command runs")
    })
    .await
    .unwrap();
    assert!(status.success(), "restart failed: {status}");
    let back = Instant::now();
    phase.store(AFTER_RESTART, Ordering::Relaxed);
    let outage = back - crashed;
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acks = std::mem::take(&mut *acks.lock().unwrap());
    let unexpected = tally.unexpected.lock().unwrap().clone();
    assert!(
        unexpected.is_empty(),
        "answers besides 2xx and 5xx: {unexpected:?}"
    );

    // Both nodes accept writes again, soon after Postgres does.
    let mut writable = Vec::new();
    for node in 0..nodes.len() {
        let first = acks
            .iter()
            .filter(|a| a.node == node && a.sent >= back)
            .map(|a| a.acked)
            .min()
            .unwrap_or_else(|| panic!("node {node} accepted no write after the restart"));
        let took = first - back;
        assert!(took < WRITABLE_WITHIN, "node {node} took {took:?}");
        writable.push(took);
    }

    // Every acknowledged turn ends (a turn its node could not renew during
    // the outage is ended by the lease, a lease and a third later).
    let end_by = Instant::now() + Duration::from_secs(20);
    let stored = loop {
        let stored = logs(&nodes[0].server, &sessions).await;
        let ended: HashSet<&str> = stored
            .values()
            .flatten()
            .filter(|e| is_end(&e.event))
            .filter_map(|e| turn_of(&e.event))
            .collect();
        let ended = acks
            .iter()
            .filter(|a| ended.contains(a.turn_id.as_str()))
            .count();
        if ended == acks.len() {
            break stored;
        }
        assert!(
            Instant::now() < end_by,
            "{ended} of {} turns ended",
            acks.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Two leases more: no second end from either node.
    tokio::time::sleep(Duration::from_millis((2 * lease_ms).max(1000))).await;
    let again = logs(&nodes[0].server, &sessions).await;
    assert_eq!(again, stored, "the log changed after every turn had ended");
    let on_b = logs(&nodes[1].server, &sessions).await;
    assert_eq!(on_b, stored, "both nodes serve the same log");

    let mut failed = 0;
    for (sid, events) in &stored {
        assert_dense(events);
        // Per turn: its events in log order.
        let mut turns: HashMap<&str, Vec<&Event>> = HashMap::new();
        for e in events {
            if let Some(t) = turn_of(&e.event) {
                turns.entry(t).or_default().push(&e.event);
            }
        }
        for (turn, events) in &turns {
            let ends: Vec<_> = events.iter().filter(|e| is_end(e)).collect();
            assert_eq!(ends.len(), 1, "{sid} {turn} ends once: {events:?}");
            assert!(
                is_end(events.last().unwrap()),
                "{sid} {turn}: nothing after its end: {events:?}"
            );
            let starts = events
                .iter()
                .filter(|e| matches!(e, Event::TurnStarted(_)))
                .count();
            assert!(starts <= 1, "{sid} {turn} started twice: {events:?}");
            match ends[0] {
                Event::TurnCompleted(_) => {}
                Event::TurnFailed(f) => {
                    assert_eq!(f.reason, REASON_WORKER_RESTART, "{sid} {turn}");
                    failed += 1;
                }
                other => panic!("{sid} {turn} ended with {other:?}"),
            }
        }
    }
    // Every acknowledged message is in the log once, with its turn.
    for a in &acks {
        let found: Vec<_> = stored[&a.sid]
            .iter()
            .filter(|e| {
                matches!(&e.event, Event::MessageCommitted(m)
                    if m.role == Role::User && m.message_id == a.message_id)
            })
            .collect();
        assert_eq!(found.len(), 1, "{} in {}: {found:?}", a.message_id, a.sid);
        let Event::MessageCommitted(m) = &found[0].event else {
            unreachable!()
        };
        assert_eq!(m.turn_id, a.turn_id, "{}", a.message_id);
    }

    // Followers: with the final heads known, each catches up and has seen
    // exactly the log (dense, no duplicate, nothing else).
    let final_heads = stored
        .iter()
        .map(|(sid, e)| (sid.clone(), e.len() as u64))
        .collect();
    *heads.lock().unwrap() = Some(final_heads);
    let (mut lost, mut reopened, mut in_outage) = (Vec::new(), Vec::new(), 0);
    for f in followers {
        let seen = f.await.unwrap();
        for (sid, events) in &seen.events {
            assert_eq!(events, &stored[sid], "{} on {sid}", seen.name);
        }
        lost.push(seen.lost);
        reopened.push(seen.reopened);
        in_outage += seen.opened_in_outage;
    }
    assert!(
        in_outage > 0,
        "some follower reconnected during the restart"
    );

    // The transcripts both nodes serve fold from the log.
    for node in &nodes {
        for sid in sessions.iter() {
            let theirs = node.server.transcript(sid).await;
            let ours = fold(&theirs.epoch, &stored[sid]);
            assert!(transcript_eq(&ours, &theirs), "{} {sid}", node.server.base);
        }
    }

    // Diagnostics: both nodes read the store again and have published all of it.
    let total: usize = stored.values().map(Vec::len).sum();
    let mut diags = Vec::new();
    for node in &nodes {
        // The node's published head reaches the log's within a safety poll.
        let by = Instant::now() + Duration::from_secs(5);
        let d = loop {
            let (status, d) = node.server.get("/v1/diagnostics").await;
            assert_eq!(status, 200, "{d}");
            if d["head"] == d["events"] || Instant::now() > by {
                break d;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(d["store"]["synchronous"].is_string(), "{d}");
        assert_eq!(d["running_turns"], 0, "{d}");
        assert_eq!(d["sessions"], SESSIONS, "{d}");
        // Sessions' events plus the system log's (boots, recoveries).
        assert!(d["events"].as_u64().unwrap() >= total as u64, "{d}");
        assert_eq!(d["head"], d["events"], "every event published: {d}");
        diags.push(d);
    }
    assert_eq!(diags[0]["events"], diags[1]["events"]);

    eprintln!(
        "postgres restart, {lease_ms} ms leases: command took {outage:?}; writes accepted again {:?} after it \
         (nodes A, B); {} messages acknowledged ({acked_before} before the restart), \
         {} POSTs failed and retried, {} refused as busy, {} given up unanswered at the end; \
         {failed} of {} turns failed with worker_restart; streams lost (per follower) {lost:?}, reopened by the follower {reopened:?} \
         ({in_outage} opened during the restart); \
         whole run {:?}",
        writable,
        acks.len(),
        tally.failed.load(Ordering::Relaxed),
        tally.busy.load(Ordering::Relaxed),
        tally.abandoned.load(Ordering::Relaxed),
        acks.len(),
        started.elapsed(),
    );
}
