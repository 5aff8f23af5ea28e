//! The restore barrier when the backlog cannot be read, and when there is
//! none (docs/protocol.md §6 rule 2; seed 001: "a read failure becomes a
//! non-fatal restore notice while the live subscription continues", "a new
//! session returns an empty backlog and skips the repaint").

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::fold::ViewChange;
use replay_client::core::machine::{Action, Config, Machine, Notice, State};
use replay_client::core::protocol::*;
use replay_client::core::transcript::fold;
use serde_json::json;

/// A reload of a client that had applied `log[..stored]`, its stream open.
fn reloaded(log: &[Envelope], stored: usize) -> Rig {
    let before = Rig::live_with(&log[..stored]);
    let mut r = Rig::with(Config::session(SES), Some(&before.c.persisted_value()));
    r.open_ok();
    r
}

/// The application's notice codes so far.
fn codes(r: &Rig) -> Vec<String> {
    r.c.recent_notices()
        .iter()
        .map(|n| n.code.clone())
        .collect()
}

/// The message ids the view shows, in order.
fn shown(r: &Rig) -> Vec<String> {
    let s = r.c.view().as_session().expect("a session view");
    s.items()
        .iter()
        .map(|i| match i {
            TranscriptItem::Message { message_id, .. } => message_id.clone(),
            other => panic!("only messages here: {other:?}"),
        })
        .collect()
}

fn ids(from: u64, to: u64) -> Vec<String> {
    (from..=to).map(|s| format!("u{s}")).collect()
}
/// The live events a failed restore showed were spent there: once the
/// backlog is in, the barrier reads them again from the events pages
/// (`log[from..head]`, verified from the last one applied; rule 4), the
/// live view shown meanwhile (no jump back).
fn reread(r: &mut Rig, log: &[Envelope], from: u64, head: u64) {
    let shown_before = r.c.view().clone();
    assert_eq!(r.c.status().state, State::Repairing);
    assert!(r.c.status().history_incomplete);
    assert_eq!(r.c.view(), &shown_before);
    assert!(r.changes().iter().all(|c| !c.restore_completed));
    let path = format!("events?after_seq={}", from - 1);
    assert!(r.fetch_path().contains(&path), "{}", r.fetch_path());
    let (from, head) = (from as usize, head as usize);
    r.answer(&event_page(EPOCH, &log[from - 1..head], head as u64, false));
}

/// A change that says only that the status moved (or nothing at all).
fn status_only(c: &ViewChange) -> bool {
    *c == ViewChange {
        status: c.status,
        ..ViewChange::default()
    }
}

#[test]
fn a_failing_backlog_shows_the_live_deliveries_then_folds_them_in_order() {
    let log = simple_log(8);
    let mut r = reloaded(&log, 3);
    // Events 4 and 5 are the backlog; 6 and 7 arrive live meanwhile.
    r.send(&[hello(EPOCH, 5, BOOT)]);
    r.send(&log[5..7]);
    assert!(r.changes().is_empty(), "held behind the barrier");
    r.http_error(false, 503, None, &error_body("overloaded"));
    assert_eq!(codes(&r), ["restore_failed"], "non-fatal, said once");
    let notice = &r.c.recent_notices()[0];
    assert_eq!(notice.status, Some(503));
    assert_eq!(r.c.status().state, State::Backoff);
    assert!(r.c.status().history_incomplete);
    // The live deliveries are shown at once, over the stored history.
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].reset, "the view is painted anew");
    assert_eq!(shown(&r), ["u1", "u2", "u3", "u6", "u7"]);
    assert_eq!(r.c.cursor(), 3, "the durable cursor waits for the backlog");
    // More live events keep coming; the backlog fails again: no second notice.
    r.send(&log[7..8]);
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].items_appended_from, Some(5));
    assert_eq!(shown(&r), ["u1", "u2", "u3", "u6", "u7", "u8"]);
    r.until_fetch();
    r.c.handle_network_error(r.fetch.take().unwrap().0, "reset", r.now);
    r.fetches.clear();
    r.pump();
    assert_eq!(codes(&r), ["restore_failed"]);
    // What was persisted meanwhile is the durable state, cursor 3 (rule 1).
    let stored = Machine::new(Config::session(SES), Some(&r.c.persisted_value()), 0);
    assert_eq!(stored.cursor(), 3);
    assert_eq!(stored.view().as_session().unwrap().items().len(), 3);
    let before = shown(&r);
    // The backlog arrives: everything in durable order, no duplicate, and
    // nothing shown before is missing (no jump back).
    r.until_fetch();
    assert!(r.fetch_path().contains("after_cursor=3"));
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        3,
        &log[3..5],
        5,
        false,
        None,
        None,
    ));
    assert_eq!(r.c.cursor(), 5);
    reread(&mut r, &log, 5, 8);
    assert_eq!(r.c.cursor(), 8);
    assert_eq!(shown(&r), ids(1, 8));
    assert!(before.iter().all(|id| shown(&r).contains(id)));
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].restore_completed);
    assert_eq!(r.c.status().state, State::Live);
    assert!(!r.c.status().history_incomplete);
    // The live events read again are a repair like any other (rule 4).
    assert_eq!(codes(&r), ["restore_failed", "gap_repaired", "restored"]);
    assert!(r.notices.contains(&Notice::Restored {
        from_cursor: 3,
        to_cursor: 8
    }));
    // Following goes on as usual.
    r.send(&[user_msg(9, "u9", "x")]);
    assert_eq!(r.c.cursor(), 9);
}

