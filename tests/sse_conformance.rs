//! Conformance of `core::sse` against the cases in `tests/fixtures/sse/`,
//! ported as data from WPT, Chromium, LaunchDarkly, eventsource-parser, plus
//! the project's own. Every case runs as declared, whole, in 1-byte and
//! 2-byte chunks, and in three seeded random chunkings; the result must not
//! depend on where the chunk boundaries fall.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use replay_client::core::machine::SplitMix64;
use replay_client::core::sse::{SseError, SseItem, SseParser};
use serde::Deserialize;

const FIXTURES: &[(&str, &str)] = &[
    ("wpt.json", include_str!("fixtures/sse/wpt.json")),
    ("chromium.json", include_str!("fixtures/sse/chromium.json")),
    (
        "launchdarkly.json",
        include_str!("fixtures/sse/launchdarkly.json"),
    ),
    (
        "eventsource-parser.json",
        include_str!("fixtures/sse/eventsource-parser.json"),
    ),
    ("project.json", include_str!("fixtures/sse/project.json")),
];

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    source: String,
    #[serde(default)]
    #[allow(dead_code)] // documentation for humans
    note: Option<String>,
    input: Option<String>,
    input_hex: Option<String>,
    chunks: Option<Vec<String>>,
    chunks_hex: Option<Vec<String>>,
    max_event_size: Option<usize>,
    initial_last_event_id: Option<String>,
    expected: Vec<Expected>,
    last_event_id: String,
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(untagged, deny_unknown_fields)]
enum Expected {
    Event {
        #[serde(rename = "type")]
        event_type: String,
        data: String,
        last_event_id: String,
        /// Checked only when the case states it.
        id_field_seen: Option<bool>,
    },
    Retry {
        retry: u64,
    },
    Error {
        error: String,
    },
}

/// Turns parser output into the fixture vocabulary; `id_field_seen` is kept
/// only where the expectation asks for it.
fn observed(item: &SseItem, want: Option<&Expected>) -> Expected {
    match item {
        SseItem::Event(e) => Expected::Event {
            event_type: e.event_type.clone(),
            data: e.data.clone(),
            last_event_id: e.last_event_id.clone(),
            id_field_seen: match want {
                Some(Expected::Event {
                    id_field_seen: Some(_),
                    ..
                }) => Some(e.id_field_seen),
                _ => None,
            },
        },
        SseItem::Retry(ms) => Expected::Retry { retry: *ms },
        SseItem::Error(SseError::EventTooLarge { limit, size }) => {
            assert!(size > limit, "error size {size} not above limit {limit}");
            Expected::Error {
                error: "event_too_large".into(),
            }
        }
    }
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// The declared chunks (or the whole input as one chunk).
fn declared_chunks(case: &Case) -> Vec<Vec<u8>> {
    match (&case.input, &case.input_hex, &case.chunks, &case.chunks_hex) {
        (Some(s), None, None, None) => vec![s.as_bytes().to_vec()],
        (None, Some(h), None, None) => vec![hex(h)],
        (None, None, Some(c), None) => c.iter().map(|s| s.as_bytes().to_vec()).collect(),
        (None, None, None, Some(c)) => c.iter().map(|h| hex(h)).collect(),
        _ => panic!(
            "case {:?}: exactly one of input, input_hex, chunks, chunks_hex",
            case.name
        ),
    }
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn fixed_chunks(bytes: &[u8], n: usize) -> Vec<Vec<u8>> {
    bytes.chunks(n).map(<[u8]>::to_vec).collect()
}

/// Random boundaries; sizes mix tiny and larger pieces.
fn random_chunks(bytes: &[u8], seed: u64) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::new(seed);
    let max = (bytes.len() / 3).max(2) as u64;
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = if rng.next_u64() % 2 == 0 {
            1 + rng.next_u64() % 4
        } else {
            1 + rng.next_u64() % max
        };
        let (head, tail) = rest.split_at((n as usize).min(rest.len()));
        out.push(head.to_vec());
        rest = tail;
    }
    out
}

