//! Hostile inputs and loads on the client: huge retry hints, a
//! restart that would bring every client back at once, a barrier that keeps
//! failing, an endless overlay, a page that does not move, a proxy's plain
//! 400, and the status while the runtime cannot be reached. Also: deep
//! events in pages, epochs that disagree, held bytes, pages over their
//! limit, and comments that must not keep a stream alive.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::json::RawJson;
use replay_client::core::machine::{Action, Config, FetchKind, Notice, State};
use replay_client::core::protocol::*;
use replay_client::core::transcript::fold;

/// The cap of any retry hint (PROTOCOL.md §6 rule 9).
const FIVE_MINUTES: u64 = 300_000;
/// The default backoff's first ceiling.
const INITIAL_CEILING: u64 = 1_000;

/// A live session client with its own jitter seed; the stream sent `retry:`
/// first, as the reference server does.
fn live_seeded(seed: u64, retry_ms: u64) -> Rig {
    let mut cfg = Config::session(SES);
    cfg.seed = seed;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send_raw(format!("retry: {retry_ms}\n\n").as_bytes());
    let log = simple_log(2);
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&whole_page(&log, 2));
    assert_eq!(r.c.status().state, State::Live);
    r
}

/// Runs timers until `t` (exclusive); true if a stream was requested.
fn reconnects_before(r: &mut Rig, t: u64) -> bool {
    while let Some(at) = r.c.poll_timeout() {
        if at >= t {
            break;
        }
        r.now = r.now.max(at);
        r.c.handle_timeout(r.now);
        if r.pump()
            .iter()
            .any(|a| matches!(a, Action::OpenStream { .. }))
        {
            return true;
        }
    }
    false
}

// ---- 1. saturating time arithmetic, 2. capped hints ----

#[test]
fn a_huge_retry_after_is_capped_at_five_minutes_and_never_wraps() {
    for hint in [
        "99999999999999999999",
        "18446744073709551615",
        "Fri, 31 Dec 9999 23:59:59 GMT",
    ] {
        let mut r = live_seeded(1, 1_000);
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.pump();
        r.until_reconnect();
        r.http_error(true, 503, Some(hint), b"");
        let now = r.now;
        let at = r.c.status().next_retry_at.expect("waiting to retry");
        assert!(
            (now + FIVE_MINUTES..=now + FIVE_MINUTES + 2 * INITIAL_CEILING).contains(&at),
            "{hint}: retry at +{} ms",
            at.saturating_sub(now)
        );
        assert!(
            !reconnects_before(&mut r, now + FIVE_MINUTES),
            "{hint}: reconnected before the floor"
        );
        assert_eq!(r.until_reconnect(), "/v1/sessions/ses_1/events?after_seq=2");
    }
}

#[test]
fn a_huge_retry_after_on_a_page_is_capped_too() {
    let mut r = Rig::new();
    r.http_error(false, 429, Some("99999999999999999999"), b"");
    let now = r.now;
    let at = r.c.status().next_retry_at.expect("waiting to retry");
    assert!(
        (now + FIVE_MINUTES..=now + FIVE_MINUTES + INITIAL_CEILING).contains(&at),
        "retry at +{} ms",
        at.saturating_sub(now)
    );
}

#[test]
fn a_huge_sse_retry_is_capped_at_five_minutes_and_never_wraps() {
    let mut r = live_seeded(2, 1_000);
    r.send_raw(b"retry: 99999999999999999999\n\n");
    let id = r.stream_id();
    r.c.handle_stream_end(id, r.now);
    r.pump();
    let now = r.now;
    let at = r.c.status().next_retry_at.expect("waiting to retry");
    assert!(
        (now + FIVE_MINUTES..=now + FIVE_MINUTES + INITIAL_CEILING).contains(&at),
        "retry at +{} ms",
        at.saturating_sub(now)
    );
    assert!(!reconnects_before(&mut r, now + FIVE_MINUTES));
}

