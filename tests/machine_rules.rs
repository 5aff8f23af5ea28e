//! One test (at least) per rule of PROTOCOL.md §6, driving the machine by hand.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{Action, Config, FetchKind, Machine, Notice, State};
use replay_client::core::protocol::*;
use replay_client::core::transcript::fold;

fn persisted(r: &Rig) -> Vec<u8> {
    r.log
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::Persist(b) => Some(b.clone()),
            _ => None,
        })
        .expect("a persist happened")
}

#[test]
fn rule_1_cursor_and_state_are_persisted_together_and_throttled() {
    let log = simple_log(3);
    let mut r = Rig::live_with(&log);
    let first = persisted(&r);
    let restored = Machine::new(Config::session(SES), Some(&first), 0);
    assert_eq!(restored.cursor(), 3);
    assert_eq!(
        restored.transcript().unwrap().items,
        fold(EPOCH, &log).items
    );

    // Two more events within the throttle window: no new Persist yet.
    let persists = |r: &Rig| {
        r.log
            .iter()
            .filter(|a| matches!(a, Action::Persist(_)))
            .count()
    };
    let before = persists(&r);
    r.now += 10;
    r.send(&[user_msg(4, "u4", "four")]);
    r.send(&[user_msg(5, "u5", "five")]);
    assert_eq!(persists(&r), before, "throttled");
    r.advance(1_000);
    assert_eq!(persists(&r), before + 1);
    let restored = Machine::new(Config::session(SES), Some(&persisted(&r)), 0);
    assert_eq!(restored.cursor(), 5);
    assert_eq!(restored.transcript().unwrap().items.len(), 5);
}

#[test]
fn rule_1_deltas_alone_do_not_rewrite_the_state_but_snapshots_do() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    let persists = |r: &Rig| {
        r.log
            .iter()
            .filter(|a| matches!(a, Action::Persist(_)))
            .count()
    };
    let before = persists(&r);
    r.now += 5_000;
    r.send(&[delta(1, "t1", "m1", 0, "streaming")]);
    r.advance(5_000);
    assert_eq!(persists(&r), before);
    r.send(&[tasks(1, 3, 1)]);
    r.advance(1_000);
    assert_eq!(persists(&r), before + 1);
    // That write holds the tasks, never the live overlay: the overlay is
    // not the state the cursor describes, and a restore shows the
    // runtime's own `live_turn` (replay) instead of a stale copy.
    let restored = Machine::new(Config::session(SES), Some(&persisted(&r)), 0);
    let s = restored.view().as_session().unwrap();
    assert_eq!(s.tasks().tasks.len(), 1);
    assert!(s.overlay().is_none(), "{:?}", s.overlay());
    assert!(r.c.view().as_session().unwrap().overlay().is_some());
}

#[test]
fn rule_1_corrupt_or_foreign_storage_is_discarded_with_a_notice() {
    for bad in [&b"{not json"[..], br#"{"v":99}"#] {
        let r = Rig::with(forward(), Some(bad));
        assert_eq!(r.c.cursor(), 0);
        assert!(
            matches!(&r.notices[0], Notice::StorageDiscarded { error } if error.code == "corrupt_storage")
        );
        assert!(r.fetch_path().contains("after_cursor=0"));
    }
    let other = Rig::live_with(&simple_log(2));
    let r = Rig::with(Config::session("ses_other"), Some(&persisted(&other)));
    assert_eq!(r.c.cursor(), 0);
    assert!(matches!(r.notices[0], Notice::StorageDiscarded { .. }));
}

#[test]
fn rule_2_restore_opens_live_stream_and_replay_at_the_same_time() {
    let live = Rig::live_with(&simple_log(3));
    let mut r = Rig::with(Config::session(SES), Some(&persisted(&live)));
    let actions = r.log.clone();
    assert!(actions.iter().any(|a| matches!(a,
        Action::OpenStream { path_and_query, last_event_id: None, .. } if path_and_query == "/v1/sessions/ses_1/events")));
    assert!(actions.iter().any(|a| matches!(a,
        Action::Fetch { path_and_query, kind: FetchKind::Replay, .. } if path_and_query == "/v1/sessions/ses_1/replay?after_cursor=3&limit=500")));
    assert_eq!(r.c.status().state, State::Restoring);
    r.open_ok();
    assert_eq!(r.c.status().state, State::Restoring);
}

