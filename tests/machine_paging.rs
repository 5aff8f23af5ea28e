//! Pipelined backlog paging at depth 1: one speculative page request behind
//! the one in flight, promoted when the cursor lands on it, dropped
//! otherwise. Deeper windows: `machine_prefetch_window.rs`.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::paging::*;
use machine_support::rig::*;
use replay_client::core::machine::{Action, Config, Lifecycle, Notice, RequestId, State, Target};
use replay_client::core::protocol::{Envelope, TranscriptItem};
use replay_client::core::transcript::fold;

fn rig() -> Rig {
    paging_rig(1)
}

/// A rig in restore whose live-only stream said hello at `head`.
fn restoring(head: u64) -> Rig {
    restoring_at_depth(head, 1)
}

#[test]
fn a_one_page_backlog_never_prefetches() {
    let log = simple_log(LIMIT as u64);
    let mut r = restoring(log.len() as u64);
    assert_eq!(r.fetch_paths(), [rp(0)]);
    r.answer(&page(&log, 0, log.len()));
    assert_eq!(fetches_issued(&r), [rp(0)]);
    assert_eq!(r.c.cursor(), LIMIT as u64);

    // Two pages known only from the first one's head: nothing to speculate
    // on either (the second page is the last one).
    let log = simple_log(15);
    let mut r = rig();
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.fetch_paths(), [rp(10)]);
    r.open_ok();
    r.send(&[hello(EPOCH, 15, BOOT)]);
    r.answer(&page(&log, 10, 15));
    assert_eq!(fetches_issued(&r), [rp(0), rp(10)]);
    restored_once(&r, 15);
}

#[test]
fn a_multi_page_backlog_keeps_one_page_ahead_and_applies_them_in_order() {
    let log = simple_log(50);
    let mut r = restoring(50);
    // The hello's head already shows a second page.
    assert_eq!(r.fetch_paths(), [rp(0), rp(10)]);
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.c.cursor(), 10);
    assert_eq!(r.fetch_paths(), [rp(10), rp(20)]);
    assert!(r.changes().is_empty(), "nothing painted mid-restore");
    serve(&mut r, &log);
    // Every page was asked for exactly once: no speculative request wasted.
    assert_eq!(fetches_issued(&r), [rp(0), rp(10), rp(20), rp(30), rp(40)]);
    assert!(!r.log.iter().any(|a| matches!(a, Action::Abort { .. })));
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 50);
    let changes = r.changes();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].restore_completed);
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.counters().restores, 1);
}

#[test]
fn a_page_head_starts_the_pipeline_without_a_hello() {
    let log = simple_log(35);
    let mut r = rig();
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.fetch_paths(), [rp(10), rp(20)]);
    r.answer(&page(&log, 10, 20));
    assert_eq!(r.fetch_paths(), [rp(20), rp(30)]);
    r.answer(&page(&log, 20, 30));
    // The page after 30 is the last one: no further speculation.
    assert_eq!(r.fetch_paths(), [rp(30)]);
    r.open_ok();
    r.send(&[hello(EPOCH, 35, BOOT)]);
    r.answer(&page(&log, 30, 35));
    assert_eq!(fetches_issued(&r), [rp(0), rp(10), rp(20), rp(30)]);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 35);
}

#[test]
fn an_early_prefetch_body_is_kept_until_its_turn() {
    let log = simple_log(30);
    let mut r = restoring(30);
    assert_eq!(r.fetch_paths(), [rp(0), rp(10)]);
    // The second page arrives first: nothing moves yet.
    r.answer_path(&rp(10), &page(&log, 10, 20));
    assert_eq!(r.c.cursor(), 0);
    // From nothing, before its first page: `connecting` (rule 2).
    assert_eq!(r.c.status().state, State::Connecting);
    assert!(r.changes().is_empty());
    assert_eq!(r.fetch_paths(), [rp(0)]);
    // The first page brings both in, in order.
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.c.cursor(), 20);
    assert_eq!(r.fetch_paths(), [rp(20)]);
    r.answer(&page(&log, 20, 30));
    assert_eq!(fetches_issued(&r), [rp(0), rp(10), rp(20)]);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 30);
    assert_eq!(r.changes().len(), 1);
}