#[test]
fn a_retry_hint_is_a_floor_with_full_jitter_above_it() {
    let mut delays = Vec::new();
    for seed in 0..200 {
        let mut r = live_seeded(seed, 7_000);
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.pump();
        delays.push(r.c.status().next_retry_at.unwrap() - r.now);
    }
    let (min, max) = (*delays.iter().min().unwrap(), *delays.iter().max().unwrap());
    assert!(min >= 7_000, "below the floor: {min}");
    assert!(
        max <= 7_000 + INITIAL_CEILING,
        "above floor + ceiling: {max}"
    );
    assert!(
        max - min >= INITIAL_CEILING * 9 / 10,
        "spread only {min}..{max}"
    );
}

/// Prints a histogram of `times` (ms after the restart) in `bucket` ms bins.
fn histogram(title: &str, times: &[u64], bucket: u64) -> Vec<usize> {
    let last = times.iter().max().copied().unwrap_or(0) / bucket;
    let mut bins = vec![0usize; last as usize + 1];
    for t in times {
        bins[(t / bucket) as usize] += 1;
    }
    println!("{title} ({} clients, {bucket} ms bins):", times.len());
    for (i, n) in bins.iter().enumerate() {
        let from = i as u64 * bucket;
        if *n > 0 || from >= times.iter().min().copied().unwrap_or(0) {
            println!(
                "  {:>6}..{:<6} ms {:>5} {}",
                from,
                from + bucket,
                n,
                "#".repeat(n.div_ceil(5))
            );
        }
    }
    bins
}

/// 1 000 clients told `retry: 1000` lose their stream at once (a server
/// restart); the server is back after 3 s. Their first reconnects spread
/// over the whole backoff window above the floor, and so do the
/// reconnects that find the server up again.
#[test]
fn a_thousand_clients_after_a_restart_spread_over_the_backoff_window() {
    const CLIENTS: u64 = 1_000;
    const RESTART_AT: u64 = 10_000;
    const DOWN_FOR: u64 = 3_000;
    let mut first = Vec::new();
    let mut back = Vec::new();
    for seed in 0..CLIENTS {
        let mut r = live_seeded(seed, 1_000);
        r.now = RESTART_AT;
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.pump();
        r.until_reconnect();
        first.push(r.now - RESTART_AT);
        // Attempts while the server is down fail at once.
        while r.now < RESTART_AT + DOWN_FOR {
            let id = r.stream_id();
            r.c.handle_network_error(id, "connection refused", r.now);
            r.pump();
            r.until_reconnect();
        }
        back.push(r.now - RESTART_AT);
    }
    let bins = histogram("first reconnect after the restart", &first, 100);
    histogram("first reconnect that finds the server up", &back, 250);
    let (min, max) = (*first.iter().min().unwrap(), *first.iter().max().unwrap());
    assert!(min >= 1_000, "a client came back before the floor: {min}");
    assert!(
        max - min >= INITIAL_CEILING * 9 / 10,
        "reconnects spread over {min}..{max} ms only"
    );
    // Uniform would put ~100 in each 100 ms bin: no burst of more than 2.5×.
    let peak = *bins.iter().max().unwrap();
    assert!(peak <= 250, "{peak} clients reconnected in one 100 ms bin");
    let (bmin, bmax) = (*back.iter().min().unwrap(), *back.iter().max().unwrap());
    assert!(bmin >= DOWN_FOR && bmax - bmin >= 1_000, "{bmin}..{bmax}");
}

// ---- 3. bounded barrier buffer ----

fn overlay(r: &Rig) -> Option<(String, bool)> {
    let v = r.c.view().as_session().unwrap();
    v.overlay().map(|o| (o.text.as_str().to_owned(), o.stale))
}
/// A restore whose replay keeps failing while the stream goes on sending.
fn failing_restore(limit: usize) -> Rig {
    let mut cfg = Config::session(SES);
    cfg.buffer_limit = limit;
    cfg.prefetch_depth = 0;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 1, BOOT)]);
    r.http_error(false, 503, None, b"");
    r
}

