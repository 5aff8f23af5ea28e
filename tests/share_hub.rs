//! One connection per browser: a hub serving real machines over
//! one connection of a fake multiplexed server.

mod share_support;

use replay_client::core::machine::{CoreError, Lifecycle, RequestId, Response, State, Target};
use replay_client::core::protocol::{Envelope, Event};
use replay_client::core::share::{Output, Share, ShareConfig, SET_DEBOUNCE_MS};
use serde_json::json;
use share_support::{control, frame, message, World, BOOT, EPOCH};

/// One hub, three sessions, two machines on each.
fn one_hub() -> (World, Vec<u64>) {
    let mut w = World::new(&[("a", 5), ("b", 3), ("c", 0)]);
    let t = w.add_ctx();
    let ms = ["a", "b", "b", "c", "a", "c"]
        .into_iter()
        .map(|sid| w.follow(t, sid, None))
        .collect();
    w.advance(100);
    (w, ms)
}

#[test]
fn every_machine_converges_over_one_connection() {
    let (mut w, _) = one_hub();
    w.assert_converged();
    for i in 0..12 {
        w.server.append(["a", "b", "c"][i % 3]);
        if i % 4 == 0 {
            w.settle();
        }
    }
    w.advance(50);
    w.assert_converged();
    assert_eq!(w.server.conns.len(), 1, "one connection for every scope");
    assert_eq!(w.carried().len(), 3);
    let d = w.ctxs[0].share.diagnostics();
    assert_eq!((d.scopes, d.local_streams, d.connections_opened), (3, 6, 1));
    // Nothing was repaired or seen twice in steady state.
    for c in &w.ctxs {
        for (_, m) in &c.machines {
            assert_eq!(m.counters().duplicates_dropped, 0);
            assert_eq!(m.counters().gaps_repaired, 0);
        }
    }
}

#[test]
fn a_late_machine_goes_live_and_repairs_its_own_gap() {
    let (mut w, ms) = one_hub();
    // A machine of `a` loses its stream (offline) while the log grows.
    let (t, m) = (0, ms[4]);
    let now = w.now;
    w.machine_mut(t, m)
        .handle_lifecycle(Lifecycle::Offline, now);
    w.settle();
    for _ in 0..4 {
        w.server.append("a");
    }
    w.settle();
    assert_eq!(w.machine(t, m).cursor(), 5);
    // Back online: it resubscribes from its cursor; the scope is flowing,
    // so it is greeted with the head and repairs by its own fetch.
    let now = w.now;
    w.machine_mut(t, m).handle_lifecycle(Lifecycle::Online, now);
    w.settle();
    assert_eq!(w.machine(t, m).status().state, State::Live);
    assert_eq!(w.machine(t, m).cursor(), 9);
    assert_eq!(w.machine(t, m).counters().gaps_repaired, 1);
    // A brand-new machine (restoring: live-only stream + replay).
    let late = w.follow(t, "a", None);
    w.settle();
    assert_eq!(w.machine(t, late).status().state, State::Live);
    w.server.append("a");
    w.advance(10);
    w.assert_converged();
    assert_eq!(w.server.conns.len(), 1);
}

#[test]
fn a_set_change_loses_and_duplicates_nothing() {
    let mut w = World::new(&[("a", 5), ("b", 2)]);
    let t0 = w.add_ctx();
    w.follow(t0, "a", None);
    w.follow(t0, "a", None);
    w.advance(100);
    w.assert_converged();
    let first = w.server.conns[0].id;
    // A machine of another scope: a new connection; the old one keeps flowing.
    w.follow(t0, "b", None);
    w.advance(30);
    assert_eq!(w.server.conns.len(), 1, "switched already");
    // Again, with the new connection slow: events meanwhile reach both.
    w.follow(t0, "c_missing", None);
    w.settle();
    let before = w.server.conns.len();
    w.now += 30;
    // Fire the debounce only, holding new connections back.
    let now = w.now;
    w.ctxs[t0].share.handle_timeout(now);
    while let Some(o) = w.ctxs[t0].share.poll_output() {
        if let replay_client::core::share::Output::OpenMux { id, path_and_query } = o {
            w.server.open(t0, id, &path_and_query);
            w.server.conn_mut(t0, id).unwrap().paused = true;
        }
    }
    assert_eq!(w.server.conns.len(), before + 1);
    for _ in 0..3 {
        w.server.append("a");
        w.server.append("b");
        w.settle();
    }
    // The old connection carried them; the new one now says its hellos
    // and repeats those events, which are dropped.
    for c in &mut w.server.conns {
        c.paused = false;
    }
    w.settle();
    assert_eq!(
        w.server.conns.len(),
        1,
        "old connection closed after the hellos"
    );
    assert_ne!(w.server.conns[0].id, first);
    w.server.append("a");
    w.advance(10);
    for c in &w.ctxs {
        for (_, m) in &c.machines {
            if m.config().target.key() == "session:c_missing" {
                continue;
            }
            assert_eq!(
                m.counters().duplicates_dropped,
                0,
                "{:?}",
                m.config().target
            );
            assert_eq!(m.counters().gaps_repaired, 0);
            assert_eq!(m.counters().reconnects, 0);
        }
    }
    assert!(w.ctxs[t0].share.diagnostics().duplicates_dropped >= 3);
    w.assert_converged();
}