#[test]
fn rule_2_buffered_live_frames_are_applied_after_the_replay_dropping_overlap() {
    let log = simple_log(6);
    let mut r = Rig::new();
    r.open_ok();
    // Live frames arrive first (stream head 3: events 4.. are live).
    r.send(&[hello(EPOCH, 3, BOOT)]);
    r.send(&log[3..6]);
    assert_eq!(r.c.cursor(), 0, "held behind the barrier");
    // The replay happened to read up to 5.
    r.answer(&whole_page(&log[..5], 5));
    assert_eq!(r.c.cursor(), 6);
    assert_eq!(r.c.counters().duplicates_dropped, 2);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    assert!(r.notices.contains(&Notice::Restored {
        from_cursor: 0,
        to_cursor: 6
    }));
    assert_eq!(r.c.status().state, State::Live);
}

#[test]
fn rule_2_hello_head_above_the_replayed_cursor_is_a_gap() {
    let log = simple_log(5);
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 5, BOOT)]);
    r.answer(&whole_page(&log[..3], 3));
    assert_eq!(r.c.status().state, State::Repairing);
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/events?after_seq=2&limit=500"
    );
    r.answer(&event_page(EPOCH, &log[2..5], 5, false));
    assert_eq!(r.c.cursor(), 5);
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.counters().gaps_repaired, 1);
}

#[test]
fn rule_2_one_view_change_per_restore_never_older_than_shown() {
    // A reload shows the stored state (10 events) at once; the restore
    // brings it to 40 over three pages.
    let stored = persisted(&Rig::live_with(&simple_log(10)));
    let log = simple_log(40);
    let mut cfg = Config::session(SES);
    cfg.replay_page_limit = 10;
    let mut r = Rig::with(cfg, Some(&stored));
    assert_eq!(
        r.c.view().as_session().unwrap().items().len(),
        10,
        "the stored state is shown"
    );
    r.open_ok();
    r.send(&[hello(EPOCH, 40, BOOT)]);
    for page in 1..4 {
        let from = page * 10;
        assert!(r.changes().is_empty(), "nothing painted mid-restore");
        r.answer(&replay_page(
            EPOCH,
            BOOT,
            from as u64,
            &log[from..from + 10],
            40,
            page < 3,
            None,
            None,
        ));
    }
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].restore_completed);
    // The shown items stay and the restore's are appended after them: no
    // repaint from a state older than the one shown.
    assert!(!changes[0].reset, "{:?}", changes[0]);
    assert_eq!(changes[0].items_appended_from, Some(10));
    assert_eq!(
        r.c.view().as_session().unwrap().items(),
        &fold(EPOCH, &log).items[..]
    );
    // After the restore, changes flow per input again.
    r.send(&[user_msg(41, "u41", "x")]);
    let c = r.changes();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].items_appended_from, Some(40));
    assert!(!c[0].restore_completed);
}

#[test]
fn rule_2_a_stored_view_read_later_is_shown_before_any_answer() {
    // An asynchronous storage (IndexedDB) answers after the client was
    // returned and its empty view built: the stored state is reported at
    // once, so a reload paints it without a round trip.
    let stored = persisted(&Rig::live_with(&simple_log(10)));
    let log = simple_log(12);
    let mut r = Rig::new();
    r.c = Machine::load(Config::session(SES), 0);
    r.pump();
    assert!(r.changes().is_empty(), "nothing to show while it is read");
    r.c.handle_stored(Some(&stored), 5);
    r.pump();
    let shown = r.changes();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].reset && !shown[0].restore_completed);
    assert_eq!(r.c.view().as_session().unwrap().items().len(), 10);
    // Then the restore's one repaint, appending what the page lacked.
    r.open_ok();
    r.send(&[hello(EPOCH, 12, BOOT)]);
    assert!(r.changes().is_empty(), "nothing painted mid-restore");
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        10,
        &log[10..],
        12,
        false,
        None,
        None,
    ));
    let changes = r.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].restore_completed && !changes[0].reset);
    assert_eq!(changes[0].items_appended_from, Some(10));
}

#[test]
fn rule_3_applies_only_the_next_seq_and_drops_duplicates() {
    let log = simple_log(4);
    let mut r = Rig::live_with(&log[..3]);
    r.send(&[log[1].clone(), log[2].clone()]);
    assert_eq!(r.c.cursor(), 3);
    assert_eq!(r.c.counters().duplicates_dropped, 2);
    assert_eq!(r.c.transcript().unwrap().items.len(), 3);
    // The next one is applied.
    r.send(&[log[3].clone()]);
    assert_eq!(r.c.cursor(), 4);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
}