#[test]
fn a_failing_restore_holds_transients_within_a_bound() {
    let mut r = failing_restore(8);
    let mut text = String::new();
    for i in 0..5_000u64 {
        let chunk = format!("w{i} ");
        let offset = text.chars().count() as u64;
        text.push_str(&chunk);
        r.send(&[
            delta(1, "t1", "m1", offset, &chunk),
            heartbeat(1),
            tasks(1, i, 1 + (i % 3) as usize),
        ]);
        if i % 500 == 0 {
            r.send(&[live_snapshot(1, Some(&live_turn(i + 1, "early")))]);
            // The replay is still failing.
            r.until_fetch();
            r.http_error(false, 503, None, b"");
        }
    }
    assert!(
        r.c.held_frames() <= 8 + 8,
        "{} frames held behind a bound of 8",
        r.c.held_frames()
    );
    // The replay finally answers: the newest tasks snapshot is shown and the
    // overlay, whose deltas were dropped, is stale.
    r.until_fetch();
    let log = [user_msg(1, "u1", "hi")];
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        0,
        &log,
        1,
        false,
        Some(&live_turn(1, "w0 ")),
        None,
    ));
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.cursor(), 1);
    let v = r.c.view().as_session().unwrap();
    assert_eq!(v.tasks().version, 4_999);
    let (shown, stale) = overlay(&r).expect("an overlay");
    assert!(stale, "dropped deltas leave the overlay stale: {shown:?}");
}

/// A failing restore bounded at 2 frames sent tasks, the deltas `ab` `cd`,
/// `snapshot` if any, then tasks; the replay then answers with one event.
fn after_dropped_deltas(snapshot: Option<LiveTurn>) -> Rig {
    let mut r = failing_restore(2);
    let mut frames = vec![
        tasks(1, 1, 1),
        tasks(1, 2, 1),
        delta(1, "t1", "m1", 0, "ab"),
        delta(1, "t1", "m1", 2, "cd"),
    ];
    frames.extend(snapshot.map(|lt| live_snapshot(1, Some(&lt))));
    frames.push(tasks(1, 3, 2));
    r.send(&frames);
    assert!(r.c.held_frames() <= 2 + 4, "{}", r.c.held_frames());
    r.until_fetch();
    r.answer(&whole_page(&[user_msg(1, "u1", "hi")], 1));
    assert_eq!(r.c.status().state, State::Live);
    assert_eq!(r.c.view().as_session().unwrap().tasks().version, 3);
    r
}

#[test]
fn a_newer_snapshot_after_dropped_deltas_is_not_stale() {
    // Without the snapshot the overlay is stale: deltas were dropped.
    assert_eq!(
        overlay(&after_dropped_deltas(None)),
        Some((String::new(), true))
    );
    let r = after_dropped_deltas(Some(live_turn(9, "abcdef")));
    assert_eq!(overlay(&r), Some(("abcdef".into(), false)));
}

/// A failing restore bounded at one frame sent tasks and the deltas `ab`
/// `cd`; the replay then answers with a live turn of `text`.
fn replay_after_dropped_deltas(text: &str) -> Rig {
    let mut r = failing_restore(1);
    r.send(&[
        tasks(1, 1, 1),
        delta(1, "t1", "m1", 0, "ab"),
        delta(1, "t1", "m1", 2, "cd"),
    ]);
    r.until_fetch();
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        0,
        &[user_msg(1, "u1", "hi")],
        1,
        false,
        Some(&live_turn(3, text)),
        None,
    ));
    r
}

#[test]
fn a_dropped_delta_whose_text_is_already_known_leaves_the_overlay_fresh() {
    // A live turn without the dropped text leaves the overlay stale...
    let r = replay_after_dropped_deltas("ab");
    assert_eq!(overlay(&r), Some(("ab".into(), true)));
    // ...one that already holds what the dropped deltas carried, fresh.
    let r = replay_after_dropped_deltas("abcd");
    assert_eq!(overlay(&r), Some(("abcd".into(), false)));
}

