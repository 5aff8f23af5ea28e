//! The multiplexed stream (PROTOCOL.md §4.6) over real HTTP: per-scope
//! openings, in-band subscription errors, per-scope heartbeats, the limits,
//! the handoff race per scope with several writers, and a changed set of
//! scopes (new stream, then the old one closed) that loses and duplicates
//! nothing when the client drops by seq.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Envelope, Event};
use replay_server::fanout::LagPolicy;
use replay_server::util::Rng;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A scope as the tests name it: (`team`, `t1`).
type ScopeKey = (String, String);

fn key(env: &Envelope) -> ScopeKey {
    (env.scope.as_str().to_owned(), env.scope_id.clone())
}

fn team(id: &str) -> ScopeKey {
    ("team".to_owned(), id.to_owned())
}

/// Opens `/v1/stream` with these `sub` values.
async fn mux(s: &Server, subs: &[String]) -> Sse {
    let q: Vec<String> = subs.iter().map(|v| format!("sub={v}")).collect();
    s.stream(&format!("/v1/stream?{}", q.join("&")), None).await
}

/// The `data` of an event as JSON (also for types this version does not know).
fn data(env: &Envelope) -> Value {
    serde_json::from_str(&env.event.data_json()).unwrap()
}

fn ty(f: &Frame) -> &str {
    match f {
        Frame::Event { ty, .. } => ty,
        Frame::Retry(_) => "retry",
    }
}

