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

/// A literal reading of WHATWG §9.2.6 over the whole body at once (decode,
/// strip one BOM, split lines, interpret): the oracle for differential tests.
#[cfg(not(target_arch = "wasm32"))]
fn reference(bytes: &[u8], seed_id: &str) -> (Vec<SseItem>, String) {
    let text = String::from_utf8_lossy(bytes.strip_prefix(&BOM[..]).unwrap_or(bytes));
    let (mut data, mut event_type, mut last_id) =
        (String::new(), String::new(), seed_id.to_owned());
    // The standard's "last event ID buffer", copied to the source at dispatch.
    let mut id_buffer: Option<String> = None;
    let mut items = Vec::new();
    let mut rest = text.as_ref();
    // Only lines that end inside the body count; the tail is a partial line.
    while let Some(end) = rest.find(['\r', '\n']) {
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
        if line.is_empty() {
            let id_seen = id_buffer.is_some();
            if let Some(id) = id_buffer.take() {
                last_id = id;
            }
            if data.is_empty() {
                event_type.clear();
            } else {
                data.pop();
                let t = if event_type.is_empty() {
                    "message".to_owned()
                } else {
                    event_type.clone()
                };
                items.push(SseItem::Event(SseEvent {
                    event_type: t,
                    data: std::mem::take(&mut data),
                    last_event_id: last_id.clone(),
                    id_field_seen: id_seen,
                }));
                event_type.clear();
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "event" => event_type = value.to_owned(),
            "id" if !value.contains('\0') => id_buffer = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                items.push(SseItem::Retry(value.parse().unwrap_or(u64::MAX)));
            }
            _ => {}
        }
    }
    (items, last_id)
}

#[cfg(not(target_arch = "wasm32"))]
mod differential {
    use super::*;
    use proptest::prelude::*;

    /// Bytes and fragments that exercise every rule: line ends, colons,
    /// spaces, field names, NUL, BOM pieces, split and invalid UTF-8.
    fn token() -> impl Strategy<Value = Vec<u8>> {
        prop::sample::select(vec![
            &b"\n"[..],
            b"\r",
            b"\r\n",
            b":",
            b" ",
            b"data",
            b"data:",
            b"data: ",
            b"event:",
            b"id:",
            b"id",
            b"retry:",
            b"retry: 12",
            b"7",
            b"x",
            b"\0",
            b"\xEF",
            b"\xBB",
            b"\xBF",
            b"\xEF\xBB\xBF",
            b"\xE2\x82\xAC",
            b"\xE2\x82",
            b"\xFF",
            b"\xC3",
        ])
        .prop_map(<[u8]>::to_vec)
    }

    fn stream() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(token(), 0..60).prop_map(|t| t.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_chunking_matches_the_reference(
            bytes in stream(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let (want, want_id) = reference(&bytes, "seed");
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut p = SseParser::new();
            p.set_last_event_id("seed");
            let mut got = Vec::new();
            let mut from = 0;
            for to in points.into_iter().chain([bytes.len()]) {
                p.push(&bytes[from..to], &mut |i| got.push(i));
                from = to;
            }
            p.finish();
            prop_assert_eq!(got, want);
            prop_assert_eq!(p.last_event_id(), want_id.as_str());
        }
    }
}