#[test]
fn rule_3_cursor_never_moves_on_transient_or_partial_frames() {
    let mut r = Rig::live_with(&simple_log(2));
    r.send(&[delta(2, "t", "m", 0, "hi"), tasks(2, 1, 1), heartbeat(2)]);
    assert_eq!(r.c.cursor(), 2);
    let f = frame(&user_msg(3, "u3", "three"));
    let (a, b) = f.as_bytes().split_at(f.len() - 1);
    r.send_raw(a);
    assert_eq!(r.c.cursor(), 2, "partial frame");
    // Cut here: the partial frame is discarded, the cursor stays.
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    assert_eq!(r.c.cursor(), 2);
    // The old connection's last byte, late: not this client's stream any more.
    r.c.handle_stream_bytes(id, b, r.now);
    assert_eq!(r.c.cursor(), 2, "a late byte of the old connection");
    let path = r.until_reconnect();
    assert_eq!(path, "/v1/sessions/ses_1/events?after_seq=2");
    // The new connection starts a new frame: its first byte (the very byte
    // that would have completed the cut frame) completes nothing.
    r.open_ok();
    r.send_raw(b);
    assert_eq!(r.c.cursor(), 2, "the cut frame was discarded, not resumed");
    r.send(&[user_msg(3, "u3", "three")]);
    assert_eq!(r.c.cursor(), 3);
}

#[test]
fn rule_4_gap_in_seq_triggers_repair_from_cursor_minus_one() {
    let log = simple_log(6);
    let mut r = Rig::live_with(&log[..3]);
    r.send(&[log[5].clone()]);
    assert_eq!(r.c.cursor(), 3);
    assert_eq!(r.c.status().state, State::Repairing);
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/events?after_seq=2&limit=500"
    );
    // Live frames keep arriving and are held.
    r.send(&[user_msg(7, "u7", "seven")]);
    assert_eq!(r.c.cursor(), 3);
    let mut full = log.clone();
    full.push(user_msg(7, "u7", "seven"));
    r.answer(&event_page(EPOCH, &log[2..6], 6, false));
    assert_eq!(r.c.cursor(), 7);
    assert_eq!(r.c.counters().gaps_repaired, 1);
    assert!(r.notices.contains(&Notice::GapRepaired {
        from_cursor: 3,
        to_cursor: 6
    }));
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &full).items);
}

#[test]
fn rule_4_gap_from_heartbeat_head_triggers_repair() {
    let log = simple_log(4);
    let mut r = Rig::live_with(&log[..2]);
    r.send(&[heartbeat(2)]);
    assert_eq!(r.c.status().state, State::Live);
    r.send(&[heartbeat(4)]);
    assert_eq!(r.c.status().state, State::Repairing);
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/events?after_seq=1&limit=500"
    );
    r.answer(&event_page(EPOCH, &log[1..3], 4, true));
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/events?after_seq=3&limit=1000"
    );
    r.answer(&event_page(EPOCH, &log[3..4], 4, false));
    assert_eq!(r.c.cursor(), 4);
    assert_eq!(r.c.status().state, State::Live);
}

#[test]
fn rule_4_repair_from_zero_when_the_cursor_is_zero() {
    let mut r = Rig::live_with(&[]);
    r.send(&[heartbeat(1)]);
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/events?after_seq=0&limit=500"
    );
    r.answer(&event_page(EPOCH, &simple_log(1), 1, false));
    assert_eq!(r.c.cursor(), 1);
}

#[test]
fn rule_4_a_different_event_at_the_cursor_means_the_history_changed() {
    let log = simple_log(3);
    let mut r = Rig::live_with(&log);
    r.send(&[heartbeat(5)]);
    let mut other = turn_completed(3, "t");
    other.id = log[2].id;
    r.answer(&event_page(
        EPOCH,
        &[other, user_msg(4, "x", "y")],
        5,
        false,
    ));
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::EpochChanged { error } if error.code == "history_mismatch")));
    assert_eq!(r.c.cursor(), 0, "restarted from 0");
    assert!(r.fetch_path().contains("replay?after_cursor=0"));
}

#[test]
fn rule_4_bad_json_durable_frame_is_skipped_and_repaired() {
    let log = simple_log(3);
    let mut r = Rig::live_with(&log[..2]);
    r.send_raw(b"id: 3\nevent: message.committed\ndata: {broken\n\n");
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::FrameSkipped { error } if error.code == "bad_json")));
    assert_eq!(r.c.cursor(), 2);
    assert_eq!(r.c.status().state, State::Repairing);
    r.answer(&event_page(EPOCH, &log[1..3], 3, false));
    assert_eq!(r.c.cursor(), 3);
}

