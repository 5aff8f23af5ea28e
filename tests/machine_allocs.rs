//! A streamed answer's deltas allocate nothing once the stream runs: each
//! envelope is read over the last one (`FromJson::read_into`), its strings'
//! buffers reused; a backlog page is read over the page before. Counted
//! with a global allocator of the test's own; the count is process-wide, so
//! the tests of this binary count one at a time.
#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Held by a test while it counts.
fn counting_alone() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

const DELTAS: usize = 20_000;

#[test]
fn a_streamed_delta_allocates_nothing() {
    let _alone = counting_alone();
    let mut r = Rig::live_with(&[turn_started(1, "t1")]);
    let words = ["the ", "agent ", "reads ", "file "];
    let mut offset = 0;
    let deltas: Vec<_> = (0..DELTAS)
        .map(|i| {
            let d = delta(1, "t1", "m1", offset, words[i % 4]);
            offset += words[i % 4].len() as u64;
            d
        })
        .collect();
    let body = frames(&deltas);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for chunk in body.as_bytes().chunks(64 * 1024) {
        r.send_raw(chunk);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    // The overlay keeps the text's tail; `text_offset` counts what it cut.
    let overlay = r.c.view().as_session().and_then(|s| s.overlay());
    let live = overlay.map(|o| o.text_offset + o.text.chars().count() as u64);
    assert_eq!(live, Some(offset), "every delta was applied");
    // The live text grows by doubling, the parser's buffer with the
    // chunks: a few dozen in all, not one per delta.
    assert!(
        allocations < (DELTAS / 100) as u64,
        "{allocations} allocations for {DELTAS} deltas"
    );
}

/// A backlog of whole turns: started, a user message, an answer, completed.
fn turns(events: usize) -> Vec<replay_client::core::protocol::Envelope> {
    let text = "replay cursor gap heartbeat snapshot résumé stream delta epoch café";
    let mut log = Vec::with_capacity(events + 3);
    for t in 1.. {
        if log.len() >= events {
            break;
        }
        let turn = format!("turn_{t}");
        let seq = log.len() as u64;
        log.push(turn_started(seq + 1, &turn));
        log.push(user_msg(seq + 2, &format!("u{t}"), text));
        log.push(assistant_msg(seq + 3, &turn, &format!("a{t}"), text));
        log.push(turn_completed(seq + 4, &turn));
    }
    log.truncate(events);
    log
}

#[test]
fn a_restored_event_allocates_only_what_the_view_keeps() {
    const EVENTS: usize = 20_000;
    const LIMIT: usize = 2_000;
    // Taken before building the pages: their allocations would count in
    // the other test's window.
    let _alone = counting_alone();
    let log = turns(EVENTS);
    let mut cfg = replay_client::core::machine::Config::session(SES);
    cfg.replay_page_limit = LIMIT as u32;
    cfg.first_page_limit = LIMIT as u32;
    cfg.prefetch_depth = 0;
    let mut r = Rig::with(cfg, None);
    r.open_ok();
    r.send(&[hello(EPOCH, EVENTS as u64, BOOT)]);
    let pages: Vec<Vec<u8>> = (0..EVENTS)
        .step_by(LIMIT)
        .map(|from| {
            let to = (from + LIMIT).min(EVENTS);
            let more = to < EVENTS;
            replay_page(
                EPOCH,
                BOOT,
                from as u64,
                &log[from..to],
                EVENTS as u64,
                more,
                None,
                None,
            )
        })
        .collect();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for page in &pages {
        r.answer(page);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(r.c.cursor(), EVENTS as u64, "the whole backlog was applied");
    // The view keeps about three allocations per event of these turns (a
    // message's id, turn id, text and its id in the committed set; a
    // turn's id as it starts and ends). Reading adds about half of one
    // more (the view's own growth); an envelope's scope id and timestamp
    // and the page's envelopes reuse the last page's: 4.5 per event when
    // each page was read anew.
    assert!(
        allocations < 4 * EVENTS as u64,
        "{allocations} allocations for {EVENTS} restored events"
    );
}
