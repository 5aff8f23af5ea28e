//! Status classification, the stall watchdog, page lifecycle, close, and
//! targets other than sessions.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{
    Action, Config, CoreError, FetchKind, Lifecycle, Notice, State, Target,
};
use replay_client::core::protocol::*;

/// What the IO layer knows about a failed request reaches the status; each
/// is retried like a network error, none is fatal.
#[test]
fn a_timeout_or_a_credentials_failure_is_reported_as_such_and_retried() {
    for (error, code) in [
        (CoreError::Timeout { after_ms: 400 }, "timeout"),
        (CoreError::Credentials("signed out".into()), "unauthorized"),
        (CoreError::Network("reset".into()), "network"),
    ] {
        let mut r = Rig::new();
        r.open_ok();
        r.send(&[hello(EPOCH, 0, BOOT)]);
        r.answer(&replay_page(EPOCH, BOOT, 0, &[], 0, false, None, None));
        let id = r.stream_id();
        let message = error.to_string();
        r.c.handle_request_failed(id, error, r.now);
        r.pump();
        let st = r.c.status();
        assert_eq!(st.state, State::Backoff, "{code}");
        let last = st.last_error.unwrap();
        assert_eq!((last.code.as_str(), last.message), (code, message));
        r.until_reconnect();
        assert_eq!(r.c.status().state, State::Connecting, "{code}");
    }
}

#[test]
fn status_walks_connecting_restoring_live_backoff() {
    let mut r = Rig::new();
    // A restore from nothing is `connecting` until its first page; this
    // one's backlog is empty: straight to `live` (rule 2).
    assert_eq!(r.c.status().state, State::Connecting);
    assert_eq!(r.c.status().since, 0);
    r.open_ok();
    r.send(&[hello(EPOCH, 0, BOOT)]);
    r.now = 50;
    r.answer(&replay_page(EPOCH, BOOT, 0, &[], 0, false, None, None));
    let st = r.c.status();
    assert_eq!((st.state, st.since), (State::Live, 50));
    let id = r.stream_id();
    r.now = 60;
    r.c.handle_network_error(id, "boom", r.now);
    r.pump();
    let st = r.c.status();
    assert_eq!(st.state, State::Backoff);
    assert_eq!(st.since, 60);
    assert!(st.next_retry_at.is_some());
    assert_eq!(st.last_error.as_ref().unwrap().code, "network");
    r.until_reconnect();
    assert_eq!(r.c.status().state, State::Connecting);
    r.open_ok();
    r.send(&[hello(EPOCH, 0, BOOT)]);
    let st = r.c.status();
    assert_eq!(st.state, State::Live);
    assert_eq!(st.last_error, None, "cleared when live again");
}

#[test]
fn stall_watchdog_aborts_a_silent_stream_and_reconnects() {
    let mut r = Rig::live_with(&simple_log(1));
    let id = r.stream_id();
    // Heartbeat every 15 s keeps it alive.
    for _ in 0..4 {
        r.now += 15_000;
        r.send(&[heartbeat(1)]);
        r.c.handle_timeout(r.now);
        r.pump();
        assert_eq!(r.stream, Some(id));
    }
    // Then silence: at 2.5 × 15 s the stream is declared stalled.
    assert_eq!(r.c.poll_timeout(), Some(r.now + 37_500));
    r.advance(37_499);
    assert_eq!(r.stream, Some(id));
    r.advance(1);
    assert!(r
        .log
        .iter()
        .any(|a| matches!(a, Action::Abort { id: x } if *x == id)));
    assert_eq!(r.c.status().last_error.unwrap().code, "stalled");
    let path = r.until_reconnect();
    assert_eq!(path, "/v1/sessions/ses_1/events?after_seq=1");
}

#[test]
fn a_fetch_without_an_answer_times_out_and_is_retried() {
    let mut r = Rig::new();
    let first = r.fetch.clone().unwrap().0;
    r.advance(30_000);
    assert!(r
        .log
        .iter()
        .any(|a| matches!(a, Action::Abort { id } if *id == first)));
    assert_eq!(r.c.status().last_error.unwrap().code, "timeout");
    for _ in 0..10 {
        if r.fetch.is_some() {
            break;
        }
        let t = r.c.poll_timeout().unwrap();
        r.advance(t - r.now);
    }
    let (second, kind, path) = r.fetch.clone().unwrap();
    assert_ne!(second, first);
    assert_eq!(kind, FetchKind::Replay);
    assert!(path.contains("after_cursor=0"));
}