#[test]
fn a_subscription_error_leaves_the_other_scopes_flowing() {
    let (mut w, _) = one_hub();
    let bad = w.follow(0, "nope", None);
    w.advance(100);
    // The machine got the scoped stream's answer (404 → failed, rule 9).
    assert_eq!(w.machine(0, bad).status().state, State::Failed);
    let error = w.machine(0, bad).status().last_error.unwrap();
    assert_eq!(
        (error.code.as_str(), error.status),
        ("not_found", Some(404))
    );
    w.server.append("a");
    w.server.append("b");
    w.server.append("c");
    w.advance(10);
    w.assert_converged();
    // The refused scope costs nothing more: no new connection for it.
    let opened = w.ctxs[0].share.diagnostics().connections_opened;
    w.advance(5_000);
    assert_eq!(w.ctxs[0].share.diagnostics().connections_opened, opened);
    assert_eq!(w.server.conns.len(), 1);
    w.server.append("a");
    w.advance(10);
    w.assert_converged();
}

#[test]
fn each_hub_holds_one_connection_for_its_own_scopes() {
    let mut w = World::new(&[("a", 3), ("b", 3)]);
    let t0 = w.add_ctx();
    let t1 = w.add_ctx();
    w.follow(t0, "a", None);
    w.follow(t0, "b", None);
    w.follow(t1, "a", None);
    w.advance(100);
    w.server.append("a");
    w.advance(10);
    w.assert_converged();
    assert_eq!(w.conns_of(t0), 1);
    assert_eq!(w.conns_of(t1), 1);
}

#[test]
fn a_dropped_connection_ends_every_stream_and_all_recover() {
    let (mut w, _) = one_hub();
    // The server cuts the connection.
    let id = w.server.conns[0].id;
    w.server.close(0, id);
    let now = w.now;
    w.ctxs[0].share.handle_mux_end(id, now);
    w.settle();
    assert_eq!(w.ctxs[0].ends, 6);
    w.server.append("a");
    w.advance(5_000);
    w.server.append("b");
    w.server.append("c");
    w.advance(10);
    w.assert_converged();
    assert_eq!(w.server.conns.len(), 1);
}

#[test]
fn a_stalled_connection_is_replaced() {
    let (mut w, _) = one_hub();
    // The connection goes silent (no heartbeats): paused, never resumed.
    w.server.conns[0].paused = true;
    w.server.append("a");
    w.advance(40_000);
    w.server.append("b");
    w.advance(5_000);
    w.assert_converged();
}

#[test]
fn a_refused_connection_reaches_every_machine_as_its_answer() {
    let (mut w, ms) = one_hub();
    let id = w.server.conns[0].id;
    w.server.close(0, id);
    let now = w.now;
    let body = br#"{"error":"overloaded","message":"later"}"#;
    w.ctxs[0]
        .share
        .handle_mux_http_error(id, 503, Some("3"), body, now);
    w.settle();
    // Every machine retries no sooner than the hint.
    for m in ms {
        let s = w.machine(0, m).status();
        assert_eq!(s.state, State::Backoff, "machine {m}");
        assert_eq!(s.last_error.unwrap().status, Some(503));
        assert!(s.next_retry_at.unwrap() >= now + 3_000);
    }
    // So does the hub.
    assert!(w.ctxs[0].share.poll_timeout().unwrap() >= now + 3_000);
    w.server.append("b");
    w.advance(10_000);
    w.assert_converged();
    assert_eq!(w.server.conns.len(), 1);
}

