//! A lying server, on the client: every loop it can drive the
//! client into is paced, and every byte it can make the client take is
//! bounded, each case with a `lastError` code: an epoch that flips after
//! every restore, a stream that ends right after its `hello` (with
//! `retry: 0`), a replay that runs past the head it announced, a restore
//! past its budget, and a stream of bytes that never makes an event.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{Action, Config, State};
use replay_client::core::protocol::Envelope;

/// The default backoff's first ceiling, also the least `retry:` floor.
const INITIAL_MS: u64 = 1_000;
/// The default backoff's cap.
const CAP_MS: u64 = 30_000;

/// Runs timers until a stream and, when `fetch`, a page request are out.
fn until_requests(r: &mut Rig, fetch: bool) {
    r.run_timers_until(|r| r.stream.is_some() && (!fetch || r.fetch.is_some()));
}

/// How many streams the machine asked for.
fn stream_opens(r: &Rig) -> usize {
    r.log
        .iter()
        .filter(|a| matches!(a, Action::OpenStream { .. }))
        .count()
}

fn code(r: &Rig) -> String {
    r.c.status().last_error.map(|e| e.code).unwrap_or_default()
}

#[test]
fn an_epoch_that_flips_after_every_agreeing_restore_backs_off() {
    let log = simple_log(1);
    let mut r = Rig::new();
    let mut restores_at = Vec::new();
    for i in 0..40 {
        until_requests(&mut r, true);
        restores_at.push(r.now);
        let epoch = format!("e{i}");
        r.open_ok();
        // The restore agrees (page and hello on one epoch) and goes live...
        r.send(&[hello(&epoch, 1, BOOT)]);
        r.answer(&replay_page(&epoch, BOOT, 0, &log, 1, false, None, None));
        assert_eq!(r.c.status().state, State::Live, "cycle {i}");
        // ...then the stream says the log was recreated, at once.
        r.send(&[hello(&format!("e{}", i + 1), 1, BOOT)]);
        assert_eq!(code(&r), "epoch_changed");
    }
    assert!(
        *restores_at.last().unwrap() >= 60_000,
        "40 restores by t = {} ms",
        restores_at.last().unwrap()
    );
    let after_a_minute: Vec<u64> = restores_at.into_iter().filter(|&t| t >= 60_000).collect();
    let span = after_a_minute.last().unwrap() - after_a_minute.first().unwrap();
    let per_s = (after_a_minute.len() - 1) as f64 * 1_000.0 / span.max(1) as f64;
    // Each restore is a stream and a page: 2 requests.
    assert!(
        2.0 * per_s <= 1.0,
        "{} restores after the first minute, {per_s:.2}/s",
        after_a_minute.len()
    );
}

#[test]
fn a_session_live_for_the_backoff_cap_restarts_at_once_on_a_new_epoch() {
    let log = simple_log(1);
    let mut r = Rig::new();
    // Ten quick flips grow the restart backoff...
    for i in 0..10 {
        until_requests(&mut r, true);
        r.open_ok();
        let epoch = format!("e{i}");
        r.send(&[hello(&epoch, 1, BOOT)]);
        r.answer(&replay_page(&epoch, BOOT, 0, &log, 1, false, None, None));
        r.send(&[hello(&format!("e{}", i + 1), 1, BOOT)]);
    }
    until_requests(&mut r, true);
    r.open_ok();
    r.send(&[hello("e10", 1, BOOT)]);
    r.answer(&replay_page("e10", BOOT, 0, &log, 1, false, None, None));
    // ...then the session stays live for the cap, heartbeating.
    let live_from = r.now;
    while r.now < live_from + CAP_MS {
        r.now += 5_000;
        r.send(&[heartbeat(1)]);
    }
    // A real epoch change now restarts from 0 at once.
    r.log.clear();
    r.send(&[hello("e11", 1, BOOT)]);
    assert!(
        r.log.iter().any(|a| matches!(a, Action::OpenStream { .. }))
            && r.log.iter().any(|a| matches!(a, Action::Fetch { .. })),
        "the restart waits: {:?}",
        r.log
    );
}

/// A client whose every stream sends `retry: 0` and its `hello`, then ends;
/// returns the times of the first `n` streams it opened.
fn hello_then_close(n: usize) -> (Rig, Vec<u64>) {
    let log = simple_log(2);
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&whole_page(&log, 2));
    let mut opens = Vec::new();
    while opens.len() < n {
        until_requests(&mut r, false);
        opens.push(r.now);
        r.open_ok();
        r.send_raw(b"retry: 0\n\n");
        r.send(&[hello(EPOCH, 2, BOOT)]);
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.stream = None;
        r.pump();
        assert_eq!(r.c.status().state, State::Backoff);
        assert_eq!(code(&r), "stream_ended_early");
    }
    (r, opens)
}

#[test]
fn a_stream_that_ends_right_after_its_hello_counts_as_a_failed_connection() {
    let (r, opens) = hello_then_close(200);
    let late: Vec<u64> = opens.into_iter().filter(|&t| t >= 60_000).collect();
    let span = late.last().unwrap() - late.first().unwrap();
    let per_s = (late.len() - 1) as f64 * 1_000.0 / span.max(1) as f64;
    assert!(per_s <= 1.0, "{per_s:.2} streams/s after the first minute");
    // The backoff reached its cap: on average half of it between opens.
    assert!(
        per_s <= 2.0 / (CAP_MS as f64 / 1_000.0) * 1.5,
        "{per_s:.3}/s"
    );
    assert!(stream_opens(&r) >= 200);
}