#[test]
fn durable_overflow_still_becomes_one_repair_and_converges() {
    let log = simple_log(40);
    let mut r = failing_restore(4);
    for e in &log[1..] {
        r.send(&[e.clone(), heartbeat(e.seq.unwrap())]);
    }
    assert!(r.c.held_frames() <= 4 + 4, "{}", r.c.held_frames());
    r.until_fetch();
    r.answer(&whole_page(&log[..1], 1));
    assert_eq!(r.c.status().state, State::Repairing);
    // Verified from the cursor (1) on: the live events the failed restore
    // showed were spent on its live view and are read again (rule 2).
    r.answer(&event_page(EPOCH, &log[..], 40, false));
    assert_eq!(r.c.cursor(), 40);
    assert_eq!(r.c.transcript().unwrap().items, fold(EPOCH, &log).items);
}

// ---- 4. bounded overlay ----

#[test]
fn the_overlay_keeps_the_last_16384_scalars_like_the_server() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    let mut offset = 0u64;
    for i in 0..400u64 {
        // 100 scalars each, two bytes apiece for some.
        let chunk: String = format!("{i:03}é").repeat(25);
        r.send(&[delta(1, "t1", "m1", offset, &chunk)]);
        offset += chunk.chars().count() as u64;
    }
    let v = r.c.view().as_session().unwrap();
    let o = v.overlay().unwrap();
    assert_eq!(o.text_len, 16_384);
    assert_eq!(o.text.chars().count(), 16_384);
    assert_eq!(o.text_offset, offset - 16_384);
    assert!(o.text.ends_with("399é"));
    assert!(!o.stale);
    // It goes on aligning by offset after the cut.
    r.send(&[delta(1, "t1", "m1", offset - 2, "9éXY")]);
    let o = r.c.view().as_session().unwrap().overlay().unwrap().clone();
    assert!(o.text.ends_with("399éXY") && o.text_len == 16_384);
    // What is persisted is bounded by it.
    r.advance(1_000);
    let stored = r
        .log
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::Persist(b) => Some(b.len()),
            _ => None,
        })
        .unwrap();
    assert!(stored < 16_384 * 3, "{stored} bytes persisted");
}

#[test]
fn a_live_snapshot_longer_than_the_bound_is_cut_to_its_tail() {
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    let mut lt = live_turn(1, &"x".repeat(20_000));
    lt.text_offset = 5;
    r.send(&[live_snapshot(1, Some(&lt))]);
    let v = r.c.view().as_session().unwrap();
    let o = v.overlay().unwrap();
    assert_eq!((o.text_len, o.text_offset), (16_384, 5 + 20_000 - 16_384));
}

// ---- 5. a page that does not move ----

#[test]
fn a_has_more_page_that_does_not_move_the_cursor_backs_off() {
    let log = simple_log(3);
    let mut cfg = Config::session(SES);
    cfg.prefetch_depth = 0;
    let mut r = Rig::with(cfg.clone(), None);
    r.open_ok();
    r.send(&[hello(EPOCH, 3, BOOT)]);
    r.answer(&replay_page(EPOCH, BOOT, 0, &log[..2], 3, true, None, None));
    assert_eq!(r.c.cursor(), 2);
    let mut waits = Vec::new();
    for _ in 0..6 {
        // A broken cache answers the same page again.
        let asked = r.fetch_path();
        assert!(asked.contains("after_cursor=2"), "{asked}");
        r.answer(&replay_page(EPOCH, BOOT, 0, &log[..2], 3, true, None, None));
        assert!(r.fetch.is_none(), "re-requested at once");
        let st = r.c.status();
        assert_eq!(st.state, State::Backoff);
        assert_eq!(st.last_error.unwrap().code, "page_not_advancing");
        waits.push(st.next_retry_at.unwrap() - r.now);
        r.now = st.next_retry_at.unwrap();
        r.c.handle_timeout(r.now);
        r.pump();
    }
    assert!(
        waits.iter().max() > waits.first(),
        "the backoff grows: {waits:?}"
    );
    // A good page ends it.
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        2,
        &log[2..],
        3,
        false,
        None,
        None,
    ));
    assert_eq!((r.c.cursor(), r.c.status().state), (3, State::Live));
}

