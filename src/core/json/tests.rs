//! The small reader against serde_json on the same texts: the same value
//! where serde accepts, an error where it refuses.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{from_str, FromJson, JsonError, RawJson};
use crate::protocol::{Envelope, ErrorBody, LiveTurn, ReplayPage, TasksSnapshot, TranscriptItem};

fn same<T: FromJson + DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) {
    let ours = from_str::<T>(text);
    let theirs = serde_json::from_str::<T>(text);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
        (Err(_), Err(_)) => {}
        _ => panic!("reader disagrees on {text}: ours {ours:?}, serde {theirs:?}"),
    }
}

#[test]
fn values_match_serde_json() {
    let texts = [
        r#"null"#,
        r#"true"#,
        r#" false "#,
        r#"0"#,
        r#"-0"#,
        r#"-12"#,
        r#"18446744073709551615"#,
        r#"18446744073709551616"#,
        r#"-9223372036854775808"#,
        r#"1.5"#,
        r#"-2.5e-3"#,
        r#"1E400"#,
        r#"01"#,
        r#"1."#,
        r#"-"#,
        r#""a\"b\\c\/\b\f\n\r\t""#,
        r#""\u00e9\ud83d\ude00 é""#,
        r#""\ud83d""#,
        r#""\u12""#,
        "\"tab\there\"",
        "\"unterminated",
        "\"ends in a backslash\\",
        "\"\\u00",
        "\"\\\"only escapes\\n\\\\\"",
        r#"[1, [2, {"a": []}], "x"]"#,
        r#"{"b": 1, "a": {"c": null}, "b": 2}"#,
        r#"{"a" 1}"#,
        r#"[1,]"#,
        r#"{"a":1,}"#,
        r#"[1] x"#,
        r#""#,
        r#"nul"#,
    ];
    for t in texts {
        // A RawJson keeps text, not a tree: compare what it parses to.
        let ours = from_str::<RawJson>(t);
        let theirs = serde_json::from_str::<Value>(t);
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) => assert_eq!(&a.to_value(), b, "{t}"),
            (Err(_), Err(_)) => {}
            // Valid JSON text that serde_json cannot hold as an f64: kept as text.
            (Ok(a), Err(_)) if t == "1E400" => assert_eq!(a.as_str(), t),
            _ => panic!("{t}: ours {ours:?}, serde_json {theirs:?}"),
        }
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    assert!(from_str::<RawJson>(&deep).is_err());
    let ok = "[".repeat(100) + &"]".repeat(100);
    assert!(from_str::<RawJson>(&ok).is_ok());
}

#[test]
fn envelopes_match_serde() {
    let texts = [
        r#"{"id":7,"scope":"session","scope_id":"s","seq":3,"type":"turn.started","critical":false,"ts":"t","data":{"turn_id":"u1"}}"#,
        r#"{"data":{"head":4},"type":"heartbeat","scope":"session","scope_id":"s","after_seq":4,"critical":true,"ts":"t"}"#,
        r#"{"scope":"team","type":"future.kind","data":{"x":[1,2.5,"y"]},"extra":{"deep":[{}]}}"#,
        r#"{"scope":"session","type":"tool.started","data":{"call_id":"c","input":{"path":"a\nb"}}}"#,
        r#"{"scope":"session","type":"message.committed","data":{"message_id":"m","role":"user","text":"hi"}}"#,
        r#"{"scope":"session","type":"message.committed","data":{"message_id":"m","role":"robot"}}"#,
        r#"{"scope":"session","type":"turn.delta","data":{"offset":-1,"text":""}}"#,
        r#"{"scope":"session","type":"turn.delta","data":{"offset":1.0,"text":""}}"#,
        r#"{"scope":"session","type":"turn.started","data":{}}"#,
        r#"{"scope":"session","type":"turn.started","data":null}"#,
        r#"{"scope":"session","type":"session.closed"}"#,
        r#"{"scope":"galaxy","type":"session.closed"}"#,
        r#"{"scope":"session"}"#,
        r#"{"scope":"process","type":"process.exited","data":{"code":-9}}"#,
        r#"{"scope":"session","type":"live_turn.snapshot","data":{"live_turn":null}}"#,
    ];
    for t in texts {
        same::<Envelope>(t);
    }
}

#[test]
fn pages_and_bodies_match_serde() {
    same::<ReplayPage>(
        r#"{"epoch":"e","cursor":2,"head":5,"has_more":true,"history":[
            {"id":1,"scope":"session","scope_id":"s","seq":1,"type":"session.created","ts":"t","data":{"title":"x"}}],
            "live_turn":{"turn_id":"u","rev":3,"state":"tool_running","tools":[{"call_id":"c"}],
            "pending_question":{"question_id":"q","options":["a","b"]}},
            "tasks":{"version":1,"tasks":[{"task_id":"t","state":"running","detail":"d"}],
            "background_wait":{"task_ids":["t"]}}}"#,
    );
    same::<ReplayPage>(r#"{"epoch":"e","cursor":0}"#);
    same::<LiveTurn>(r#"{"turn_id":"u","rev":1,"state":"sleeping"}"#);
    same::<TasksSnapshot>(r#"{"version":2,"tasks":[{"task_id":"t"}]}"#);
    same::<ErrorBody>(r#"{"error":"cursor_ahead","epoch":"e","head":9}"#);
    same::<ErrorBody>(r#"{"message":"no code"}"#);
}

#[test]
fn transcript_items_match_serde() {
    let texts = [
        r#"{"kind":"message","message_id":"m","turn_id":"u","role":"assistant","text":"t"}"#,
        r#"{"turn_id":"u","call_id":"c","name":"n","status":"ok","kind":"tool"}"#,
        r#"{"kind":"tool","call_id":"c","turn_id":"u","name":"n","status":"ok","output":"o"}"#,
        r#"{"kind":"turn_end","turn_id":"u","outcome":"failed","reason":"r"}"#,
        r#"{"kind":"turn_end","turn_id":"u"}"#,
        r#"{"kind":"dance","turn_id":"u"}"#,
        r#"{"turn_id":"u","outcome":"completed"}"#,
    ];
    for t in texts {
        same::<TranscriptItem>(t);
    }
}

#[test]
fn errors_name_the_problem() {
    assert_eq!(
        from_str::<ErrorBody>(r#"{"message":"m"}"#),
        Err(JsonError::Missing("error"))
    );
    assert_eq!(
        from_str::<u64>("-3"),
        Err(JsonError::Type(0, "an unsigned integer"))
    );
    assert_eq!(from_str::<RawJson>("[1,"), Err(JsonError::Syntax(3)));
    // The first required field missing, in declaration order, by its key
    // (`type_name` is read from `type`); optional ones may be absent.
    use crate::machine::LastApplied;
    assert_eq!(
        from_str::<LastApplied>(r#"{"seq":3}"#),
        Err(JsonError::Missing("type"))
    );
    assert_eq!(
        from_str::<LastApplied>(r#"{"id":1}"#),
        Err(JsonError::Missing("seq"))
    );
    assert!(from_str::<LastApplied>(r#"{"seq":3,"type":"t"}"#).is_ok());
}