/// Reads until every scope in `keys` has sent `hello` or `subscription.error`.
async fn until_opened(sse: &mut Sse, keys: &[ScopeKey]) -> Vec<Frame> {
    let mut left: HashSet<&ScopeKey> = keys.iter().collect();
    let mut frames = Vec::new();
    while !left.is_empty() {
        let f = sse.next(5 * SEC).await.expect("every scope opens");
        if matches!(ty(&f), "hello" | "subscription.error") {
            left.remove(&key(f.env().unwrap()));
        }
        frames.push(f);
    }
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_scope_opens_in_turn_then_live_events_interleave() {
    let s = server().await;
    let sid = s.create_session().await;
    for i in 0..3 {
        s.append("team", "a", i).await;
    }
    let subs = [
        "team:a:1".to_owned(),
        format!("session:{sid}:0"),
        "system::".to_owned(),
    ];
    let mut sse = mux(&s, &subs).await;
    assert_eq!(sse.status, StatusCode::OK, "{:?}", sse.error_body);
    assert_eq!(sse.headers["content-type"], "text/event-stream");
    assert_eq!(sse.headers["cache-control"], "no-cache");
    assert_eq!(sse.headers["x-accel-buffering"], "no");
    assert!(sse.headers.get("content-encoding").is_none());

    let keys = [
        team("a"),
        ("session".into(), sid.clone()),
        ("system".into(), "runtime".into()),
    ];
    let mut frames = until_opened(&mut sse, &keys).await;
    frames.extend(sse.collect_for(Duration::from_millis(100)).await);
    assert!(matches!(frames[0], Frame::Retry(1000)), "retry: first");
    let seen: Vec<(String, String, Option<u64>)> = frames[1..]
        .iter()
        .map(|f| {
            let env = f.env().unwrap();
            (env.scope_id.clone(), ty(f).to_owned(), env.seq)
        })
        .collect();
    let expected = [
        ("a", "hello", None),
        ("a", "team.message", Some(2)),
        ("a", "team.message", Some(3)),
        (sid.as_str(), "hello", None),
        (sid.as_str(), "session.created", Some(1)),
        (sid.as_str(), "live_turn.snapshot", None),
        (sid.as_str(), "tasks.snapshot", None),
        ("runtime", "hello", None),
    ];
    let expected: Vec<(String, String, Option<u64>)> = expected
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), *c))
        .collect();
    assert_eq!(
        seen[..expected.len()],
        expected[..],
        "scope by scope, in order"
    );
    // The system scope is live only ("system::"): nothing of its backlog.
    assert!(seen[expected.len()..]
        .iter()
        .all(|(_, t, _)| t == "heartbeat"));
    // Cursors travel in `sub`: durable frames carry no `id:` line.
    assert!(frames
        .iter()
        .all(|f| !matches!(f, Frame::Event { id: Some(_), .. })));

    s.append("team", "a", 3).await;
    let turn = s.send(&sid, "m1", "hello there").await;
    s.wait_turn_end(&sid, &turn).await;
    let live = sse.collect_for(Duration::from_millis(300)).await;
    let seqs = |scope_id: &str| -> Vec<u64> {
        live.iter()
            .filter_map(|f| f.env().filter(|e| e.scope_id == scope_id)?.seq)
            .collect()
    };
    assert_eq!(seqs("a"), vec![4]);
    let session = seqs(&sid);
    assert_eq!(session, (2..2 + session.len() as u64).collect::<Vec<_>>());
    assert!(live.iter().any(|f| ty(f) == "turn.delta"), "transients too");
    assert_eq!(
        session.len(),
        s.events(&format!("sessions/{sid}")).await.len() - 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_sub_leaves_the_others_flowing() {
    let s = server().await;
    for id in ["ok", "ahead", "badcursor"] {
        s.append("team", id, 0).await;
    }
    let subs = [
        "session:nope:0",
        "team:ok:0",
        "team:badcursor:x1",
        "team:ahead:9",
    ]
    .map(str::to_owned);
    let mut sse = mux(&s, &subs).await;
    assert_eq!(sse.status, StatusCode::OK);
    let keys = [
        ("session".to_owned(), "nope".to_owned()),
        team("ok"),
        team("badcursor"),
        team("ahead"),
    ];
    let frames = until_opened(&mut sse, &keys).await;
    let errors: HashMap<String, Value> = frames
        .iter()
        .filter(|f| ty(f) == "subscription.error")
        .map(|f| {
            let env = f.env().unwrap();
            assert!(env.seq.is_none() && env.critical, "transient, critical");
            (env.scope_id.clone(), data(env))
        })
        .collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(errors["nope"]["error"], "not_found");
    assert_eq!(errors["badcursor"]["error"], "invalid_cursor");
    let ahead = &errors["ahead"];
    assert_eq!(ahead["error"], "cursor_ahead");
    assert_eq!(ahead["head"], 1);
    let (_, page) = s.get("/v1/teams/ahead/events").await;
    assert_eq!(ahead["epoch"], page["epoch"]);
    assert!(ahead["message"].as_str().is_some_and(|m| !m.is_empty()));

    // The good sub flows; the refused ones get nothing more, even when
    // their logs grow.
    for id in ["ok", "ahead", "badcursor", "ok"] {
        s.append("team", id, 1).await;
    }
    let live = sse.collect_for(Duration::from_millis(800)).await;
    assert!(!sse.ended);
    let durable: Vec<(String, u64)> = frames
        .iter()
        .chain(&live)
        .filter_map(|f| f.env().and_then(|e| Some((e.scope_id.clone(), e.seq?))))
        .collect();
    let ok = |n| ("ok".to_owned(), n);
    assert_eq!(durable, vec![ok(1), ok(2), ok(3)]);
    assert!(
        live.iter().all(|f| f.env().unwrap().scope_id == "ok"),
        "nothing more for refused scopes"
    );
    assert!(live.iter().any(|f| ty(f) == "heartbeat"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_subs_work_and_sixty_five_are_refused() {
    let s = server().await;
    for i in 0..65 {
        s.append("team", &format!("t{i}"), 0).await;
    }
    let subs: Vec<String> = (0..65).map(|i| format!("team:t{i}:0")).collect();
    let mut sse = mux(&s, &subs[..64]).await;
    assert_eq!(sse.status, StatusCode::OK, "{:?}", sse.error_body);
    let keys: Vec<ScopeKey> = (0..64).map(|i| team(&format!("t{i}"))).collect();
    until_opened(&mut sse, &keys).await;
    s.append("team", "t63", 1).await;
    s.append("team", "t0", 1).await;
    // Across scopes no order is promised (§4.6): wait for the 64th's own.
    sse.until(5 * SEC, |f| {
        f.seq() == Some(2) && f.env().is_some_and(|e| e.scope_id == "t63")
    })
    .await
    .expect("live events of the 64th scope");

    let refused = mux(&s, &subs).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.error_body.unwrap()["error"], "invalid_subscription");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_duplicate_sets_are_refused_whole() {
    let s = server().await;
    s.append("team", "t", 0).await;
    for bad in [
        vec!["team:t:0", "team:t:1"],
        vec!["system::0", "system:runtime:0"],
        vec!["team:t"],
        vec!["team:t:0", "global::0"],
        vec!["team:a%20b:0"],
        vec![],
    ] {
        let subs: Vec<String> = bad.iter().map(|v| (*v).to_owned()).collect();
        let sse = mux(&s, &subs).await;
        assert_eq!(sse.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(sse.error_body.unwrap()["error"], "invalid_subscription");
    }
    // Percent-encoded colons (what URLSearchParams writes) are the same sub.
    let mut sse = mux(&s, &["team%3At%3A0".to_owned()]).await;
    assert_eq!(sse.status, StatusCode::OK);
    until_opened(&mut sse, &[team("t")]).await;
    let f = sse.until(SEC, |f| f.seq().is_some()).await.unwrap();
    assert_eq!(f.seq(), Some(1));
}

/// A busy scope does not keep a quiet one from its heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_scope_gets_its_own_heartbeat() {
    let s = Arc::new(server().await); // heartbeat every 300 ms
    s.append("team", "busy", 0).await;
    s.append("team", "quiet", 0).await;
    s.append("team", "quiet", 1).await;
    let mut sse = mux(&s, &["team:busy:".into(), "team:quiet:".into()]).await;
    until_opened(&mut sse, &[team("busy"), team("quiet")]).await;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, done) = (Arc::clone(&s), Arc::clone(&done));
        tokio::spawn(async move {
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                s.append("team", "busy", n).await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let started = Instant::now();
    let mut beats = Vec::new();
    let mut busy = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        let f = sse.next(SEC).await.expect("frames keep coming");
        let env = f.env().unwrap();
        match (env.scope_id.as_str(), ty(&f)) {
            ("quiet", "heartbeat") => {
                assert_eq!(data(env)["head"], 2);
                beats.push(started.elapsed());
            }
            ("busy", _) if env.seq.is_some() => busy += 1,
            _ => {}
        }
    }
    done.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    assert!(busy >= 10, "the busy scope was busy ({busy})");
    // 300 ms intervals over 1.5 s: at least 4 beats, none far apart.
    assert!(beats.len() >= 4, "{beats:?}");
    let gaps = beats.windows(2).map(|w| w[1] - w[0]);
    assert!(
        gaps.clone().all(|g| g < Duration::from_millis(600)),
        "{beats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_scope_ends_the_stream_in_order() {
    let s = server_with(|c| {
        c.subscriber_buffer = 4;
        c.lag_policy = LagPolicy::Disconnect;
    })
    .await;
    s.append("team", "lag", 0).await;
    s.append("team", "calm", 0).await;
    let mut sse = mux(&s, &["team:calm:1".into(), "team:lag:1".into()]).await;
    until_opened(&mut sse, &[team("calm"), team("lag")]).await;
    s.fault(json!({"kind": "stall"})).await;
    for i in 0..12 {
        s.append("team", "lag", i).await;
    }
    s.fault(json!({"kind": "clear"})).await;
    let frames = sse.collect_for(Duration::from_millis(800)).await;
    assert!(sse.ended, "disconnected");
    let seqs: Vec<u64> = frames.iter().filter_map(Frame::seq).collect();
    assert_eq!(seqs, (2..2 + seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() < 12);
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    assert_eq!(comms["lagged"], 1);
}

/// Per-scope client state: applies by seq as §6 rule 3 says.
#[derive(Default)]
struct Cursors {
    cursor: HashMap<ScopeKey, u64>,
    applied: HashMap<ScopeKey, u64>,
    duplicates: u64,
}

impl Cursors {
    /// Applies one frame; a seq beyond `cursor + 1` is a gap: the server lost one.
    fn apply(&mut self, f: &Frame, what: &str) {
        let Some(env) = f.env() else { return };
        let Some(seq) = env.seq else { return };
        let k = key(env);
        let cursor = self.cursor.get_mut(&k).expect("a scope of the set");
        assert!(
            seq <= *cursor + 1,
            "gap in {k:?}: {seq} after {cursor} ({what})"
        );
        if seq <= *cursor {
            self.duplicates += 1;
        } else {
            *cursor = seq;
            *self.applied.entry(k).or_insert(0) += 1;
        }
    }

    /// The `sub` that resumes a scope from its cursor (0 when new).
    fn sub(&mut self, k: &ScopeKey) -> String {
        let c = self.cursor.entry(k.clone()).or_insert(0);
        format!("{}:{}:{c}", k.0, k.1)
    }
}

/// Opens a stream that resumes `keys` from the client's cursors.
async fn open_from(s: &Server, state: &mut Cursors, keys: &[ScopeKey]) -> Sse {
    let subs: Vec<String> = keys.iter().map(|k| state.sub(k)).collect();
    let sse = mux(s, &subs).await;
    assert_eq!(sse.status, StatusCode::OK, "{:?}", sse.error_body);
    sse
}

/// Several writers append to a few scopes while subscribers connect with
/// random cursors, read a while and drop; each connection must see every
/// scope's durable events dense, ordered and without duplicates from its
/// cursor (or from `hello.head` when live only), and finally reach the heads.
async fn race(s: Server) {
    const SCOPES: usize = 3;
    const WRITERS: u64 = 4;
    const WRITES: u64 = 120;
    const SUBSCRIBERS: u64 = 16;
    let s = Arc::new(s);
    let keys: Vec<ScopeKey> = (0..SCOPES).map(|i| team(&format!("r{i}"))).collect();
    for k in &keys {
        s.append("team", &k.1, 0).await;
    }
    let heads: Arc<Mutex<HashMap<ScopeKey, u64>>> =
        Arc::new(Mutex::new(keys.iter().map(|k| (k.clone(), 1)).collect()));
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (s, heads, keys) = (Arc::clone(&s), Arc::clone(&heads), keys.clone());
        writers.push(tokio::spawn(async move {
            let mut rng = Rng::new(w);
            for i in 0..WRITES {
                let k = &keys[rng.below(SCOPES as u64) as usize];
                let env = s.append("team", &k.1, i).await;
                let seq = env["seq"].as_u64().unwrap();
                let mut h = heads.lock().unwrap();
                let head = h.get_mut(k).unwrap();
                *head = (*head).max(seq);
            }
        }));
    }
    let mut subs = Vec::new();
    for n in 0..SUBSCRIBERS {
        let (s, done, heads, keys) = (
            Arc::clone(&s),
            Arc::clone(&done),
            Arc::clone(&heads),
            keys.clone(),
        );
        subs.push(tokio::spawn(async move {
            let mut rng = Rng::new(500 + n);
            let mut last: HashMap<ScopeKey, u64> = HashMap::new();
            let mut connections = 0;
            loop {
                let finished = done.load(Ordering::SeqCst);
                let snapshot = heads.lock().unwrap().clone();
                let subs: Vec<String> = keys
                    .iter()
                    .map(|k| {
                        let mine = last.get(k).copied().unwrap_or(0);
                        let c = match (finished, rng.below(4)) {
                            (true, _) | (_, 0) => Some(mine),
                            (_, 1) => None,
                            _ => Some(rng.below(snapshot[k] + 1)),
                        };
                        format!(
                            "team:{}:{}",
                            k.1,
                            c.map_or(String::new(), |c| c.to_string())
                        )
                    })
                    .collect();
                let frames = if finished {
                    usize::MAX
                } else {
                    1 + rng.below(150) as usize
                };
                let mut sse = mux(&s, &subs).await;
                assert_eq!(sse.status, StatusCode::OK);
                connections += 1;
                let mut expect: HashMap<ScopeKey, u64> = keys
                    .iter()
                    .zip(&subs)
                    .filter_map(|(k, sub)| {
                        let c = sub.rsplit(':').next().unwrap();
                        Some((k.clone(), c.parse::<u64>().ok()? + 1))
                    })
                    .collect();
                let mut got = 0;
                let target = heads.lock().unwrap().clone();
                // Heartbeats keep an idle stream busy: give up after a second
                // without a durable frame (the writers may be done).
                let mut idle_until = Instant::now() + SEC;
                while got < frames && Instant::now() < idle_until {
                    let Some(f) = sse.next(SEC).await else { break };
                    let Some(env) = f.env() else { continue };
                    let k = key(env);
                    if let Event::Hello(h) = &env.event {
                        expect.entry(k).or_insert(h.head + 1);
                        continue;
                    }
                    let Some(seq) = env.seq else { continue };
                    let e = expect.get_mut(&k).expect("hello came first");
                    assert_eq!(seq, *e, "dense, ordered, no duplicates in {k:?}");
                    *e += 1;
                    last.insert(k, seq);
                    got += 1;
                    idle_until = Instant::now() + SEC;
                    if finished && keys.iter().all(|k| last.get(k) >= target.get(k)) {
                        break;
                    }
                }
                if finished {
                    let target = heads.lock().unwrap().clone();
                    if keys.iter().all(|k| last.get(k) == target.get(k)) {
                        return connections;
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.below(20))).await;
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let mut total = 0;
    for sub in subs {
        total += sub.await.unwrap();
    }
    assert!(
        total > SUBSCRIBERS,
        "subscribers reconnected during the race"
    );
    let heads = heads.lock().unwrap();
    assert_eq!(
        heads.values().sum::<u64>(),
        SCOPES as u64 + WRITERS * WRITES,
        "every write is counted once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_is_race_free_per_scope_with_several_writers() {
    race(server().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_is_race_free_per_scope_on_a_file_store() {
    let db = TempDb::new("mux-race");
    let path = db.0.clone();
    race(server_with(move |c| c.db = path).await).await;
}

/// Drains both streams a little at a time until `new` has opened `keys`.
async fn overlap(old: &mut Sse, new: &mut Sse, keys: &[ScopeKey], state: &mut Cursors) {
    let mut left: HashSet<ScopeKey> = keys.iter().cloned().collect();
    let deadline = Instant::now() + 5 * SEC;
    while !left.is_empty() {
        assert!(Instant::now() < deadline, "new stream opened {left:?}");
        if let Some(f) = old.next(Duration::from_millis(5)).await {
            state.apply(&f, "old");
        }
        while let Some(f) = new.next(Duration::from_millis(5)).await {
            if ty(&f) == "hello" {
                left.remove(&key(f.env().unwrap()));
            }
            state.apply(&f, "new");
            if left.is_empty() {
                break;
            }
        }
    }
}

/// A client switches its set of scopes (adds, then removes) while writers
/// append to all of them: each switch opens the new stream from its cursors
/// and closes the old one after the new one's hellos. Dropping by seq, it
/// applies every event exactly once: no gap, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_set_loses_and_duplicates_nothing() {
    let s = Arc::new(server().await);
    let all: Vec<ScopeKey> = ["a", "b", "c"].iter().map(|id| team(id)).collect();
    for k in &all {
        s.append("team", &k.1, 0).await;
    }
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..3u64 {
        let (s, done, all) = (Arc::clone(&s), Arc::clone(&done), all.clone());
        writers.push(tokio::spawn(async move {
            let mut rng = Rng::new(77 + w);
            let mut i = 0;
            while !done.load(Ordering::SeqCst) {
                let k = &all[rng.below(3) as usize];
                s.append("team", &k.1, i).await;
                i += 1;
                tokio::time::sleep(Duration::from_millis(rng.below(3))).await;
            }
        }));
    }
    let mut state = Cursors::default();
    let sets: [&[usize]; 5] = [&[0], &[0, 1], &[0, 1, 2], &[1, 2], &[0, 1, 2]];
    let mut current: Option<Sse> = None;
    for set in sets {
        let keys: Vec<ScopeKey> = set.iter().map(|&i| all[i].clone()).collect();
        let mut new = open_from(&s, &mut state, &keys).await;
        match current.take() {
            Some(mut old) => overlap(&mut old, &mut new, &keys, &mut state).await,
            None => {
                for f in until_opened(&mut new, &keys).await {
                    state.apply(&f, "first");
                }
            }
        }
        // The old stream is dropped (closed) here; the new one runs a while.
        for f in new.collect_for(Duration::from_millis(150)).await {
            state.apply(&f, "current");
        }
        current = Some(new);
    }
    done.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    let mut sse = current.unwrap();
    let mut heads = HashMap::new();
    for k in &all {
        heads.insert(
            k.clone(),
            s.events(&format!("teams/{}", k.1)).await.len() as u64,
        );
    }
    while all.iter().any(|k| state.cursor.get(k) != heads.get(k)) {
        let f = sse
            .next(2 * SEC)
            .await
            .expect("the stream reaches the heads");
        state.apply(&f, "final");
    }
    assert!(
        state.duplicates > 0,
        "the overlaps delivered some events twice"
    );
    // Scope `a` left the set for a while: it caught up from its cursor, so
    // every scope applied each of its events once, from seq 1.
    for k in &all {
        assert_eq!(state.applied[k], heads[k], "{k:?}");
    }
}

/// `streams_open` counts open SSE bodies, scoped and multiplexed (the
/// browser tests check "one connection per browser" with it), and drops
/// when a client goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_open_counts_scoped_and_multiplexed_streams() {
    let s = server().await;
    s.append("team", "gauge", 0).await;
    let open = |c: &Value| c["streams_open"].as_u64().unwrap();
    let scoped = s.stream("/v1/teams/gauge/events", None).await;
    let mut muxed = mux(&s, &["team:gauge:".into()]).await;
    until_opened(&mut muxed, &[team("gauge")]).await;
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    assert_eq!(open(&comms), 2, "{comms}");
    drop((scoped, muxed));
    let deadline = Instant::now() + 5 * SEC;
    loop {
        let (_, comms) = s.get("/v1/diagnostics/comms").await;
        if open(&comms) == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{comms}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_multiplex_the_stream_is_not_found_and_scoped_streams_serve() {
    let s = server_with(|c| c.no_multiplex = true).await;
    let sid = s.create_session().await;
    let (status, body) = s.get("/v1/stream?sub=team:t:0").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "not_found");
    let mut scoped = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    let f = loop {
        let f = scoped.next(5 * SEC).await.expect("the scoped stream opens");
        if ty(&f) != "retry" {
            break f;
        }
    };
    assert_eq!(ty(&f), "hello");
}