#[test]
fn rule_5_tasks_snapshot_replaces_with_higher_or_equal_version_only() {
    let mut r = Rig::live_with(&simple_log(1));
    r.send(&[tasks(1, 5, 2)]);
    r.send(&[tasks(1, 4, 0)]);
    assert_eq!(
        r.c.transcript().unwrap().tasks.tasks.len(),
        2,
        "older ignored"
    );
    r.send(&[tasks(1, 5, 3)]);
    assert_eq!(
        r.c.transcript().unwrap().tasks.tasks.len(),
        3,
        "equal replaces"
    );
    assert_eq!(r.c.cursor(), 1, "snapshots move no cursor");
}

#[test]
fn rule_5_transient_is_held_until_the_cursor_reaches_after_seq() {
    let log = simple_log(3);
    let mut r = Rig::live_with(&log[..1]);
    // A snapshot produced at head 3 while we are at 1: events 2..3 are missing.
    r.send(&[tasks(3, 9, 1)]);
    assert_eq!(r.c.transcript().unwrap().tasks.version, 0, "held");
    assert_eq!(r.c.status().state, State::Repairing);
    r.answer(&event_page(EPOCH, &log[..3], 3, false));
    assert_eq!(r.c.cursor(), 3);
    assert_eq!(r.c.transcript().unwrap().tasks.version, 9);
}

/// A sampling turn waiting on question `q9`.
fn asking_turn(rev: u64, text: &str) -> LiveTurn {
    LiveTurn {
        pending_question: Some(PendingQuestion {
            question_id: "q9".into(),
            prompt: "ok?".into(),
            options: vec![],
        }),
        ..live_turn(rev, text)
    }
}

fn overlay_text(r: &Rig) -> Option<(String, bool)> {
    let v = r.c.view().as_session().unwrap();
    v.overlay().map(|o| (o.text.as_str().to_owned(), o.stale))
}

#[test]
fn rule_5_live_turn_snapshot_keeps_the_higher_rev_and_shows_live_question() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    r.send(&[live_snapshot(1, Some(&asking_turn(5, "abc")))]);
    r.send(&[live_snapshot(1, Some(&asking_turn(3, "a")))]);
    assert_eq!(overlay_text(&r), Some(("abc".into(), false)));
    let prompts = r.c.transcript().unwrap().pending_prompts;
    assert_eq!(prompts.len(), 1);
    assert!(!prompts[0].persisted, "live question is not persisted yet");
    r.send(&[live_snapshot(1, None)]);
    assert_eq!(overlay_text(&r), None);
}

#[test]
fn rule_6_overlay_aligns_deltas_and_commit_replaces_it() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    r.send(&[
        delta(1, "t1", "m1", 0, "héllo"),
        delta(1, "t1", "m1", 3, "lo wörld"),
    ]);
    assert_eq!(overlay_text(&r), Some(("héllo wörld".into(), false)));
    r.send(&[delta(1, "t1", "m1", 20, "late")]);
    assert_eq!(
        overlay_text(&r),
        Some(("héllo wörld".into(), true)),
        "hole -> stale"
    );
    r.send(&[live_snapshot(
        1,
        Some(&asking_turn(7, "héllo wörld, again")),
    )]);
    assert_eq!(
        overlay_text(&r),
        Some(("héllo wörld, again".into(), false)),
        "refreshed"
    );
    r.send(&[assistant_msg(2, "t1", "m1", "héllo wörld, again!")]);
    assert_eq!(overlay_text(&r), None);
    let items = r.c.transcript().unwrap().items;
    assert!(
        matches!(&items[0], TranscriptItem::Message { text, .. } if text == "héllo wörld, again!")
    );
}

#[test]
fn rule_6_deltas_of_a_committed_message_or_an_ended_turn_add_nothing() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    r.send(&[delta(1, "t1", "m1", 0, "hi")]);
    r.send(&[assistant_msg(2, "t1", "m1", "hi")]);
    r.send(&[delta(2, "t1", "m1", 2, " late")]);
    assert_eq!(
        overlay_text(&r),
        None,
        "a late delta of a committed message"
    );
    // A snapshot of the committed message shows the turn without its text;
    // a delta of that message, even one that follows it, adds none.
    r.send(&[live_snapshot(2, Some(&asking_turn(3, "hi")))]);
    assert_eq!(overlay_text(&r), Some((String::new(), false)));
    r.send(&[delta(2, "t1", "m1", 0, "hi again")]);
    assert_eq!(overlay_text(&r), Some((String::new(), false)));
    // The turn's next message is followed; after the turn ends, nothing is.
    r.send(&[delta(2, "t1", "m2", 0, "more")]);
    assert_eq!(overlay_text(&r), Some(("more".into(), false)));
    r.send(&[turn_completed(3, "t1")]);
    r.send(&[delta(3, "t1", "m2", 4, " after the end")]);
    assert_eq!(overlay_text(&r), None, "a late delta of an ended turn");
}

