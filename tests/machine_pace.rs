//! Pacing in the machine (`Machine::poll_pace`): when subscribers are told,
//! when the live stream's chunks wait for an animation frame, and how long
//! a frame is awaited. The executor only carries these out.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{Config, Frames, Notify, Pace, FRAME_WAIT_MS};

/// The pacing steps, taken as the executor does: after the view change.
fn paced(r: &mut Rig) -> Vec<Pace> {
    r.changes();
    let now = r.now;
    std::iter::from_fn(|| r.c.poll_pace(now)).collect()
}

/// The next step only: the executor carries out `ReleaseChunks` (the held
/// chunks become the body's next inputs) before it polls again.
fn next(r: &mut Rig) -> Option<Pace> {
    r.changes();
    r.c.poll_pace(r.now)
}

/// A live client in `mode`, its first outputs drained, in a context where
/// frames are `frames`.
fn live(mode: Notify, frames: Frames) -> Rig {
    let mut r = Rig::with(
        Config {
            notify: mode,
            ..Config::session(SES)
        },
        None,
    );
    r.open_ok();
    r.send(&[hello(EPOCH, 1, BOOT)]);
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        0,
        &simple_log(1),
        1,
        false,
        None,
        None,
    ));
    r.c.handle_frames(frames, r.now);
    r.advance(1_000);
    paced(&mut r);
    r.advance(1_000);
    paced(&mut r);
    r
}

fn a_message(r: &mut Rig, seq: u64) {
    r.send(&[user_msg(seq, &format!("u{seq}"), "hi")]);
}

#[test]
fn chunks_wait_for_a_frame_and_subscribers_are_told_in_it() {
    let mut r = Rig::new();
    r.c.handle_frames(Frames::Running, 0);
    assert_eq!(
        paced(&mut r),
        [Pace::HoldChunks(1 << 20)],
        "frames run: hold"
    );
    let mut r = live(Notify::Frame, Frames::Running);
    r.c.handle_chunks_held(r.now);
    assert_eq!(paced(&mut r), [Pace::RequestFrame]);
    r.c.handle_chunks_held(r.now + 3);
    assert_eq!(paced(&mut r), [], "one frame asked for");
    r.now += 16;
    r.c.handle_frame(r.now);
    assert_eq!(next(&mut r), Some(Pace::ReleaseChunks));
    // The released chunks are the body's next input, inside the frame.
    a_message(&mut r, 2);
    assert_eq!(paced(&mut r), [Pace::Notify], "told in the same frame");
    a_message(&mut r, 3);
    assert_eq!(
        paced(&mut r),
        [Pace::RequestFrame],
        "a change after the frame waits for the next"
    );
}

#[test]
fn a_frame_that_does_not_come_is_awaited_at_most_frame_wait_ms() {
    let mut r = live(Notify::Frame, Frames::Running);
    let asked = r.now;
    r.c.handle_chunks_held(asked);
    assert_eq!(paced(&mut r), [Pace::RequestFrame]);
    assert_eq!(r.c.poll_timeout(), Some(asked + FRAME_WAIT_MS));
    r.now = asked + FRAME_WAIT_MS - 1;
    r.c.handle_timeout(r.now);
    assert_eq!(paced(&mut r), [], "not yet overdue");
    r.now = asked + FRAME_WAIT_MS;
    r.c.handle_timeout(r.now);
    assert_eq!(
        next(&mut r),
        Some(Pace::ReleaseChunks),
        "overdue: as if it came"
    );
    a_message(&mut r, 2);
    assert_eq!(paced(&mut r), [Pace::Notify]);
}

#[test]
fn a_hidden_page_gets_chunks_as_they_come_and_is_told_when_it_shows() {
    let mut r = live(Notify::Frame, Frames::Running);
    r.c.handle_chunks_held(r.now);
    assert_eq!(paced(&mut r), [Pace::RequestFrame]);
    r.c.handle_frames(Frames::Paused, r.now);
    assert_eq!(
        paced(&mut r),
        [Pace::HoldChunks(0), Pace::ReleaseChunks],
        "what waits is delivered, nothing more is held"
    );
    a_message(&mut r, 2);
    assert_eq!(
        paced(&mut r),
        [Pace::RequestFrame],
        "asked again: the one asked while frames ran may have been scheduled before the page hid"
    );
    r.now += 60_000;
    r.c.handle_timeout(r.now);
    assert_eq!(paced(&mut r), [], "no deadline while hidden");
    r.c.handle_frame(r.now);
    assert_eq!(paced(&mut r), [Pace::Notify], "told when it shows");
}

#[test]
fn without_frames_a_timer_tells_what_arrived_together() {
    let mut r = live(Notify::Frame, Frames::Absent);
    a_message(&mut r, 2);
    a_message(&mut r, 3);
    assert_eq!(paced(&mut r), [], "not inside the input");
    assert_eq!(r.c.poll_timeout(), Some(r.now), "a timer at once");
    r.c.handle_timeout(r.now);
    assert_eq!(paced(&mut r), [Pace::Notify], "once for both");
}

/// A frame's worth of a stream can be anything (a gzip bomb: tens of MiB
/// decompressed in a frame): the reader holds at most `max_held_bytes`
/// before it delivers what waits, so no more is copied into the wasm
/// memory at once.
#[test]
fn held_chunks_are_bounded_by_max_held_bytes() {
    let mut r = Rig::with(
        Config {
            max_held_bytes: 4096,
            ..Config::session(SES)
        },
        None,
    );
    r.c.handle_frames(Frames::Running, 0);
    assert_eq!(paced(&mut r), [Pace::HoldChunks(4096)]);
}

#[test]
fn every_spaces_calls_and_sync_tells_at_once() {
    let mut r = live(Notify::Every(100), Frames::Running);
    assert!(!paced(&mut r)
        .iter()
        .any(|p| matches!(p, Pace::HoldChunks(n) if *n > 0)));
    let told = r.now;
    a_message(&mut r, 2);
    assert_eq!(paced(&mut r), []);
    let at = r.c.poll_timeout().unwrap();
    r.now = at;
    r.c.handle_timeout(at);
    assert_eq!(paced(&mut r), [Pace::Notify]);
    assert!(at >= told, "{at} {told}");
    a_message(&mut r, 3);
    assert_eq!(paced(&mut r), []);
    assert_eq!(r.c.poll_timeout(), Some(at + 100), "100 ms after the last");
    let mut s = live(Notify::Sync, Frames::Running);
    a_message(&mut s, 2);
    assert_eq!(paced(&mut s), [Pace::Notify]);
    a_message(&mut s, 3);
    assert_eq!(paced(&mut s), [Pace::Notify]);
}

#[test]
fn a_closed_machine_paces_nothing() {
    let mut r = live(Notify::Frame, Frames::Running);
    r.c.handle_chunks_held(r.now);
    r.c.close(r.now);
    assert_eq!(paced(&mut r), []);
    r.c.handle_frame(r.now);
    assert_eq!(paced(&mut r), []);
}
