//! The writer against serde_json on the same values: byte-identical text.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::to_string;
use crate::json::{self, RawJson};
use crate::protocol::{Envelope, LiveTurn, TasksSnapshot, TranscriptItem};

fn same<T: Serialize + ?Sized>(v: &T) {
    let theirs = serde_json::to_string(v).expect("serde_json writes it");
    assert_eq!(to_string(v).expect("we write it"), theirs);
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Tagged {
    Unit,
    Fields { a: u64, b: Option<String> },
}

#[derive(Serialize)]
enum External {
    Unit,
    New(i64),
    Tuple(u8, bool),
    Fields { x: Vec<u32> },
}

#[derive(Serialize)]
struct Everything {
    s: String,
    n: i64,
    u: u64,
    f: f64,
    c: char,
    none: Option<u8>,
    unit: (),
    tagged: Vec<Tagged>,
    external: Vec<External>,
    int_keys: BTreeMap<u64, String>,
    raw: RawJson,
    raws: Vec<RawJson>,
}

#[test]
fn writes_what_serde_json_writes() {
    let strings = [
        "",
        "plain",
        "quote \" and \\ backslash / slash",
        "\u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f}\u{7f}",
        "é 😀 \u{2028}\u{2029}",
    ];
    for s in strings {
        same(s);
    }
    for n in [0i64, 1, -1, 42, i64::MIN, i64::MAX] {
        same(&n);
    }
    for u in [0u64, 9, 10, 99, 100, u64::MAX] {
        same(&u);
    }
    let mut int_keys = BTreeMap::new();
    int_keys.insert(3, "three".to_owned());
    int_keys.insert(u64::MAX, "max".to_owned());
    same(&Everything {
        s: "x\"y".into(),
        n: -7,
        u: 7,
        f: 3.0,
        c: '\n',
        none: None,
        unit: (),
        tagged: vec![
            Tagged::Unit,
            Tagged::Fields {
                a: 1,
                b: Some("b".into()),
            },
        ],
        external: vec![
            External::Unit,
            External::New(-2),
            External::Tuple(1, true),
            External::Fields { x: vec![1, 2] },
        ],
        int_keys,
        raw: RawJson::parse(r#" { "a" : [1, 2.5e3, "x y"], "b": null } "#).unwrap(),
        raws: vec![RawJson::null(), RawJson::parse("\"s\"").unwrap()],
    });
    let mut map = HashMap::new();
    map.insert("k".to_owned(), vec![1u8]);
    same(&map);
}

#[test]
fn raw_json_is_compacted_and_spliced_verbatim() {
    let r = RawJson::parse(" {\"a b\" : [ 1 , \"\\\" x\" ] } ").unwrap();
    assert_eq!(r.as_str(), r#"{"a b":[1,"\" x"]}"#);
    assert_eq!(to_string(&vec![r.clone()]).unwrap(), format!("[{r}]"));
    assert!(RawJson::parse("{").is_err());
}

#[test]
fn floats_that_are_not_whole_are_refused() {
    assert!(to_string(&1.5f64).is_err());
    assert!(to_string(&f64::NAN).is_err());
    assert_eq!(to_string(&2.0f64).unwrap(), "2.0");
}

#[test]
fn protocol_fixtures_round_trip_through_both_writers() {
    let env: Envelope = json::from_str(
        r#"{"id":9,"scope":"session","scope_id":"s","seq":3,"type":"tool.started","critical":true,"ts":"t","data":{"turn_id":"t1","call_id":"c1","name":"sh","input":{"cmd":"ls -la","n":[1,2]}}}"#,
    )
    .unwrap();
    same(&env);
    let unknown: Envelope = json::from_str(
        r#"{"scope":"session","scope_id":"s","after_seq":3,"type":"future.thing","ts":"t","data":{"z":1,"a":[true]}}"#,
    )
    .unwrap();
    same(&unknown);
    let live: LiveTurn = json::from_str(
        r#"{"turn_id":"t","rev":2,"state":"tool_running","text":"ab\u00e9","text_offset":4,"tools":[{"call_id":"c","name":"n","state":"running"}],"pending_question":{"question_id":"q","prompt":"ok?","options":["y","n"]}}"#,
    )
    .unwrap();
    same(&live);
    same(&TasksSnapshot::default());
    same(&Vec::<TranscriptItem>::new());
}

#[test]
fn the_eight_byte_scan_stops_where_the_table_does() {
    use super::{plain_until, ESCAPED};
    let by_table = |b: &[u8], from: usize| {
        (from..b.len())
            .find(|&i| ESCAPED[b[i] as usize])
            .unwrap_or(b.len())
    };
    // Every byte value, alone and in each lane of a word, after plain and
    // after high (non-ASCII) neighbours: borrows must not hide or invent a hit.
    for v in 0..=255u8 {
        for fill in [b'a', 0x7f, 0x80, 0xff, 0x21, 0x5d, 0x20] {
            for at in 0..20 {
                let mut b = vec![fill; 20];
                b[at] = v;
                for from in [0, 1, 7, 8, 13] {
                    assert_eq!(
                        plain_until(&b, from),
                        by_table(&b, from),
                        "{v:#x} {fill:#x} {at} {from}"
                    );
                }
            }
        }
    }
    // Pseudo-random mixes with several hits per word.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let b: Vec<u8> = (0..37)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                [b'"', b'\\', 0x1f, 0x00, b'x', 0xc3, 0xa9, b' '][(x % 8) as usize]
            })
            .collect();
        for from in 0..b.len() {
            assert_eq!(plain_until(&b, from), by_table(&b, from));
        }
    }
}
