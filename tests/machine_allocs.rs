//! A streamed answer's deltas allocate nothing once the stream runs: each
//! envelope is read over the last one (`FromJson::read_into`), its strings'
//! buffers reused. Counted with a global allocator of the test's own, so
//! this binary holds this one test (the count is process-wide).
#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

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

const DELTAS: usize = 20_000;

#[test]
fn a_streamed_delta_allocates_nothing() {
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