#[test]
fn a_gone_machine_gives_its_streams_back_and_its_scope_leaves_at_once() {
    let mut w = World::new(&[("a", 2), ("b", 2)]);
    let t0 = w.add_ctx();
    w.follow(t0, "a", None);
    let gone = w.follow(t0, "b", None);
    w.advance(100);
    w.assert_converged();
    assert_eq!(w.carried().len(), 2);
    // Its client closed (the executor's leave): it will not reopen, so its
    // scope does not linger (LINGER_MS is for a machine that reconnects).
    let now = w.now;
    w.ctxs[t0].machines.retain(|(k, _)| *k != gone);
    w.ctxs[t0].share.handle_machine_gone(gone, now);
    assert_eq!(w.ctxs[t0].share.diagnostics().local_streams, 1);
    w.advance(100);
    let carried: Vec<String> = w.carried().into_iter().collect();
    assert_eq!(carried, ["session:a"], "b left with the set change");
    w.server.append("a");
    w.advance(10);
    w.assert_converged();
}

#[test]
fn one_chunk_of_the_connection_is_one_input_per_machine() {
    let mut hub = Share::new(ShareConfig::new(1));
    for (machine, sid) in [(1, "a"), (2, "b")] {
        let id = RequestId(10 + machine);
        assert!(hub.handle_open_stream(machine, &Target::session(sid), id, None, false, 0));
    }
    while hub.poll_output().is_some() {}
    hub.handle_timeout(100);
    let Some(Output::OpenMux { id, .. }) = hub.poll_output() else {
        panic!("the connection opens");
    };
    hub.handle_mux_opened(id, 200, Some("text/event-stream"), None, 100);
    while hub.poll_output().is_some() {}
    let hello = |sid| {
        control(
            sid,
            "hello",
            json!({"epoch": EPOCH, "head": 0, "boot_id": BOOT}),
        )
    };
    let events = [
        hello("a"),
        hello("b"),
        message("a", 1),
        message("b", 1),
        message("a", 2),
    ];
    let chunk: Vec<u8> = events.iter().flat_map(frame).collect();
    hub.handle_mux_bytes(id, &chunk, 101);
    let mut got: Vec<(u64, Vec<Envelope>)> = vec![];
    while let Some(out) = hub.poll_output() {
        if let Output::Deliver {
            machine,
            what: Response::Events(events),
            ..
        } = out
        {
            got.push((machine, events.into_iter().map(|e| e.envelope).collect()));
        }
    }
    let of = |sid: &str, i: &[usize]| -> Vec<Envelope> {
        let mut b = vec![];
        for &i in i {
            let env = &events[i];
            assert_eq!(env.scope_id, sid);
            b.push(env.clone());
        }
        b
    };
    assert_eq!(got, vec![(1, of("a", &[0, 2, 4])), (2, of("b", &[1, 3]))]);
    // Read once, by the hub, as the session's machine reads it: typed.
    let committed = &got[0].1[1].event;
    assert!(
        matches!(committed, Event::MessageCommitted(_)),
        "{committed:?}"
    );
}

#[test]
fn comments_do_not_keep_a_silent_connection() {
    let (mut w, _) = one_hub();
    // The connection sends nothing but `: keepalive` every 5 s (PROTOCOL.md
    // §4.3: comments do not prove a stream alive).
    let id = w.server.conns[0].id;
    w.server.conns[0].paused = true;
    w.server.append("a");
    for _ in 0..12 {
        let now = w.now;
        w.ctxs[0]
            .share
            .handle_mux_bytes(id, b": keepalive\n\n", now);
        w.advance(5_000);
    }
    assert!(
        w.server.conns.iter().all(|c| c.id != id),
        "the silent connection was kept"
    );
    w.server.append("b");
    w.advance(5_000);
    w.assert_converged();
}