#[test]
fn rule_7_new_boot_id_interrupts_the_overlay_without_promoting_text() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    r.send(&[delta(1, "t1", "m1", 0, "partial")]);
    let id = r.stream_id();
    r.c.handle_network_error(id, "server died", r.now);
    r.pump();
    r.until_reconnect();
    r.open_ok();
    // The hello alone, before the log says how the turn ended: the new boot
    // id is what interrupts it.
    r.send(&[hello(EPOCH, 1, "b2")]);
    let v = r.c.view().as_session().unwrap();
    assert!(v.overlay().is_none());
    assert_eq!(v.interrupted().len(), 1);
    assert_eq!(v.interrupted()[0].text, "partial");
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::TurnInterrupted { turn_id, .. } if turn_id == "t1")));
    r.send(&[turn_failed(2, "t1", REASON_WORKER_RESTART)]);
    let v = r.c.view().as_session().unwrap();
    assert!(v.overlay().is_none());
    assert_eq!(v.interrupted().len(), 1);
    assert_eq!(v.interrupted()[0].text, "partial");
    let items = r.c.transcript().unwrap().items;
    assert!(
        items
            .iter()
            .all(|i| !matches!(i, TranscriptItem::Message { .. })),
        "never promoted"
    );
    assert!(
        matches!(&items[0], TranscriptItem::TurnEnd { reason: Some(x), .. } if x == REASON_WORKER_RESTART)
    );
}

#[test]
fn rule_7_a_turn_set_aside_by_a_new_boot_id_that_then_ends_on_its_own_was_not_interrupted() {
    // A cluster: the reconnect reached another node (its own boot id) while
    // the turn went on where it ran; its durable end comes through the log.
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    r.send(&[delta(1, "t1", "m1", 0, "partial")]);
    let id = r.stream_id();
    r.c.handle_network_error(id, "load balancer moved us", r.now);
    r.pump();
    r.until_reconnect();
    r.open_ok();
    r.send(&[hello(EPOCH, 1, "node-b")]);
    let set_aside = r.c.view().as_session().unwrap().interrupted().len();
    assert_eq!(set_aside, 1, "the overlay of the other run is set aside");
    r.send(&[
        assistant_msg(2, "t1", "m1", "partial and the rest"),
        turn_completed(3, "t1"),
    ]);
    let v = r.c.view().as_session().unwrap();
    assert!(v.interrupted().is_empty(), "it ended on its own");
    let items = r.c.transcript().unwrap().items;
    assert!(
        items.iter().any(
            |i| matches!(i, TranscriptItem::Message { text, .. } if text == "partial and the rest")
        ),
        "{items:?}"
    );
}

#[test]
fn rule_7_turn_failed_worker_restart_interrupts_the_overlay() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    r.send(&[delta(1, "t1", "m1", 0, "half an ans")]);
    r.send(&[turn_failed(2, "t1", REASON_WORKER_RESTART)]);
    let v = r.c.view().as_session().unwrap();
    assert!(v.overlay().is_none());
    assert_eq!(v.interrupted()[0].text, "half an ans");
    assert_eq!(v.interrupted()[0].reason, REASON_WORKER_RESTART);
    // Rule 1: a reload shows the log's honest end, not the partial text
    // only this client saw (it is not stored).
    r.advance(1_000);
    let restored = Machine::new(Config::session(SES), Some(&persisted(&r)), 0);
    let s = restored.view().as_session().unwrap();
    assert!(s.interrupted().is_empty());
    assert!(matches!(
        s.items().last(),
        Some(TranscriptItem::TurnEnd { outcome, reason: Some(why), .. })
            if outcome == "failed" && why == REASON_WORKER_RESTART
    ));
}

/// A client live after `n` events whose stream ended and reopened (no
/// hello yet).
fn reconnected_after(n: u64) -> Rig {
    let mut r = Rig::live_with(&simple_log(n));
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    r.until_reconnect();
    r.open_ok();
    r
}

/// Answers the pending replay with epoch `e2`'s one-event history.
fn answer_epoch_2_replay(r: &mut Rig) {
    r.answer(&replay_page(
        "e2",
        BOOT,
        0,
        &simple_log(1),
        1,
        false,
        None,
        None,
    ));
}