#[test]
fn an_early_page_is_read_only_after_the_next_request_went_out() {
    let log = simple_log(40);
    let mut r = restoring(40);
    r.answer_path(&rp(10), &page(&log, 10, 20));
    // Page 0 arrives; the page after it is already here.
    let (id, _, _) = r.fetch.clone().unwrap();
    r.forget_fetch(id);
    r.c.handle_replay_page(id, &page(&log, 0, 10), r.now);
    r.pump();
    assert!(r.c.has_waiting_page());
    assert_eq!(
        r.c.cursor(),
        10,
        "the early page is not read in the same input"
    );
    assert!(
        r.fetch_paths().contains(&rp(20)),
        "the request after it is queued first: {:?}",
        r.fetch_paths()
    );
    r.c.handle_waiting_page(r.now);
    r.pump_waiting_pages();
    assert_eq!(r.c.cursor(), 20);
    assert!(!r.c.has_waiting_page());
    serve(&mut r, &log);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 40);
}

#[test]
fn a_short_page_aborts_the_prefetch_and_reads_on_from_the_cursor() {
    let log = simple_log(40);
    let mut r = restoring(40);
    let speculative = r.fetches[1].0;
    assert_eq!(r.fetches[1].2, rp(10));
    // The server capped the page at 5 events: the cursor is 5, not 10.
    let before = r.log.len();
    r.answer(&page(&log, 0, 5));
    assert!(aborted(&r.log[before..], speculative));
    assert_eq!(r.c.cursor(), 5);
    assert_eq!(r.fetch_paths(), [rp(5), rp(15)]);
    // A late answer to the aborted prefetch is ignored.
    r.c.handle_replay_page(speculative, &page(&log, 10, 20), r.now);
    assert!(r.pump().is_empty());
    assert_eq!(r.c.cursor(), 5);
    serve(&mut r, &log);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 40);
}

#[test]
fn a_failed_prefetch_is_dropped_and_the_page_fetched_normally() {
    type Fail = fn(&mut Rig, RequestId);
    let failures: [(&str, Fail); 5] = [
        ("500", |r, id| {
            r.c.handle_http_error(id, 500, Some("5"), b"oops", r.now)
        }),
        ("409", |r, id| {
            r.c.handle_http_error(id, 409, None, &error_body("cursor_ahead"), r.now)
        }),
        ("400", |r, id| {
            r.c.handle_http_error(id, 400, None, &error_body("invalid_cursor"), r.now)
        }),
        ("401", |r, id| {
            r.c.handle_http_error(id, 401, None, &error_body("unauthorized"), r.now)
        }),
        ("network", |r, id| {
            r.c.handle_network_error(id, "reset", r.now)
        }),
    ];
    for (name, fail) in failures {
        let log = simple_log(30);
        let mut r = restoring(30);
        let (speculative, _, path) = r.fetches[1].clone();
        assert_eq!(path, rp(10));
        r.forget_fetch(speculative);
        fail(&mut r, speculative);
        // No notice, no backoff, no retry, no restart: as if never asked.
        assert!(r.pump().is_empty(), "{name}: no action");
        assert!(r.notices.is_empty(), "{name}: {:?}", r.notices);
        // From nothing, before its first page: `connecting` (rule 2).
        assert_eq!(r.c.status().state, State::Connecting, "{name}");
        assert_eq!(r.c.status().next_retry_at, None, "{name}");
        assert_eq!(r.fetch_paths(), [rp(0)], "{name}: not sent again");
        r.answer(&page(&log, 0, 10));
        // The normal path asks for that page itself, at once.
        assert_eq!(r.fetch_paths(), [rp(10), rp(20)], "{name}");
        serve(&mut r, &log);
        assert_eq!(
            r.c.transcript().unwrap().items,
            fold(EPOCH, &log).items,
            "{name}"
        );
        restored_once(&r, 30);
        assert_eq!(r.c.counters().restores, 1, "{name}");
    }
}