/// Runs one chunking; returns a failure description, if any.
/// `parser` is reused across chunkings: `reset` must leave nothing behind.
fn run(parser: &mut SseParser, case: &Case, chunking: &str, chunks: &[Vec<u8>]) -> Option<String> {
    parser.reset();
    if let Some(id) = &case.initial_last_event_id {
        parser.set_last_event_id(id.clone());
    }
    let mut items = Vec::new();
    for chunk in chunks {
        parser.push(chunk, &mut |item| items.push(item));
    }
    parser.finish();
    let got: Vec<Expected> = items
        .iter()
        .enumerate()
        .map(|(i, item)| observed(item, case.expected.get(i)))
        .collect();
    let mut problems = Vec::new();
    if got != case.expected {
        problems.push(format!(
            "items differ\n    expected: {:?}\n    got:      {:?}",
            case.expected, got
        ));
    }
    if parser.last_event_id() != case.last_event_id {
        problems.push(format!(
            "final last_event_id: expected {:?}, got {:?}",
            case.last_event_id,
            parser.last_event_id()
        ));
    }
    if problems.is_empty() {
        return None;
    }
    Some(format!(
        "case {:?} [{}] chunking {chunking}: {}",
        case.name,
        case.source,
        problems.join("; ")
    ))
}

/// Runs every case of one fixture file under every chunking.
fn run_file(file: &str) -> usize {
    let text = FIXTURES
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, text)| *text)
        .expect("fixture registered");
    let cases: Vec<Case> =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{file}: bad fixture JSON: {e}"));
    let mut failures = Vec::new();
    for case in &cases {
        assert!(
            !case.source.is_empty(),
            "{file}: case {:?} has no source",
            case.name
        );
        let declared = declared_chunks(case);
        let whole: Vec<u8> = declared.concat();
        let seed = fnv1a(&case.name);
        let mut chunkings = vec![
            ("declared".to_owned(), declared.clone()),
            ("whole".to_owned(), vec![whole.clone()]),
            ("1-byte".to_owned(), fixed_chunks(&whole, 1)),
            ("2-byte".to_owned(), fixed_chunks(&whole, 2)),
        ];
        for k in 0..3u64 {
            let s = seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            chunkings.push((format!("random(seed={s:#x})"), random_chunks(&whole, s)));
        }
        let mut parser = match case.max_event_size {
            Some(limit) => SseParser::with_max_event_size(limit),
            None => SseParser::new(),
        };
        for (label, chunks) in &chunkings {
            if let Some(f) = run(&mut parser, case, label, chunks) {
                failures.push(f);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{file}: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn wpt_cases() {
    run_file("wpt.json");
}

#[test]
fn chromium_cases() {
    run_file("chromium.json");
}

#[test]
fn launchdarkly_cases() {
    run_file("launchdarkly.json");
}

#[test]
fn eventsource_parser_cases() {
    run_file("eventsource-parser.json");
}

#[test]
fn project_cases() {
    run_file("project.json");
}

#[test]
fn suite_has_at_least_80_cases_with_distinct_names() {
    let mut names = std::collections::HashSet::new();
    let mut total = 0;
    for (file, text) in FIXTURES {
        let cases: Vec<Case> = serde_json::from_str(text).expect("fixture JSON");
        for case in cases {
            assert!(
                names.insert((file.to_string(), case.name.clone())),
                "{file}: duplicate case name {:?}",
                case.name
            );
            total += 1;
        }
    }
    assert!(total >= 80, "only {total} conformance cases");
}

#[test]
fn random_chunkings_cover_the_input_and_differ_by_seed() {
    let bytes: Vec<u8> = (0..200u8).collect();
    let a = random_chunks(&bytes, 1);
    let b = random_chunks(&bytes, 2);
    assert_eq!(a.concat(), bytes);
    assert_eq!(b.concat(), bytes);
    assert_ne!(a, b);
}