#[test]
fn rule_8_epoch_change_in_hello_discards_state_and_restarts_from_zero() {
    let mut r = reconnected_after(3);
    r.send(&[hello("e2", 1, BOOT)]);
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::EpochChanged { error } if error.code == "epoch_changed")));
    assert_eq!(r.c.cursor(), 0);
    // Restarted from nothing: `connecting` until the first page (rule 2).
    assert_eq!(r.c.status().state, State::Connecting);
    assert!(r.fetch_path().contains("after_cursor=0"));
    r.open_ok();
    r.send(&[hello("e2", 1, BOOT)]);
    answer_epoch_2_replay(&mut r);
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].reset && changes[0].restore_completed);
    assert_eq!(r.c.epoch(), Some("e2"));
    assert_eq!(r.c.transcript().unwrap().items.len(), 1);
}

#[test]
fn rule_8_a_chunk_cut_by_an_epoch_change_leaves_nothing_to_the_next_stream() {
    let mut r = reconnected_after(3);
    // One chunk: a hello of a new epoch, a frame after it, half of another.
    let cut = frame(&user_msg(4, "u4", "of the old epoch"));
    let mut chunk = frames(&[hello("e2", 1, BOOT), user_msg(4, "u4", "x")]);
    chunk.push_str(&cut[..cut.len() / 2]);
    r.send_raw(chunk.as_bytes());
    assert_eq!(
        r.c.cursor(),
        0,
        "nothing after the new epoch's hello applied"
    );
    r.open_ok();
    r.notices.clear();
    r.send(&[hello("e2", 1, BOOT)]);
    assert!(
        !r.notices
            .iter()
            .any(|n| matches!(n, Notice::FrameSkipped { .. })),
        "the new stream's first frame is read whole: {:?}",
        r.notices
    );
    answer_epoch_2_replay(&mut r);
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.transcript().unwrap().items.len(), 1);
}

#[test]
fn rule_8_epoch_change_in_replay_restarts_from_zero() {
    let live = Rig::live_with(&simple_log(3));
    let mut r = Rig::with(forward(), Some(&persisted(&live)));
    r.answer(&replay_page("e9", BOOT, 3, &[], 0, false, None, None));
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::EpochChanged { .. })));
    assert!(r.fetch_path().contains("after_cursor=0"));
    assert_eq!(r.c.cursor(), 0);
}

#[test]
fn rule_9_clean_eof_reconnects_from_the_cursor_after_backoff() {
    let mut r = Rig::live_with(&simple_log(2));
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    let at_once = r.pump();
    assert!(
        !at_once
            .iter()
            .any(|a| matches!(a, Action::OpenStream { .. })),
        "no reconnect before the backoff: {at_once:?}"
    );
    assert_eq!(r.c.status().state, State::Backoff);
    let at = r.c.status().next_retry_at.unwrap();
    assert!(
        at <= r.now + 1_000,
        "first retry within the initial ceiling"
    );
    let path = r.until_reconnect();
    assert!(r.now >= at, "reconnected at {} before {at}", r.now);
    assert_eq!(path, "/v1/sessions/ses_1/events?after_seq=2");
    assert!(r
        .log
        .iter()
        .any(|a| matches!(a, Action::OpenStream { last_event_id: Some(l), .. } if l == "2")));
    assert_eq!(r.c.counters().reconnects, 1);
}

#[test]
fn rule_9_stale_connection_bytes_are_ignored() {
    let mut r = Rig::live_with(&simple_log(2));
    let old = r.stream_id();
    r.c.handle_network_error(old, "reset", r.now);
    r.pump();
    r.until_reconnect();
    r.c.handle_stream_bytes(old, frame(&user_msg(3, "u3", "x")).as_bytes(), r.now);
    r.pump();
    assert_eq!(r.c.cursor(), 2);
}

#[test]
fn rule_9_invalid_cursor_and_cursor_ahead_restore_from_zero_with_a_notice() {
    for (status, code) in [(400, "invalid_cursor"), (409, "cursor_ahead")] {
        let mut r = Rig::live_with(&simple_log(2));
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.pump();
        r.until_reconnect();
        r.http_error(true, status, None, &error_body(code));
        assert!(r.notices.iter().any(
            |n| matches!(n, Notice::CursorRejected { error, cursor: 2 } if error.code == code)
        ));
        assert_eq!(r.c.cursor(), 0);
        assert!(r.fetch_path().contains("replay?after_cursor=0"));
        // Restarted from nothing: `connecting` until the first page (rule 2).
        assert_eq!(r.c.status().state, State::Connecting);
    }
}