#[test]
fn a_prefetch_without_an_answer_times_out_silently() {
    let log = simple_log(30);
    // The whole answer's deadline (fetch_timeout_ms), not the first byte's.
    let mut cfg = forward();
    cfg.replay_page_limit = LIMIT;
    cfg.prefetch_depth = 1;
    cfg.connect_timeout_ms = cfg.fetch_timeout_ms;
    let mut r = Rig::with(cfg, None);
    let timeout = r.c.config().fetch_timeout_ms;
    r.open_ok();
    // The head becomes known late, so the prefetch is younger than the page.
    r.now = timeout / 2;
    r.send(&[hello(EPOCH, 30, BOOT)]);
    let (speculative, _, path) = r.fetches[1].clone();
    assert_eq!(path, rp(10));
    // The page itself times out and is retried after its backoff.
    r.advance(timeout / 2);
    while r.c.status().next_retry_at.is_some() {
        r.send(&[heartbeat(30)]);
        r.advance(100);
    }
    let notices = r.notices.len();
    assert!(r.fetches.iter().any(|f| f.0 == speculative));
    // The prefetch's own deadline: aborted, no notice, nothing re-sent.
    r.send(&[heartbeat(30)]);
    let before = r.log.len();
    r.now = timeout / 2 + timeout;
    r.c.handle_timeout(r.now);
    r.pump();
    let actions = &r.log[before..];
    assert!(aborted(actions, speculative), "{actions:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::Fetch { .. })));
    assert_eq!(r.notices.len(), notices);
    assert_eq!(r.fetch_paths(), [rp(0)]);
    r.answer_path(&rp(0), &page(&log, 0, 10));
    assert_ne!(r.fetches[0].0, speculative, "a new request");
    assert_eq!(r.fetch_paths(), [rp(10), rp(20)]);
    serve(&mut r, &log);
    assert_eq!(r.c.cursor(), 30);
}

#[test]
fn restart_from_zero_close_and_offline_abort_the_prefetch() {
    let log = simple_log(30);

    // 409 on the page: restore from 0, the prefetch is aborted with it.
    let mut r = restoring(30);
    let speculative = r.fetches[1].0;
    let before = r.log.len();
    r.http_error(false, 409, None, &error_body("cursor_ahead"));
    assert!(aborted(&r.log[before..], speculative));
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::CursorRejected { .. })));
    assert_eq!(r.fetch_paths(), [rp(0)], "a new restore, nothing ahead yet");

    // A new epoch in the page: same.
    let mut r = restoring(30);
    let speculative = r.fetches[1].0;
    let before = r.log.len();
    r.answer(&replay_page(
        "e2",
        BOOT,
        0,
        &log[..10],
        30,
        true,
        None,
        None,
    ));
    assert!(aborted(&r.log[before..], speculative));
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::EpochChanged { .. })));

    // close(): only aborts (the prefetch's among them) and a final persist.
    let mut r = restoring(30);
    let speculative = r.fetches[1].0;
    let before = r.log.len();
    r.c.close(r.now);
    r.pump();
    assert!(aborted(&r.log[before..], speculative));
    assert!(r.log[before..]
        .iter()
        .all(|a| matches!(a, Action::Abort { .. } | Action::Persist(_))));

    // Offline: aborted; back online the page is sent again, and pipelining
    // resumes at once.
    let mut r = restoring(30);
    let speculative = r.fetches[1].0;
    let before = r.log.len();
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    r.pump();
    assert!(aborted(&r.log[before..], speculative));
    assert!(r.fetches.is_empty());
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    r.pump();
    assert_eq!(r.fetch_paths(), [rp(0), rp(10)]);
    r.open_ok();
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.fetch_paths(), [rp(10), rp(20)]);
    serve(&mut r, &log);
    assert_eq!(r.c.cursor(), 30);
}

#[test]
fn a_promoted_page_is_epoch_checked_like_any_page() {
    let log = simple_log(30);
    let mut r = restoring(30);
    // The prefetched page comes from a recreated log.
    r.answer_path(
        &rp(10),
        &replay_page("e2", BOOT, 10, &log[10..20], 30, true, None, None),
    );
    r.answer(&page(&log, 0, 10));
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::EpochChanged { .. })));
    assert_eq!(r.c.cursor(), 0);
    assert_eq!(r.c.counters().restores, 2);
    assert_eq!(r.fetch_paths(), [rp(0)]);
}

#[test]
fn the_global_list_is_never_pipelined() {
    let mut cfg = Config::new(Target::Global);
    cfg.replay_page_limit = LIMIT;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 40, BOOT)]);
    let page_of = |from: u64| -> Vec<Envelope> {
        (from + 1..=from + LIMIT as u64)
            .map(|id| {
                let mut e = user_msg(1, &format!("m{id}"), "x");
                e.id = Some(id);
                e
            })
            .collect()
    };
    for n in 0..4u64 {
        assert_eq!(
            r.fetch_paths(),
            [format!("/v1/events?after_id={}&limit={LIMIT}", n * 10)]
        );
        r.answer(&event_page(EPOCH, &page_of(n * 10), 40, n < 3));
    }
    assert_eq!(r.c.cursor(), 40);
    assert_eq!(fetches_issued(&r).len(), 4);
    assert_eq!(r.c.status().state, State::Live);
}