#[test]
fn offline_aborts_and_waits_for_online() {
    let mut r = Rig::live_with(&simple_log(2));
    let id = r.stream_id();
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    r.pump();
    assert_eq!(r.c.status().state, State::Offline);
    assert!(r
        .log
        .iter()
        .any(|a| matches!(a, Action::Abort { id: x } if *x == id)));
    r.advance(3_600_000);
    assert!(r.stream.is_none(), "no retries while offline");
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    let acts = r.pump();
    assert!(acts.iter().any(|a| matches!(a,
        Action::OpenStream { path_and_query, .. } if path_and_query.ends_with("after_seq=2"))));
}

#[test]
fn pagehide_flushes_the_state_and_pageshow_resumes_from_the_cursor() {
    let mut r = Rig::live_with(&simple_log(1));
    r.now += 1;
    let before = r.log.len();
    r.send(&[user_msg(2, "u2", "two")]);
    assert!(
        !r.log[before..]
            .iter()
            .any(|a| matches!(a, Action::Persist(_))),
        "throttled"
    );
    r.c.handle_lifecycle(Lifecycle::PageHide, r.now);
    let acts = r.pump();
    let bytes = acts
        .iter()
        .find_map(|a| match a {
            Action::Persist(b) => Some(b.clone()),
            _ => None,
        })
        .expect("flushed at once");
    let restored =
        replay_client::core::machine::Machine::new(Config::session(SES), Some(&bytes), 0);
    assert_eq!(restored.cursor(), 2);
    assert_eq!(r.c.status().state, State::Stopped);
    r.c.handle_lifecycle(Lifecycle::PageShow { persisted: true }, r.now);
    let acts = r.pump();
    assert!(acts.iter().any(|a| matches!(a,
        Action::OpenStream { path_and_query, .. } if path_and_query.ends_with("after_seq=2"))));
}

#[test]
fn without_a_place_to_keep_it_nothing_is_encoded() {
    let mut cfg = Config::session(SES);
    cfg.persist = false;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        0,
        &simple_log(2),
        2,
        false,
        None,
        None,
    ));
    r.advance(5_000);
    r.c.handle_lifecycle(Lifecycle::PageHide, r.now);
    r.pump();
    assert_eq!(r.c.cursor(), 2);
    assert!(!r.log.iter().any(|a| matches!(a, Action::Persist(_))));
}

#[test]
fn visible_after_a_long_sleep_verifies_the_stream() {
    let mut r = Rig::live_with(&simple_log(1));
    let id = r.stream_id();
    r.c.handle_lifecycle(Lifecycle::Hidden, r.now);
    r.now += 5_000;
    r.c.handle_lifecycle(Lifecycle::Visible, r.now);
    r.pump();
    assert_eq!(r.stream, Some(id), "fresh stream kept");
    r.now += 20_000;
    r.c.handle_lifecycle(Lifecycle::Visible, r.now);
    let acts = r.pump();
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Abort { id: x } if *x == id)));
    assert!(acts.iter().any(|a| matches!(a, Action::OpenStream { .. })));
}

#[test]
fn close_stops_everything_and_dispatches_nothing_more() {
    let mut r = Rig::live_with(&simple_log(1));
    r.now += 1;
    r.send(&[user_msg(2, "u2", "two")]);
    let id = r.stream_id();
    r.c.close(r.now);
    let acts = r.pump();
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Abort { id: x } if *x == id)));
    assert_eq!(
        acts.iter()
            .filter(|a| matches!(a, Action::Persist(_)))
            .count(),
        1
    );
    assert!(acts
        .iter()
        .all(|a| matches!(a, Action::Abort { .. } | Action::Persist(_))));
    r.c.handle_stream_bytes(id, frame(&user_msg(3, "u3", "x")).as_bytes(), r.now);
    r.c.handle_timeout(r.now + 100_000);
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    assert!(r.pump().is_empty());
    assert!(r.changes().is_empty());
    assert_eq!(r.c.cursor(), 2);
    assert_eq!(r.c.poll_timeout(), None);
    assert_eq!(r.c.status().state, State::Stopped);
}