#[test]
fn rule_9_unauthorized_refreshes_once_then_fails() {
    let mut r = Rig::new();
    r.http_error(true, 401, None, &error_body("unauthorized"));
    let last = r.log.len();
    assert!(matches!(r.log[last - 2], Action::RefreshCredentials));
    assert!(
        matches!(r.log[last - 1], Action::OpenStream { .. }),
        "retried right after"
    );
    r.http_error(true, 403, None, &error_body("forbidden"));
    assert_eq!(r.c.status().state, State::Failed);
    assert_eq!(r.c.status().last_error.unwrap().code, "unauthorized");
    let refreshes = r
        .log
        .iter()
        .filter(|a| matches!(a, Action::RefreshCredentials))
        .count();
    assert_eq!(refreshes, 1, "refreshed once");
    assert!(r.notices.iter().any(|n| matches!(n, Notice::Failed { .. })));
    assert_eq!(r.c.poll_timeout(), None, "no retries after failing");
}

#[test]
fn rule_9_a_401_on_a_request_sent_before_the_refresh_retries_without_failing() {
    // The stream and the first page go out together with the same cached
    // token; both are refused. The first refusal refreshes; the second was
    // sent with the token that refresh replaced, so it proves nothing about
    // the new one: it is retried, with no second refresh.
    let mut r = Rig::new();
    r.http_error(true, 401, None, &error_body("unauthorized"));
    let refreshes = |r: &Rig| {
        r.log
            .iter()
            .filter(|a| matches!(a, Action::RefreshCredentials))
            .count()
    };
    assert_eq!(refreshes(&r), 1);
    r.http_error(false, 401, None, &error_body("unauthorized"));
    assert_ne!(r.c.status().state, State::Failed, "{:?}", r.c.status());
    assert_eq!(refreshes(&r), 1, "one refresh for one refused token");
    assert!(
        matches!(r.log.last(), Some(Action::Fetch { .. })),
        "the page is asked again at once"
    );
    // A refusal of a request sent after the refresh is the second: it fails.
    r.http_error(true, 401, None, &error_body("unauthorized"));
    assert_eq!(r.c.status().state, State::Failed);
}

#[test]
fn rule_9_a_401_sent_before_the_refresh_asks_no_second_refresh_after_a_success() {
    // As above, but the stream retried with the new token succeeds before
    // the page's refusal (of the old token) comes back: the success must not
    // make that late refusal look like a new expiry (seen in Chromium as a
    // caching getToken asked to refresh twice).
    let mut r = Rig::new();
    r.http_error(true, 401, None, &error_body("unauthorized"));
    r.open_ok();
    r.send(&[hello(EPOCH, 0, BOOT)]);
    r.http_error(false, 401, None, &error_body("unauthorized"));
    let refreshes = r
        .log
        .iter()
        .filter(|a| matches!(a, Action::RefreshCredentials))
        .count();
    assert_eq!(refreshes, 1, "one refresh for one refused token");
    assert_ne!(r.c.status().state, State::Failed, "{:?}", r.c.status());
    assert!(
        matches!(r.log.last(), Some(Action::Fetch { .. })),
        "the page is asked again at once"
    );
}

#[test]
fn rule_9_other_4xx_stop_and_5xx_429_retry_honouring_retry_after() {
    // On the backlog a 4xx gives only the restore up (rule 2); the stream's
    // own 404 (the session is gone) stops the client.
    let mut r = Rig::new();
    r.http_error(false, 404, None, &error_body("not_found"));
    assert_ne!(r.c.status().state, State::Failed);
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::RestoreFailed { error } if error.code == "not_found")));
    r.http_error(true, 404, None, &error_body("not_found"));
    assert_eq!(r.c.status().state, State::Failed);

    let mut r = Rig::live_with(&simple_log(1));
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    r.until_reconnect();
    r.http_error(true, 503, Some("120"), b"");
    assert_eq!(r.c.status().state, State::Backoff);
    assert!(r.c.status().next_retry_at.unwrap() >= r.now + 120_000);
    r.until_reconnect();
    r.notices.clear();
    r.http_error(true, 429, None, &error_body("rate_limited"));
    assert_eq!(r.c.status().last_error.unwrap().status, Some(429));
    assert_eq!(r.c.status().state, State::Backoff);
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::Retrying { .. })));
    let path = r.until_reconnect();
    assert_eq!(path, "/v1/sessions/ses_1/events?after_seq=1");
}

#[test]
fn rule_9_sse_retry_field_is_a_floor_for_reconnects() {
    let mut r = Rig::live_with(&simple_log(1));
    r.send_raw(b"retry: 7000\n\n");
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    assert!(r.c.status().next_retry_at.unwrap() >= r.now + 7_000);
}