#[test]
fn a_long_repair_pipelines_after_its_verifying_page() {
    let log = simple_log(45);
    let mut r = restoring(5);
    r.answer(&page(&log[..5], 0, 5));
    assert_eq!(r.c.status().state, State::Live);
    r.send(&[heartbeat(45)]);
    // The verifying page's first event is a check: no speculation behind it.
    assert_eq!(r.fetch_paths(), [events_path(4)]);
    r.answer(&event_page(EPOCH, &log[4..14], 45, true));
    assert_eq!(r.c.cursor(), 14);
    assert_eq!(r.fetch_paths(), [events_path(14), events_path(24)]);
    for from in [14, 24, 34, 44] {
        let to = (from + 10).min(45);
        r.answer(&event_page(EPOCH, &log[from..to], 45, to < 45));
    }
    assert_eq!(r.c.cursor(), 45);
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.counters().gaps_repaired, 1);
    let repairs: Vec<_> = fetches_issued(&r)
        .into_iter()
        .filter(|p| p.contains("/events?"))
        .collect();
    assert_eq!(
        repairs,
        [
            events_path(4),
            events_path(14),
            events_path(24),
            events_path(34),
            events_path(44)
        ]
    );
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
}

/// Mirrors the view from `poll_view_progress` the way the browser layer
/// stages a restore's items: reset, in-place updates, appends.
fn track(r: &mut Rig, staged: &mut Vec<TranscriptItem>) {
    let Some(p) = r.c.poll_view_progress() else {
        return;
    };
    let items = r.c.view().as_session().unwrap().items();
    if p.reset {
        staged.clear();
    }
    let have = staged.len();
    for &i in p.items_updated.iter().filter(|&&i| i < have) {
        staged[i] = items[i].clone();
    }
    staged.extend_from_slice(&items[have..]);
}

#[test]
fn view_progress_flows_while_the_restore_withholds_the_view() {
    let mut log = simple_log(25);
    // A tool card on page 1 completed on page 2: an in-place update.
    log[7] = tool_started(8, "t1", "c1");
    log[13] = tool_completed(14, "t1", "c1", "done");
    let mut r = restoring(25);
    let mut staged = Vec::new();
    r.answer(&page(&log, 0, 10));
    assert!(r.changes().is_empty(), "the view change is withheld");
    track(&mut r, &mut staged);
    assert_eq!(staged.len(), r.c.view().as_session().unwrap().items().len());
    let tool_at = staged
        .iter()
        .position(|i| matches!(i, TranscriptItem::Tool { .. }))
        .unwrap();
    r.answer(&page(&log, 10, 20));
    let p = r.c.poll_view_progress().unwrap();
    assert!(p.items_updated.contains(&tool_at), "{p:?}");
    assert!(r.c.is_restoring());
    // Put back what was taken, as if polled by the tracker.
    let items = r.c.view().as_session().unwrap().items().to_vec();
    staged[tool_at] = items[tool_at].clone();
    let have = staged.len();
    staged.extend_from_slice(&items[have..]);
    r.answer(&page(&log, 20, 25));
    track(&mut r, &mut staged);
    assert!(!r.c.is_restoring());
    assert_eq!(staged, r.c.view().as_session().unwrap().items());
    restored_once(&r, 25);
    assert_eq!(r.changes().len(), 1);
    // An epoch change starts over: progress says reset.
    r.send(&[hello("e_other", 25, BOOT)]);
    let p = r.c.poll_view_progress().unwrap();
    assert!(p.reset);
}

#[test]
fn a_restore_ramps_up_from_a_small_first_page() {
    let mut cfg = forward();
    cfg.replay_page_limit = LIMIT;
    cfg.first_page_limit = 3;
    cfg.prefetch_depth = 1;
    let log = simple_log(30);
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 30, BOOT)]);
    let path = |after: u64, limit: u32| {
        format!("/v1/sessions/ses_1/replay?after_cursor={after}&limit={limit}")
    };
    // The small first page, and at once the (twice as large) page after it.
    assert_eq!(r.fetch_paths(), [path(0, 3), path(3, 6)]);
    r.answer(&page(&log, 0, 3));
    assert_eq!(r.fetch_paths(), [path(3, 6), path(9, LIMIT)]);
    r.answer(&page(&log, 3, 9));
    r.answer(&page(&log, 9, 19));
    r.answer(&page(&log, 19, 29));
    r.answer(&page(&log, 29, 30));
    assert_eq!(
        fetches_issued(&r),
        [
            path(0, 3),
            path(3, 6),
            path(9, LIMIT),
            path(19, LIMIT),
            path(29, LIMIT)
        ]
    );
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 30);
}
