//! Pipelined backlog paging with a window of several speculative pages (the
//! default depth is 2): pages are asked for ahead in order, applied in
//! order whatever order they arrive in, and a failure drops the failing
//! page and those behind it, never the pages before it.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::paging::*;
use machine_support::rig::*;
use replay_client::core::machine::{Action, Config, State};
use replay_client::core::transcript::fold;

#[test]
fn the_default_window_keeps_two_pages_ahead() {
    assert_eq!(Config::session(SES).prefetch_depth, 2);
    let log = simple_log(60);
    let mut r = restoring_at_depth(60, 2);
    assert_eq!(r.fetch_paths(), [rp(0), rp(10), rp(20)]);
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.fetch_paths(), [rp(10), rp(20), rp(30)]);
    serve(&mut r, &log);
    // Every page was asked for exactly once: no speculative request wasted.
    assert_eq!(
        fetches_issued(&r),
        [rp(0), rp(10), rp(20), rp(30), rp(40), rp(50)]
    );
    assert!(!r.log.iter().any(|a| matches!(a, Action::Abort { .. })));
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 60);
    assert_eq!(r.changes().len(), 1, "painted once");
    assert_eq!(r.c.status().state, State::Live);
}

#[test]
fn the_window_stops_at_the_known_head_and_depth_zero_turns_it_off() {
    let log = simple_log(25);
    let mut r = restoring_at_depth(25, 3);
    // The page after 20 is the last one: nothing beyond it.
    assert_eq!(r.fetch_paths(), [rp(0), rp(10), rp(20)]);
    serve(&mut r, &log);
    assert_eq!(fetches_issued(&r), [rp(0), rp(10), rp(20)]);
    restored_once(&r, 25);

    let mut r = restoring_at_depth(25, 0);
    assert_eq!(r.fetch_paths(), [rp(0)]);
    serve(&mut r, &log);
    assert_eq!(fetches_issued(&r), [rp(0), rp(10), rp(20)]);
    // A request that answered is over: moving on aborts nothing.
    assert!(!r.log.iter().any(|a| matches!(a, Action::Abort { .. })));
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
}

#[test]
fn pages_arriving_in_reverse_order_are_applied_in_order() {
    let log = simple_log(40);
    let mut r = restoring_at_depth(40, 2);
    r.answer_path(&rp(20), &page(&log, 20, 30));
    r.answer_path(&rp(10), &page(&log, 10, 20));
    assert_eq!(r.c.cursor(), 0, "nothing moves before the first page");
    assert!(r.changes().is_empty());
    r.answer(&page(&log, 0, 10));
    // The two early pages were read, each after the next request went out.
    assert_eq!(r.c.cursor(), 30);
    assert_eq!(r.fetch_paths(), [rp(30)]);
    serve(&mut r, &log);
    assert_eq!(fetches_issued(&r), [rp(0), rp(10), rp(20), rp(30)]);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 40);
    assert_eq!(r.changes().len(), 1);
}

#[test]
fn a_failed_prefetch_drops_the_pages_behind_it_and_is_never_speculated_again() {
    let log = simple_log(60);
    let mut r = restoring_at_depth(60, 2);
    let (second, _, _) = r.fetches[2].clone();
    // The page after 10 arrived; the one after 20 fails.
    r.answer_path(&rp(10), &page(&log, 10, 20));
    r.forget_fetch(second);
    r.c.handle_http_error(second, 503, None, b"busy", r.now);
    let actions = r.pump();
    assert!(
        actions.is_empty(),
        "nothing aborted, nothing re-sent: {actions:?}"
    );
    assert!(r.notices.is_empty(), "{:?}", r.notices);
    assert_eq!(r.c.status().next_retry_at, None);
    assert_eq!(r.fetch_paths(), [rp(0)]);
    // The first page brings the kept one in; the failed page is then the
    // normal fetch, and speculation resumes behind it.
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.c.cursor(), 20);
    assert_eq!(r.fetch_paths(), [rp(20), rp(30), rp(40)]);
    serve(&mut r, &log);
    // The kept page was not asked for again; the failed one was, normally.
    let issued = fetches_issued(&r);
    assert_eq!(issued.iter().filter(|p| **p == rp(10)).count(), 1);
    assert_eq!(issued.iter().filter(|p| **p == rp(20)).count(), 2);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 60);
}

#[test]
fn a_failing_first_prefetch_aborts_the_one_behind_it() {
    let log = simple_log(40);
    let mut r = restoring_at_depth(40, 2);
    let (first, _, _) = r.fetches[1].clone();
    let (second, _, _) = r.fetches[2].clone();
    r.forget_fetch(first);
    let before = r.log.len();
    r.c.handle_network_error(first, "reset", r.now);
    r.pump();
    assert!(aborted(&r.log[before..], second));
    assert_eq!(r.fetch_paths(), [rp(0)]);
    r.answer(&page(&log, 0, 10));
    assert_eq!(r.fetch_paths(), [rp(10), rp(20), rp(30)]);
    serve(&mut r, &log);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 40);
}

#[test]
fn a_short_page_aborts_every_prefetch() {
    let log = simple_log(40);
    let mut r = restoring_at_depth(40, 2);
    let ahead: Vec<_> = r.fetches[1..].iter().map(|f| f.0).collect();
    assert_eq!(ahead.len(), 2);
    let before = r.log.len();
    r.answer(&page(&log, 0, 5));
    assert!(ahead.iter().all(|id| aborted(&r.log[before..], *id)));
    assert_eq!(r.c.cursor(), 5);
    assert_eq!(r.fetch_paths(), [rp(5), rp(15), rp(25)]);
    serve(&mut r, &log);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 40);
}

#[test]
fn a_ramping_restore_doubles_each_page_of_the_window() {
    let mut cfg = forward();
    cfg.replay_page_limit = 12;
    cfg.first_page_limit = 3;
    let log = simple_log(40);
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 40, BOOT)]);
    let path = |after: u64, limit: u32| {
        format!("/v1/sessions/ses_1/replay?after_cursor={after}&limit={limit}")
    };
    assert_eq!(r.fetch_paths(), [path(0, 3), path(3, 6), path(9, 12)]);
    r.answer(&page(&log, 0, 3));
    assert_eq!(r.fetch_paths(), [path(3, 6), path(9, 12), path(21, 12)]);
    r.answer(&page(&log, 3, 9));
    r.answer(&page(&log, 9, 21));
    r.answer(&page(&log, 21, 33));
    r.answer(&page(&log, 33, 40));
    assert_eq!(
        fetches_issued(&r),
        [
            path(0, 3),
            path(3, 6),
            path(9, 12),
            path(21, 12),
            path(33, 12)
        ]
    );
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
    restored_once(&r, 40);
}