#[test]
fn a_backlog_that_times_out_also_shows_the_live_deliveries() {
    let log = simple_log(4);
    let mut r = reloaded(&log, 2);
    r.send(&[hello(EPOCH, 3, BOOT)]);
    r.send(&log[3..4]);
    // No answer at all to the replay: its deadline passes.
    let timeout = r.c.config().fetch_timeout_ms;
    // Heartbeats keep the stream alive meanwhile.
    for _ in 0..(timeout / 10_000) {
        r.now += 10_000;
        r.send(&[heartbeat(4)]);
        r.c.handle_timeout(r.now);
        r.pump();
    }
    r.advance(timeout);
    assert_eq!(codes(&r), ["restore_failed"]);
    assert_eq!(shown(&r), ["u1", "u2", "u4"]);
}

#[test]
fn a_4xx_on_the_backlog_fails_the_restore_not_the_live_follow() {
    let log = simple_log(7);
    let mut r = reloaded(&log, 3);
    let stream = r.stream_id();
    r.send(&[hello(EPOCH, 5, BOOT)]);
    r.send(&log[5..6]);
    r.http_error(false, 422, None, &error_body("invalid_request"));
    assert_eq!(codes(&r), ["restore_failed"]);
    assert!(!r.notices.iter().any(|n| matches!(n, Notice::Failed { .. })));
    // The stream goes on; the backlog is not asked for again.
    assert_eq!(r.stream, Some(stream), "the live stream is kept");
    assert_eq!(r.c.status().state, State::Live);
    assert!(r.c.status().history_incomplete);
    assert_eq!(shown(&r), ["u1", "u2", "u3", "u6"]);
    r.send(&log[6..7]);
    assert_eq!(shown(&r), ["u1", "u2", "u3", "u6", "u7"]);
    for _ in 0..30 {
        r.advance(10_000);
        r.send(&[heartbeat(7)]);
    }
    assert!(r.fetch.is_none(), "a 4xx is not retried");
    assert_eq!(r.c.status().state, State::Live);
    // The durable state stays what it was: the next start restores from it.
    assert_eq!(r.c.cursor(), 3);
    let stored = Machine::new(Config::session(SES), Some(&r.c.persisted_value()), 0);
    assert_eq!(stored.cursor(), 3);
}

#[test]
fn a_404_on_the_backlog_fails_only_the_restore_while_the_stream_lives() {
    let log = simple_log(5);
    let mut r = reloaded(&log, 3);
    r.send(&[hello(EPOCH, 5, BOOT)]);
    r.http_error(false, 404, None, &error_body("not_found"));
    assert_eq!(codes(&r), ["restore_failed"]);
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(shown(&r), ["u1", "u2", "u3"]);
}