#[test]
fn non_session_scopes_restore_from_event_pages_with_verification() {
    let target = Target::Scoped {
        scope: Scope::Process,
        scope_id: "proc_1".into(),
    };
    let proc_ev = |seq: u64, t: &str, data: serde_json::Value| {
        let mut e = durable(seq, ev(t, data));
        e.scope = Scope::Process;
        e.scope_id = "proc_1".into();
        e
    };
    let log = [
        proc_ev(
            1,
            "process.started",
            serde_json::json!({"process_id": "proc_1", "command": "make"}),
        ),
        proc_ev(2, "process.exited", serde_json::json!({"code": 0})),
    ];
    let mut r = Rig::with(Config::new(target.clone()), None);
    assert_eq!(
        r.fetch_path(),
        "/v1/processes/proc_1/events?after_seq=0&limit=500"
    );
    r.open_ok();
    r.send(&[hello(EPOCH, 1, BOOT)]);
    r.answer(&event_page(EPOCH, &log[..1], 1, false));
    r.send(&log[1..]);
    assert_eq!(r.c.cursor(), 2);
    let v = r.c.view().as_log().unwrap();
    assert_eq!(v.total(), 2);
    assert_eq!(v.counts().get("process.exited"), 1);
    // Payloads are kept as the server's text, from a page and from the stream,
    // and still decode to the typed events.
    let kept: Vec<_> = v.events().iter().map(|e| e.data.to_value()).collect();
    assert_eq!(
        kept,
        [
            serde_json::json!({"process_id": "proc_1", "command": "make"}),
            serde_json::json!({"code": 0}),
        ]
    );
    for (entry, sent) in v.events().iter().zip(&log) {
        assert_eq!(entry.type_name, sent.event.type_name());
        assert_eq!(entry.seq, sent.seq);
        assert_eq!(entry.event().unwrap(), sent.event);
    }
    r.advance(1_000);
    let stored = r
        .log
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::Persist(b) => Some(b.clone()),
            _ => None,
        })
        .unwrap();
    // A reload verifies the stored cursor: the page starts at the last event.
    let mut r2 = Rig::with(Config::new(target), Some(&stored));
    assert_eq!(
        r2.fetch_path(),
        "/v1/processes/proc_1/events?after_seq=1&limit=500"
    );
    r2.answer(&event_page(EPOCH, &log[1..], 2, false));
    assert_eq!(r2.c.cursor(), 2);
    // The stored log comes back with its payloads.
    assert_eq!(r2.c.view().as_log(), r.c.view().as_log());
    assert!(r2.notices.contains(&Notice::Restored {
        from_cursor: 2,
        to_cursor: 2
    }));
}

#[test]
fn global_list_uses_row_ids_without_dense_gap_checks() {
    let mut r = Rig::with(Config::new(Target::Global), None);
    assert_eq!(r.fetch_path(), "/v1/events?after_id=0&limit=500");
    r.open_ok();
    r.send(&[hello(EPOCH, 0, BOOT)]);
    r.answer(&event_page(EPOCH, &[], 0, false));
    let mut a = user_msg(1, "a", "a");
    a.id = Some(10);
    let mut b = user_msg(1, "b", "b");
    b.id = Some(17); // not dense, another scope's seq: fine
    r.send(&[a.clone(), b, a]);
    assert_eq!(r.c.cursor(), 17);
    assert_eq!(r.c.counters().duplicates_dropped, 1);
    assert_eq!(r.c.status().state, State::Live);
    // A heartbeat above the row id still reveals missed rows.
    r.send(&[heartbeat(30)]);
    assert_eq!(r.fetch_path(), "/v1/events?after_id=17&limit=500");
    let mut c = user_msg(9, "c", "c");
    c.id = Some(25);
    r.answer(&event_page(EPOCH, &[c], 30, false));
    assert_eq!(r.c.cursor(), 25);
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.view().as_log().unwrap().total(), 3);
}
