//! A streamed answer's deltas allocate nothing once the stream runs: each
//! envelope is read over the last one (`FromJson::read_into`), its strings'
//! buffers reused. Counted with a global allocator of the test's own, so
//! this binary holds this one test (the count is process-wide).
#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use replay_client::core::machine::{Action, Client, Config, FetchKind};

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

/// A live client (empty replay, stream open) and its stream's id.
fn live_client() -> (Client, replay_client::core::machine::RequestId) {
    let mut c = Client::new(Config::session("ses_1"), None, 0);
    let (mut stream, mut replay) = (None, None);
    while let Some(a) = c.poll_action() {
        match a {
            Action::OpenStream { id, .. } => stream = Some(id),
            Action::Fetch {
                id,
                kind: FetchKind::Replay,
                ..
            } => replay = Some(id),
            _ => {}
        }
    }
    let page = r#"{"epoch":"e1","boot_id":"b1","cursor":0,"head":0,"has_more":false,"history":[],"live_turn":null,"tasks":null}"#;
    c.handle_replay_page(replay.expect("replay"), page.as_bytes(), 0);
    let stream = stream.expect("stream");
    c.handle_stream_opened(stream, 200, Some("text/event-stream"), None, 0);
    while c.poll_action().is_some() {}
    (c, stream)
}

#[test]
fn a_streamed_delta_allocates_nothing() {
    let (mut c, stream) = live_client();
    let mut body = String::from(
        "id: 1\nevent: turn.started\ndata: {\"id\":1,\"scope\":\"session\",\"scope_id\":\"ses_1\",\"seq\":1,\"ts\":\"2026-12-02T00:00:00.000Z\",\"type\":\"turn.started\",\"data\":{\"turn_id\":\"turn_1\",\"input_message_id\":\"u1\"}}\n\n",
    );
    let mut offset = 0;
    for i in 0..DELTAS {
        let text = ["the ", "agent ", "reads ", "file "][i % 4];
        body.push_str(&format!(
            "event: turn.delta\ndata: {{\"scope\":\"session\",\"scope_id\":\"ses_1\",\"after_seq\":1,\"type\":\"turn.delta\",\"critical\":true,\"ts\":\"2026-12-02T00:00:01.{:03}Z\",\"data\":{{\"turn_id\":\"turn_1\",\"message_id\":\"a1\",\"offset\":{offset},\"text\":\"{text}\"}}}}\n\n",
            i % 1000
        ));
        offset += text.chars().count();
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for (i, chunk) in body.as_bytes().chunks(64 * 1024).enumerate() {
        c.handle_stream_bytes(stream, chunk, i as u64);
        while c.poll_action().is_some() {}
        while c.poll_notice().is_some() {}
        let _ = c.poll_view_change();
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(
        c.counters().events,
        DELTAS as u64 + 1,
        "every delta was read"
    );
    // The overlay keeps the text's tail; `text_offset` counts what it cut.
    let overlay = c.view().as_session().and_then(|s| s.overlay());
    let live = overlay.map(|o| o.text_offset as usize + o.text.chars().count());
    assert_eq!(live, Some(offset), "every delta was applied");
    // The live text grows by doubling, the parser's buffer with the
    // chunks: a few dozen in all, not one per delta.
    assert!(
        allocations < (DELTAS / 100) as u64,
        "{allocations} allocations for {DELTAS} deltas"
    );
}