#[test]
fn a_session_gone_404_on_the_backlog_and_the_stream_fails_the_client() {
    let log = simple_log(5);
    // The backlog first, then the stream.
    let mut r = reloaded(&log, 3);
    r.http_error(false, 404, None, &error_body("not_found"));
    assert_eq!(codes(&r), ["restore_failed"]);
    assert_ne!(r.c.status().state, State::Failed);
    r.http_error(true, 404, None, &error_body("not_found"));
    assert_eq!(r.c.status().state, State::Failed);
    assert_eq!(codes(&r), ["restore_failed", "not_found"]);
    // The stream first: the client fails at once; the backlog's answer is moot.
    let mut r = reloaded(&log, 3);
    r.http_error(true, 404, None, &error_body("not_found"));
    assert_eq!(r.c.status().state, State::Failed);
    assert_eq!(codes(&r), ["not_found"]);
}

#[test]
fn a_failed_first_restore_of_a_session_shows_what_the_stream_brings() {
    let log = simple_log(6);
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 4, BOOT)]);
    r.send(&log[4..5]);
    r.http_error(false, 500, None, b"");
    assert_eq!(codes(&r), ["restore_failed"]);
    assert_eq!(shown(&r), ["u5"]);
    assert!(r.c.status().history_incomplete);
    r.until_fetch();
    r.send(&log[5..6]);
    assert_eq!(shown(&r), ["u5", "u6"]);
    r.answer(&whole_page(&log[..4], 4));
    reread(&mut r, &log, 4, 6);
    assert_eq!(shown(&r), ids(1, 6));
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    assert!(!r.c.status().history_incomplete);
}

#[test]
fn a_failed_restore_shows_the_live_turn_and_tasks_at_once() {
    let log = simple_log(3);
    let mut r = reloaded(&log, 2);
    r.send(&[hello(EPOCH, 3, BOOT)]);
    r.send(&[tasks(3, 1, 2), delta(3, "t9", "m9", 0, "typing")]);
    r.http_error(false, 503, None, b"");
    let v = r.c.view().as_session().unwrap();
    assert_eq!(v.tasks().tasks.len(), 2);
    assert_eq!(v.overlay().map(|o| o.text.as_str()), Some("typing"));
    r.send(&[delta(3, "t9", "m9", 6, " more")]);
    let v = r.c.view().as_session().unwrap();
    assert_eq!(v.overlay().map(|o| o.text.as_str()), Some("typing more"));
}

/// Every status the client was in, in order, each once.
fn states(r: &Rig, seen: &mut Vec<State>) {
    let s = r.c.status().state;
    if seen.last() != Some(&s) {
        seen.push(s);
    }
}

#[test]
fn an_empty_backlog_on_a_new_session_paints_nothing_and_says_nothing() {
    // Hello first, then the page; the page first, then the hello; and the
    // reference server's new session, whose backlog is its `session.created`.
    let created = durable(1, ev("session.created", json!({"title": "t"})));
    for (hello_first, history) in [
        (true, vec![]),
        (false, vec![]),
        (true, vec![created.clone()]),
        (false, vec![created.clone()]),
    ] {
        let name = format!("hello first: {hello_first}, history: {}", history.len());
        let head = history.len() as u64;
        let mut r = Rig::new();
        let mut seen = Vec::new();
        states(&r, &mut seen);
        r.open_ok();
        states(&r, &mut seen);
        if hello_first {
            r.send(&[hello(EPOCH, head, BOOT)]);
            states(&r, &mut seen);
        }
        r.answer(&whole_page(&history, head));
        states(&r, &mut seen);
        if !hello_first {
            r.send(&[hello(EPOCH, head, BOOT)]);
            states(&r, &mut seen);
        }
        assert_eq!(seen, [State::Connecting, State::Live], "{name}");
        assert!(r.notices.is_empty(), "{name}: {:?}", r.notices);
        assert!(codes(&r).is_empty(), "{name}");
        let changes = r.changes();
        // The title of its `session.created` is a change of `session` only.
        let title_only = |c: &ViewChange| {
            status_only(&ViewChange {
                session: false,
                ..c.clone()
            })
        };
        assert!(changes.iter().all(title_only), "{name}: {changes:?}");
        let titled = changes.iter().any(|c| c.session);
        assert_eq!(titled, head == 1, "{name}: {changes:?}");
        assert_eq!(r.c.cursor(), head, "{name}");
        // Live events then flow as usual.
        r.send(&[user_msg(head + 1, "u", "hi")]);
        assert_eq!(r.changes()[0].items_appended_from, Some(0), "{name}");
    }
}