#[test]
fn a_failed_connection_reaches_every_machine_with_its_own_error() {
    // A CORS refusal of the multiplexed stream is `cors` in every machine's
    // status, as it is for a scoped stream, not a generic network error.
    let (mut w, ms) = one_hub();
    let id = w.server.conns[0].id;
    w.server.close(0, id);
    let now = w.now;
    let origin = "http://localhost:5173".to_owned();
    w.ctxs[0]
        .share
        .handle_mux_failed(id, CoreError::Cors(origin), now);
    w.settle();
    for m in ms {
        let s = w.machine(0, m).status();
        assert_eq!(s.state, State::Backoff, "machine {m}");
        let e = s.last_error.expect("the error is the status's");
        assert_eq!(e.code, "cors", "machine {m}");
        assert!(
            e.message.contains("--allow-origin http://localhost:5173"),
            "{}",
            e.message
        );
    }
}

#[test]
fn a_muted_multiplexed_stream_is_followed_by_polling_per_scope_and_left_when_it_flows() {
    use replay_client::core::machine::REPROBE_MS;
    let mut w = World::new(&[("a", 5), ("b", 3), ("c", 0)]);
    w.server.muted = true;
    let t = w.add_ctx();
    let ms: Vec<u64> = ["a", "b", "c"]
        .into_iter()
        .map(|sid| w.follow(t, sid, None))
        .collect();
    // The connection's head comes, its events never: each machine's
    // deadline counts its tries, and its pages answer.
    w.advance(60_000);
    for m in &ms {
        assert!(w.machine(t, *m).polling(), "machine {m} polls");
        assert_eq!(w.machine(t, *m).status().state, State::Live);
    }
    // What is committed meanwhile reaches every machine by its polls.
    for i in 0..6 {
        w.server.append(["a", "b", "c"][i % 3]);
    }
    w.advance(12_000);
    w.assert_converged();
    // The proxy is fixed: within the re-probe period every machine is
    // back on the one connection.
    w.server.muted = false;
    w.advance(REPROBE_MS + 20_000);
    for m in &ms {
        assert!(!w.machine(t, *m).polling(), "machine {m} streams again");
        assert_eq!(w.machine(t, *m).status().state, State::Live);
    }
    w.server.append("a");
    w.advance(10);
    w.assert_converged();
}

/// Every machine of a hub polls behind a muting proxy.
fn muted_hub() -> (World, usize, Vec<u64>) {
    let mut w = World::new(&[("a", 5), ("b", 3)]);
    w.server.muted = true;
    let t = w.add_ctx();
    let ms: Vec<u64> = ["a", "b"]
        .into_iter()
        .map(|sid| w.follow(t, sid, None))
        .collect();
    w.advance(60_000);
    for m in &ms {
        assert!(w.machine(t, *m).polling(), "machine {m} polls");
    }
    (w, t, ms)
}

/// Every machine of a hub polls behind a muting proxy, the proxy is fixed,
/// and the context's network goes and comes back (or only says `online`).
fn polling_hub() -> (World, usize, Vec<u64>) {
    let (mut w, t, ms) = muted_hub();
    // Long enough for the hub to have dropped its idle connection and
    // for any backoff of it to be running.
    w.advance(50_000);
    w.server.muted = false;
    (w, t, ms)
}

fn streaming_again_within(w: &mut World, t: usize, ms: &[u64], within: u64) {
    let opened = w.server.opened.len();
    w.advance(within);
    assert!(w.server.opened.len() > opened, "a new connection is opened");
    for m in ms {
        assert!(
            !w.machine(t, *m).polling(),
            "machine {m} streams again: {:?}",
            w.machine(t, *m).status()
        );
    }
    w.server.append("a");
    w.advance(10);
    w.assert_converged();
}

#[test]
fn offline_then_online_brings_every_polling_machine_back_to_the_connection_at_once() {
    let (mut w, t, ms) = polling_hub();
    for e in [Lifecycle::Offline, Lifecycle::Online] {
        for m in &ms {
            let now = w.now;
            w.machine_mut(t, *m).handle_lifecycle(e, now);
        }
        w.settle();
    }
    streaming_again_within(&mut w, t, &ms, 3_000);
}

#[test]
fn a_lone_online_or_visible_probes_a_polling_machine_at_once() {
    for e in [Lifecycle::Online, Lifecycle::Visible] {
        let (mut w, t, ms) = polling_hub();
        for m in &ms {
            let now = w.now;
            w.machine_mut(t, *m).handle_lifecycle(e, now);
        }
        w.settle();
        streaming_again_within(&mut w, t, &ms, 3_000);
    }
}

