//! Unit tests of the parser's internals: linear work, bounded memory and
//! the chunk-boundary state. The WHATWG behaviour itself is covered as data
//! by `tests/sse_conformance.rs`.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use super::*;

fn collect(p: &mut SseParser, chunks: &[&[u8]]) -> Vec<SseItem> {
    let mut items = Vec::new();
    for c in chunks {
        p.push(c, &mut |i| items.push(i));
    }
    items
}

fn event(data: &str, id: &str, seen: bool) -> SseItem {
    SseItem::Event(SseEvent {
        event_type: "message".into(),
        data: data.into(),
        last_event_id: id.into(),
        id_field_seen: seen,
    })
}

#[test]
fn one_mebibyte_event_in_one_byte_chunks_scans_each_byte_once() {
    let body = "x".repeat(1 << 20);
    let stream = format!("id: 7\ndata: {body}\n\n");
    let mut p = SseParser::with_max_event_size(2 << 20);
    let mut items = Vec::new();
    for b in stream.as_bytes() {
        p.push(std::slice::from_ref(b), &mut |i| items.push(i));
    }
    assert_eq!(p.scanned, stream.len(), "every byte scanned exactly once");
    assert_eq!(items.len(), 1);
    match &items[0] {
        SseItem::Event(e) => {
            assert_eq!(e.data.len(), 1 << 20);
            assert_eq!(e.last_event_id, "7");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn oversized_event_is_not_buffered() {
    let mut p = SseParser::with_max_event_size(1000);
    let mut items = Vec::new();
    p.push(b"id: 1\ndata: ", &mut |i| items.push(i));
    for _ in 0..10_000 {
        p.push(b"yyyyyyyyyy", &mut |i| items.push(i));
        assert!(p.line.capacity() <= 2000, "line buffer grew past the limit");
        assert!(p.data.capacity() <= 2000, "data buffer grew past the limit");
    }
    p.push(b"\nid: 2\ndata: after\n\n", &mut |i| items.push(i));
    assert_eq!(items.len(), 1, "one error, no event yet: {items:?}");
    assert!(matches!(
        items[0],
        SseItem::Error(SseError::EventTooLarge { limit: 1000, size }) if size > 1000
    ));
    p.push(b"data: next\n\n", &mut |i| items.push(i));
    assert_eq!(items[1], event("next", "", false));
    assert_eq!(p.last_event_id(), "");
}

#[test]
fn event_of_exactly_the_limit_is_dispatched() {
    // "data: abc" + LF: data buffer "abc\n" (4) plus the line (9 + 1) = 10.
    let mut p = SseParser::with_max_event_size(10);
    let items = collect(&mut p, &[b"data: abc\n\n"]);
    assert_eq!(items, vec![event("abc", "", false)]);
    let mut p = SseParser::with_max_event_size(9);
    let items = collect(&mut p, &[b"data: abc\n\ndata:z\n\n"]);
    assert_eq!(items.len(), 2);
    assert!(matches!(items[0], SseItem::Error(_)));
    assert_eq!(items[1], event("z", "", false));
}

#[test]
fn crossing_the_limit_is_detected_alike_for_every_chunking() {
    let stream = b"data: 0123456789\ndata: 0123456789\n\ndata: ok\n\n";
    for limit in 10..40 {
        let mut whole = SseParser::with_max_event_size(limit);
        let expected: Vec<bool> = collect(&mut whole, &[stream])
            .iter()
            .map(|i| matches!(i, SseItem::Error(_)))
            .collect();
        let mut bytewise = SseParser::with_max_event_size(limit);
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        let got: Vec<bool> = collect(&mut bytewise, &chunks)
            .iter()
            .map(|i| matches!(i, SseItem::Error(_)))
            .collect();
        assert_eq!(got, expected, "limit {limit}");
    }
}

#[test]
fn pending_cr_survives_empty_chunks() {
    let mut p = SseParser::new();
    let items = collect(&mut p, &[b"data: a\r", b"", b"", b"\n", b"data: b\n\n"]);
    assert_eq!(items, vec![event("a\nb", "", false)]);
}

#[test]
fn partial_bom_then_other_bytes_is_content() {
    // EF BB followed by 'd': not a BOM, so the bytes are a (garbled) line.
    let mut p = SseParser::new();
    let items = collect(&mut p, &[&[0xEF], &[0xBB], b"data: x\n\ndata: y\n\n"]);
    assert_eq!(items, vec![event("y", "", false)]);
}

#[test]
fn finish_keeps_the_committed_id_and_reset_clears_it() {
    let mut p = SseParser::new();
    let items = collect(&mut p, &[b"id: 5\ndata: a\n\nid: 6\ndata: partial"]);
    assert_eq!(items, vec![event("a", "5", true)]);
    p.finish();
    assert_eq!(p.last_event_id(), "5");
    // After finish the stream restarts at offset 0: a BOM is stripped again.
    let items = collect(&mut p, &[&BOM, b"data: b\n\n"]);
    assert_eq!(items, vec![event("b", "5", false)]);
    p.reset();
    assert_eq!(p.last_event_id(), "");
    let items = collect(&mut p, &[&BOM, b"data: c\n\n"]);
    assert_eq!(items, vec![event("c", "", false)]);
}

#[test]
fn seeded_last_event_id_is_reported_until_replaced() {
    let mut p = SseParser::new();
    p.set_last_event_id("hoge");
    let items = collect(&mut p, &[b"data: a\n\nid: 1\ndata: b\n\n"]);
    assert_eq!(
        items,
        vec![event("a", "hoge", false), event("b", "1", true)]
    );
}

#[test]
fn huge_retry_saturates() {
    let mut p = SseParser::new();
    let items = collect(&mut p, &[b"retry: 99999999999999999999999\n"]);
    assert_eq!(items, vec![SseItem::Retry(u64::MAX)]);
}

#[test]
fn error_message_names_the_limit() {
    let e = SseError::EventTooLarge { limit: 8, size: 12 };
    assert!(e.to_string().contains('8'), "{e}");
}