#[test]
fn a_restore_with_history_still_paints_once_and_says_so() {
    // From a stored state with nothing new: painted once, `restored` (the
    // stored state is confirmed current).
    let log = simple_log(3);
    let mut r = reloaded(&log, 3);
    r.send(&[hello(EPOCH, 3, BOOT)]);
    r.answer(&replay_page(EPOCH, BOOT, 3, &[], 3, false, None, None));
    assert_eq!(codes(&r), ["restored"]);
    assert!(r.changes()[0].restore_completed);
    // From nothing, with history: painted once.
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 3, BOOT)]);
    r.answer(&whole_page(&log, 3));
    assert_eq!(codes(&r), ["restored"]);
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].restore_completed);
}

#[test]
fn an_epoch_change_to_an_empty_log_is_still_painted() {
    let mut r = Rig::live_with(&simple_log(3));
    r.send(&[hello("e2", 0, BOOT)]);
    r.open_ok();
    r.send(&[hello("e2", 0, BOOT)]);
    r.answer(&replay_page("e2", BOOT, 0, &[], 0, false, None, None));
    let changes = r.changes();
    assert!(changes.iter().any(|c| c.reset), "{changes:?}");
    assert!(shown(&r).is_empty());
    assert!(r.log.iter().any(|a| matches!(a, Action::Persist(_))));
}

#[test]
fn a_new_boot_interrupts_the_live_turn_shown_by_a_failed_restore() {
    let log = simple_log(2);
    let mut r = reloaded(&log, 2);
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.send(&[delta(2, "t9", "m9", 0, "typing")]);
    r.http_error(false, 503, None, b"");
    assert!(r.c.view().as_session().unwrap().overlay().is_some());
    // The stream drops; the runtime restarted meanwhile (rule 7).
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    r.until_reconnect();
    r.open_ok();
    r.send(&[hello(EPOCH, 2, "b2")]);
    let v = r.c.view().as_session().unwrap();
    assert!(v.overlay().is_none());
    assert_eq!(v.interrupted().len(), 1);
    assert!(r.c.status().history_incomplete);
}

#[test]
fn a_failed_restore_of_a_log_scope_shows_its_live_events_but_no_heartbeat() {
    use replay_client::core::machine::Target;
    let target = Target::Scoped {
        scope: Scope::Process,
        scope_id: "proc_1".into(),
    };
    let out = |seq: u64| {
        let mut e = durable(seq, ev("process.exited", json!({"code": 0})));
        e.scope = Scope::Process;
        e.scope_id = "proc_1".into();
        e
    };
    let mut r = Rig::with(Config::new(target), None);
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT), out(3), heartbeat(3)]);
    r.http_error(false, 502, None, b"");
    assert_eq!(codes(&r), ["restore_failed"]);
    let v = r.c.view().as_log().unwrap();
    assert_eq!(v.total(), 1);
    assert_eq!(
        v.transient(),
        (0, None),
        "a heartbeat is not an event shown"
    );
    r.until_fetch();
    r.answer(&event_page(EPOCH, &[out(1), out(2)], 2, false));
    assert_eq!(r.c.status().state, State::Repairing);
    assert!(r.fetch_path().contains("events?after_seq=1"));
    r.answer(&event_page(EPOCH, &[out(2), out(3)], 3, false));
    assert_eq!(r.c.cursor(), 3);
    assert_eq!(r.c.view().as_log().unwrap().total(), 3);
    assert!(!r.c.status().history_incomplete);
}