#[test]
fn a_stream_that_carries_events_after_its_hello_resets_the_backoff() {
    let (mut r, _) = hello_then_close(10);
    until_requests(&mut r, false);
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT), heartbeat(2)]);
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    let at = r.c.status().next_retry_at.expect("waiting to reconnect");
    // The first attempt again: the floor plus at most the first ceiling.
    assert!(at - r.now <= 2 * INITIAL_MS, "waits {} ms", at - r.now);
}

#[test]
fn retry_zero_is_a_floor_of_the_minimum_backoff() {
    for seed in 1..=20 {
        let mut cfg = Config::session(SES);
        cfg.seed = seed;
        let mut r = Rig::with(cfg, None);
        r.open_ok();
        r.send_raw(b"retry: 0\n\n");
        r.send(&[hello(EPOCH, 2, BOOT)]);
        r.answer(&whole_page(&simple_log(2), 2));
        r.send(&[heartbeat(2)]);
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.pump();
        let at = r.c.status().next_retry_at.expect("waiting to reconnect");
        assert!(
            at - r.now >= INITIAL_MS,
            "seed {seed}: reconnects after {} ms",
            at - r.now
        );
    }
}

/// `n` user messages from `seq` on.
fn messages(from: u64, n: u64) -> Vec<Envelope> {
    (from..from + n)
        .map(|s| user_msg(s, &format!("u{s}"), "x"))
        .collect()
}

#[test]
fn a_replay_past_the_head_it_announced_stops_with_an_error() {
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 3, BOOT)]);
    let mut pages = 0;
    let mut next = 1;
    // Pages of 500 new events each, `has_more` always, head always 3.
    while r.fetch.is_some() && pages < 200 {
        let events = messages(next, 500);
        next += 500;
        r.answer(&replay_page(EPOCH, BOOT, 0, &events, 3, true, None, None));
        pages += 1;
    }
    assert_eq!(r.c.status().state, State::Failed, "after {pages} pages");
    assert_eq!(code(&r), "history_past_head");
    assert!(pages <= 5, "{pages} pages read");
    assert!(r.c.cursor() <= 3 + 2_000, "cursor {}", r.c.cursor());
}

#[test]
fn a_repair_page_past_its_head_stops_too() {
    let mut r = Rig::live_with(&simple_log(2));
    // A heartbeat announces head 4: a gap, repaired from event pages.
    r.send(&[heartbeat(4)]);
    let mut pages = 0;
    let mut next = 2;
    while r.fetch.is_some() && pages < 200 {
        let events = messages(next, 500);
        next += 499;
        r.answer(&event_page(EPOCH, &events, 4, true));
        pages += 1;
    }
    assert_eq!(r.c.status().state, State::Failed, "after {pages} pages");
    assert_eq!(code(&r), "history_past_head");
}

#[test]
fn a_restore_past_its_budget_stops_with_an_error() {
    for (events, bytes) in [(5_000, u64::MAX), (u64::MAX, 512 << 10)] {
        let mut cfg = Config::session(SES);
        cfg.restore_max_events = events;
        cfg.restore_max_bytes = bytes;
        let mut r = Rig::with(cfg, None);
        r.open_ok();
        r.send(&[hello(EPOCH, 1, BOOT)]);
        let mut pages = 0;
        let mut next = 1;
        // An honest-looking endless history: each page's head is its end.
        while r.fetch.is_some() && pages < 1_000 {
            let page = messages(next, 500);
            next += 500;
            r.answer(&replay_page(
                EPOCH,
                BOOT,
                0,
                &page,
                next - 1 + 500,
                true,
                None,
                None,
            ));
            pages += 1;
        }
        assert_eq!(r.c.status().state, State::Failed, "after {pages} pages");
        assert_eq!(code(&r), "history_too_large");
        assert!(pages <= 11 || bytes != u64::MAX, "{pages} pages read");
        assert!(pages < 1_000, "{pages} pages read");
    }
}

#[test]
fn stream_bytes_that_make_no_event_are_cut_at_the_body_budget() {
    let mut cfg = Config::session(SES);
    cfg.max_body_bytes = 1 << 20;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&whole_page(&simple_log(2), 2));
    assert_eq!(r.c.status().state, State::Live);
    let first = r.stream_id();
    // Comment lines (a decompressed bomb, say): bounded in the parser, but
    // read for ever until the stall watchdog without this budget.
    let chunk = format!(": {}\n", "z".repeat(64 << 10));
    let mut sent = 0;
    while r.stream == Some(first) && sent < 8 << 20 {
        r.send_raw(chunk.as_bytes());
        sent += chunk.len();
    }
    assert_ne!(r.stream, Some(first), "{sent} bytes read without an event");
    assert!(sent <= (1 << 20) + chunk.len(), "{sent}");
    assert_eq!(code(&r), "body_too_large");
    assert_eq!(r.c.status().state, State::Backoff);
}

#[test]
fn an_oversized_stream_event_sets_last_error_at_once() {
    let mut cfg = Config::session(SES);
    cfg.max_event_size = 64 << 10;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send_raw(format!("data: {}", "x".repeat(100 << 10)).as_bytes());
    assert_eq!(code(&r), "event_too_large");
}