#[test]
fn an_empty_has_more_event_page_is_an_error_not_the_end_of_a_repair() {
    let log = simple_log(4);
    let mut cfg = Config::session(SES);
    cfg.prefetch_depth = 0;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&whole_page(&log[..2], 2));
    r.send(&[log[3].clone()]);
    assert_eq!(r.c.status().state, State::Repairing);
    // The verifying page (its first event is the cursor's), then one that
    // says there is more but brings nothing.
    r.answer(&event_page(EPOCH, &log[1..2], 4, true));
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/events?after_seq=2&limit=1000"
    );
    r.answer(&event_page(EPOCH, &[], 4, true));
    assert!(r.fetch.is_none(), "re-requested at once");
    assert_eq!(r.c.status().state, State::Backoff);
    assert!(r.notices.iter().any(
        |n| matches!(n, Notice::Retrying { error, .. } if error.code == "page_not_advancing")
    ));
    r.now = r.c.status().next_retry_at.unwrap();
    r.c.handle_timeout(r.now);
    r.pump();
    r.answer(&event_page(EPOCH, &log[2..], 4, false));
    assert_eq!((r.c.cursor(), r.c.status().state), (4, State::Live));
}

// ---- 6. exact HTTP classification ----

#[test]
fn a_400_or_409_without_its_exact_code_stops_without_wiping_state() {
    let bodies: [(u16, &[u8]); 5] = [
        (400, b""),
        (400, b"<html>Request blocked</html>"),
        (400, br#"{"error":"cursor_ahead","message":"x"}"#),
        (409, b""),
        (409, br#"{"error":"invalid_cursor","message":"x"}"#),
    ];
    for (status, body) in bodies {
        let mut r = live_seeded(3, 1_000);
        let id = r.stream_id();
        r.c.handle_stream_end(id, r.now);
        r.pump();
        r.until_reconnect();
        r.http_error(true, status, None, body);
        let st = r.c.status();
        let what = String::from_utf8_lossy(body);
        assert_eq!(st.state, State::Failed, "{status} {what}");
        assert_eq!(st.last_error.unwrap().status, Some(status));
        assert_eq!(r.c.cursor(), 2, "{status} {what}: state kept");
        assert_eq!(r.c.transcript().unwrap().items.len(), 2);
        assert!(
            !r.notices
                .iter()
                .any(|n| matches!(n, Notice::CursorRejected { .. })),
            "{status} {what}"
        );
        assert_eq!(r.c.status().next_retry_at, None);
    }
}

// ---- 7. status while the runtime cannot be reached ----

/// The value a live client with `log` persisted.
fn stored(log: &[Envelope]) -> Vec<u8> {
    let r = Rig::live_with(log);
    r.c.persisted_value()
}

/// Fails every request in flight with a network error.
fn refuse_all(r: &mut Rig) {
    if let Some(id) = r.stream {
        r.c.handle_network_error(id, "connection refused", r.now);
        r.stream = None;
    }
    for (id, _, _) in std::mem::take(&mut r.fetches) {
        r.c.handle_network_error(id, "connection refused", r.now);
    }
    r.fetch = None;
    r.pump();
}

/// Backoff with its retry time, or Connecting while a retry is on its way
/// (nothing has answered yet); never Restoring or Repairing.
fn unreachable_status(r: &Rig) {
    let st = r.c.status();
    match st.state {
        State::Backoff => assert!(st.next_retry_at.is_some_and(|t| t > r.now)),
        State::Connecting => {}
        other => panic!("{other:?} while the runtime cannot be reached"),
    }
    assert_eq!(st.last_error.unwrap().code, "network");
}

#[test]
fn after_a_reload_the_status_says_backoff_while_the_runtime_is_unreachable() {
    let value = stored(&simple_log(3));
    let mut cfg = Config::session(SES);
    cfg.prefetch_depth = 0;
    let mut r = Rig::with(cfg, Some(&value));
    assert_eq!(r.c.status().state, State::Restoring);
    assert_eq!(r.c.view().as_session().unwrap().items().len(), 3);
    refuse_all(&mut r);
    for _ in 0..20 {
        // Every request refused: waiting to retry.
        assert_eq!(r.c.status().state, State::Backoff);
        unreachable_status(&r);
        let t = r.c.poll_timeout().unwrap();
        r.now = r.now.max(t);
        r.c.handle_timeout(r.now);
        r.pump();
        unreachable_status(&r);
        refuse_all(&mut r);
    }
    // The runtime is back: restoring, then live.
    r.advance(60_000);
    r.open_ok();
    r.send(&[hello(EPOCH, 3, BOOT)]);
    if r.fetch.is_none() {
        r.advance(60_000);
    }
    assert_eq!(r.c.status().state, State::Restoring);
    r.answer(&replay_page(EPOCH, BOOT, 3, &[], 3, false, None, None));
    assert_eq!(r.c.status().state, State::Live);
}

#[test]
fn a_repair_that_cannot_reach_the_runtime_says_backoff() {
    let log = simple_log(4);
    let mut r = Rig::live_with(&log[..2]);
    r.send(&[log[3].clone()]);
    assert_eq!(r.c.status().state, State::Repairing);
    assert!(r.fetch.as_ref().is_some_and(|f| f.1 == FetchKind::Events));
    refuse_all(&mut r);
    let st = r.c.status();
    assert_eq!(st.state, State::Backoff);
    assert!(st.next_retry_at.is_some());
}
// ---- comments, epochs that disagree, deep events, held bytes, long pages ----

#[test]
fn comments_do_not_keep_a_silent_stream_alive() {
    let mut r = Rig::live_with(&simple_log(2));
    let first = r.stream_id();
    // Events and heartbeats do: a heartbeat every 15 s for ten minutes.
    for _ in 0..40 {
        r.now += 15_000;
        r.send(&[heartbeat(2)]);
        r.c.handle_timeout(r.now);
        r.pump();
    }
    assert_eq!(r.stream, Some(first), "a heartbeating stream was dropped");
    // Then only `: keepalive` every 5 s: stalled after 37.5 s all the same.
    let silent_from = r.now;
    while r.stream == Some(first) && r.now < silent_from + 3_600_000 {
        r.now += 5_000;
        r.send_raw(b": keepalive\n\n");
        r.c.handle_timeout(r.now);
        r.pump();
    }
    assert!(
        r.now - silent_from <= 40_000,
        "comments kept the stream for {} ms",
        r.now - silent_from
    );
    assert_eq!(r.c.status().last_error.unwrap().code, "stalled");
}
/// Runs timers until both a stream and a page request are out.
fn until_stream_and_fetch(r: &mut Rig) {
    r.run_timers_until(|r| r.stream.is_some() && r.fetch.is_some());
}

#[test]
fn restarts_on_epochs_that_disagree_back_off_whatever_their_order() {
    let log = simple_log(1);
    for page_first in [true, false] {
        let mut r = Rig::new();
        for _ in 0..20 {
            until_stream_and_fetch(&mut r);
            r.open_ok();
            // The page says epoch e1, the stream's hello e2 (two backends
            // behind one address): each restart from 0 finds the other.
            if page_first {
                r.answer(&whole_page(&log, 1));
                r.send(&[hello("e2", 1, BOOT)]);
            } else {
                r.send(&[hello("e2", 1, BOOT)]);
                r.answer(&whole_page(&log, 1));
            }
        }
        let restarts = r
            .notices
            .iter()
            .filter(|n| matches!(n, Notice::EpochChanged { .. }))
            .count();
        assert_eq!(restarts, 20);
        // 19 backed-off restarts: the ceiling grows to 30 s.
        assert!(
            r.now >= 60_000,
            "page first: {page_first}: 20 restarts by t = {} ms",
            r.now
        );
    }
}
/// A durable event of a type the session does not interpret, whose `data`
/// nests `depth` arrays deep.
fn nested(seq: u64, depth: usize) -> Envelope {
    let text = "[".repeat(depth) + &"]".repeat(depth);
    let data = RawJson::parse(&text).expect("valid JSON");
    durable(
        seq,
        Event::Unknown {
            type_name: "x.nested".into(),
            data,
        },
    )
}

#[test]
fn an_event_that_reads_on_the_stream_reads_in_a_page_too() {
    // The envelope's object and `data`'s 127 arrays: 128 levels, the most
    // an event may nest, counted from its envelope.
    let deep = nested(2, 127);
    let mut r = Rig::live_with(&simple_log(1));
    r.send(std::slice::from_ref(&deep));
    assert_eq!(r.c.cursor(), 2, "the stream reads it");
    // A restore reads the same event inside a page (two levels deeper).
    let log = [user_msg(1, "u1", "hi"), deep];
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&whole_page(&log, 2));
    let st = r.c.status();
    assert_eq!(
        (r.c.cursor(), st.state),
        (2, State::Live),
        "{:?}",
        st.last_error
    );
    // One level deeper is refused, on the stream and in a page alike.
    let mut r = Rig::new();
    r.open_ok();
    r.send(&[hello(EPOCH, 2, BOOT)]);
    r.answer(&whole_page(&[log[0].clone(), nested(2, 128)], 2));
    assert_eq!(r.c.status().last_error.unwrap().code, "bad_json");
    let mut r = Rig::live_with(&simple_log(1));
    r.send(&[nested(2, 128)]);
    assert_eq!(r.c.cursor(), 1);
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::FrameSkipped { error } if error.code == "bad_json")));
}
#[test]
fn held_frames_are_bounded_in_bytes_too() {
    let mut r = failing_restore(10_000);
    // 48 frames of 512 KiB: 24 MiB behind a failing restore.
    let big = "x".repeat(512 << 10);
    let log: Vec<Envelope> = (2..50).map(|s| user_msg(s, "m", &big)).collect();
    for e in &log {
        r.send(std::slice::from_ref(e));
    }
    let bound = Config::session(SES).buffer_bytes_limit;
    assert!(
        r.c.held_bytes() <= bound + 8 * (1 << 20),
        "{} bytes held behind a bound of {bound}",
        r.c.held_bytes()
    );
    assert!(
        r.c.held_frames() <= bound / (512 << 10) + 8,
        "{} frames held",
        r.c.held_frames()
    );
    // What was collapsed is repaired: the client converges.
    r.until_fetch();
    let mut all = vec![user_msg(1, "u1", "hi")];
    r.answer(&whole_page(&all, 1));
    assert_eq!(r.c.status().state, State::Repairing, "a gap was held");
    all.extend(log);
    // Verified from the last event applied on.
    let from = r.c.cursor() as usize - 1;
    r.answer(&event_page(EPOCH, &all[from..], 49, false));
    assert_eq!((r.c.cursor(), r.c.status().state), (49, State::Live));
}
#[test]
fn a_page_longer_than_its_limit_is_a_bad_page_retried_with_backoff() {
    let log = simple_log(5);
    let mut cfg = Config::session(SES);
    cfg.prefetch_depth = 0;
    cfg.first_page_limit = 2;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, 5, BOOT)]);
    assert!(r.fetch_path().ends_with("limit=2"), "{}", r.fetch_path());
    r.answer(&whole_page(&log, 5));
    let st = r.c.status();
    assert_eq!(st.state, State::Backoff);
    assert_eq!(st.last_error.unwrap().code, "page_over_limit");
    assert_eq!(r.c.cursor(), 0, "nothing of it is applied");
    assert!(r.fetch.is_none(), "re-requested at once");
    r.now = st.next_retry_at.unwrap();
    r.c.handle_timeout(r.now);
    r.pump();
    r.answer(&replay_page(EPOCH, BOOT, 0, &log[..2], 5, true, None, None));
    assert_eq!(r.c.cursor(), 2);
}