#[test]
fn rule_9_wrong_content_type_is_an_error_and_retried() {
    let mut r = Rig::new();
    let id = r.stream_id();
    r.c.handle_stream_opened(id, 200, Some("text/html"), None, r.now);
    r.pump();
    assert!(r
        .log
        .iter()
        .any(|a| matches!(a, Action::Abort { id: x } if *x == id)));
    assert_eq!(r.c.status().last_error.unwrap().code, "wrong_content_type");
    let path = r.until_reconnect();
    assert_eq!(
        path, "/v1/sessions/ses_1/events",
        "still behind the barrier: live only"
    );
}

#[test]
fn rule_9_oversized_event_is_skipped_with_a_notice_and_repaired() {
    let mut cfg = Config::session(SES);
    cfg.max_event_size = 300;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 1, BOOT)]);
    r.answer(&whole_page(&simple_log(1), 1));
    let big = user_msg(2, "u2", &"x".repeat(1000));
    r.send(&[big.clone(), user_msg(3, "u3", "small")]);
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::FrameSkipped { error } if error.code == "event_too_large")));
    assert_eq!(r.c.cursor(), 1);
    assert_eq!(r.c.status().state, State::Repairing);
    r.answer(&event_page(
        EPOCH,
        &[user_msg(1, "u1", "text 1"), big, user_msg(3, "u3", "small")],
        3,
        false,
    ));
    assert_eq!(r.c.cursor(), 3);
}

#[test]
fn rule_10_droppable_events_are_dropped_under_load_and_counted() {
    let mut cfg = Config::session(SES);
    cfg.buffer_limit = 3;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 0, BOOT)]);
    let mut frames = vec![turn_started(1, "t1")];
    for i in 0..10 {
        frames.push(progress(1, "t1", "c1", &i.to_string()));
    }
    r.send(&frames);
    // Held: the hello marker, turn.started, one progress; the rest dropped.
    assert_eq!(r.c.counters().droppable_dropped, 9);
    r.answer(&whole_page(&[], 0));
    assert_eq!(r.c.cursor(), 1);
}

#[test]
fn rule_10_buffer_bound_turns_durable_overflow_into_a_repair() {
    let log = simple_log(12);
    let mut cfg = Config::session(SES);
    cfg.buffer_limit = 4;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 0, BOOT)]);
    r.send(&log);
    r.answer(&whole_page(&[], 0));
    // Four frames were held; the rest became a marker: repair fills it.
    assert_eq!(r.c.status().state, State::Repairing);
    r.answer(&event_page(EPOCH, &log[2..], 12, false));
    assert_eq!(r.c.cursor(), 12);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
}

#[test]
fn rule_11_the_machine_never_issues_writes() {
    // Replay, restore, repair, reconnect and reloads under faults: only reads.
    let mut sim =
        machine_support::sim::Sim::new(3, vec![], 4, machine_support::sim::FaultMix::all());
    sim.run(2_000);
    assert!(sim.requested.len() > 3);
    for r in &sim.requested {
        let path = r
            .strip_prefix("GET ")
            .unwrap_or_else(|| panic!("{r} is a write"));
        let path = path.split('?').next().unwrap();
        assert!(
            path.ends_with("/events") || path.ends_with("/replay"),
            "{r} is not a read endpoint"
        );
    }
}

#[test]
fn rule_9_a_retry_after_date_is_read_on_the_wall_clock_and_a_wall_step_moves_no_deadline() {
    // `Sun, 06 Nov 1994 08:49:37 GMT` is 784 111 777 000 ms; the wall clock
    // reads 7 s before it, while the machine's own clock is near 0.
    let date = "Sun, 06 Nov 1994 08:49:37 GMT";
    let mut r = Rig::new();
    r.c.handle_wall_clock(784_111_777_000 - 7_000, r.now);
    r.http_error(true, 503, Some(date), &error_body("unavailable"));
    let retry = r.c.status().next_retry_at.expect("a retry is scheduled");
    assert!(
        (r.now + 7_000..r.now + 60_000).contains(&retry),
        "no earlier than the date, not the 5-minute cap: {retry} at {}",
        r.now
    );
    // The system clock is set back an hour: no deadline moves.
    let deadline = r.c.poll_timeout();
    r.c.handle_wall_clock(784_111_777_000 - 7_000 - 3_600_000, r.now);
    assert_eq!(r.c.poll_timeout(), deadline);
    assert_eq!(r.c.status().next_retry_at, Some(retry));
}
