//! The restore barrier when there is no backlog (docs/protocol.md §6 rule
//! 2; seed 001: "a new session returns an empty backlog and skips the
//! repaint").

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::fold::ViewChange;
use replay_client::core::machine::{Action, Config, State};
use replay_client::core::protocol::*;
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

/// A change that says only that the status moved (or nothing at all).
fn status_only(c: &ViewChange) -> bool {
    *c == ViewChange {
        status: c.status,
        ..ViewChange::default()
    }
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
        assert!(changes.iter().all(status_only), "{name}: {changes:?}");
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