#[test]
fn a_probe_opens_the_connection_at_once_whatever_its_backoff() {
    let mut hub = Share::new(ShareConfig::new(3));
    let target = Target::session("a");
    let mut now = 0;
    let mut next = 10;
    let mut open = |hub: &mut Share, probe: bool, now: u64| {
        next += 1;
        assert!(hub.handle_open_stream(1, &target, RequestId(next), None, probe, now));
        RequestId(next)
    };
    let opened = |hub: &mut Share| {
        std::iter::from_fn(|| hub.poll_output())
            .filter_map(|o| match o {
                Output::OpenMux { id, .. } => Some(id),
                _ => None,
            })
            .last()
    };
    // Connections that fail in a row: the hub's backoff grows.
    let mut stream = open(&mut hub, false, now);
    for _ in 0..6 {
        let mux = loop {
            let due = hub.poll_timeout().expect("a timer");
            now = now.max(due);
            hub.handle_timeout(now);
            if let Some(mux) = opened(&mut hub) {
                break mux;
            }
        };
        hub.handle_mux_failed(mux, CoreError::Network("reset".into()), now);
        while hub.poll_output().is_some() {}
        // The machine's stream ended with it; it subscribes again.
        stream = open(&mut hub, false, now);
    }
    // A try that waits out its backoff waits for the hub's too.
    hub.handle_abort(1, stream, now);
    let _ = open(&mut hub, false, now);
    hub.handle_timeout(now + SET_DEBOUNCE_MS);
    assert_eq!(opened(&mut hub), None, "no connection before the backoff");
    let retry_at = hub.poll_timeout().expect("the backoff");
    assert!(
        retry_at > now + 2_000,
        "a long backoff ({retry_at} at {now})"
    );
    hub.handle_timeout(now + 500);
    assert_eq!(opened(&mut hub), None, "no connection before the backoff");
    // A probe does not.
    let _ = open(&mut hub, true, now + 500);
    hub.handle_timeout(now + 500 + SET_DEBOUNCE_MS);
    assert!(
        opened(&mut hub).is_some(),
        "the connection opens for a probe"
    );
}

#[test]
fn a_connection_after_polling_asks_from_the_cursor_the_polls_reached() {
    let mut w = World::new(&[("a", 5)]);
    let t = w.add_ctx();
    let m = w.follow(t, "a", None);
    w.advance(100);
    w.assert_converged();
    // The proxy starts muting: what comes now reaches the machine by polls.
    w.server.muted = true;
    let id = w.server.conns[0].id;
    w.server.conns.clear();
    let now = w.now;
    w.ctxs[t]
        .share
        .handle_mux_failed(id, CoreError::Network("reset".into()), now);
    w.advance(60_000);
    assert!(w.machine(t, m).polling());
    for _ in 0..6 {
        w.server.append("a");
    }
    w.advance(15_000);
    assert_eq!(w.machine(t, m).cursor(), 11);
    w.server.muted = false;
    let opened = w.server.opened.len();
    let now = w.now;
    w.machine_mut(t, m).handle_lifecycle(Lifecycle::Online, now);
    w.advance(1_000);
    let paths: Vec<&str> = w.server.opened[opened..]
        .iter()
        .map(|(_, p)| p.as_str())
        .collect();
    assert_eq!(paths, ["/v1/stream?sub=session:a:11"]);
    assert!(!w.machine(t, m).polling());
    assert_eq!(w.ctxs[t].share.diagnostics().duplicates_dropped, 0);
}

#[test]
fn online_replaces_a_connection_that_said_no_hello_under_probes_in_flight() {
    let (mut w, t, ms) = muted_hub();
    // The re-probes open a connection through the muting proxy.
    let opened = w.server.opened.len();
    while w.server.opened.len() == opened {
        w.advance(1_000);
    }
    w.advance(1_000);
    let muted = w.server.conns.last().map(|c| c.id).expect("a connection");
    assert!(w.server.conns.iter().any(|c| c.id == muted));
    // The proxy stops muting (what it chose for that connection stays),
    // and the network says so.
    w.server.muted = false;
    for m in &ms {
        let now = w.now;
        w.machine_mut(t, *m)
            .handle_lifecycle(Lifecycle::Online, now);
    }
    w.settle();
    streaming_again_within(&mut w, t, &ms, 3_000);
    assert!(
        w.server.conns.iter().all(|c| c.id != muted),
        "the muted connection is closed"
    );
}
