//! The envelope's wire form, and the round trip of every wire type.

use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

#[test]
fn durable_envelope_round_trips_in_wire_order() {
    let line = r#"{"id":5012,"scope":"session","scope_id":"ses_7f3a","seq":17,"type":"message.committed","critical":true,"ts":"2026-11-29T23:00:00.123Z","data":{"message_id":"m1","turn_id":"t1","role":"assistant","text":"hi"}}"#;
    let env = Envelope::from_json(line.as_bytes()).unwrap();
    assert!(env.is_durable());
    assert!(matches!(env.event, Event::MessageCommitted(ref m) if m.text == "hi"));
    assert_eq!(env.to_json(), line);
}

#[test]
fn unknown_type_and_fields_are_tolerated() {
    let line = r#"{"scope":"session","scope_id":"s","seq":3,"type":"future.thing","critical":true,"ts":"","data":{"x":[1,2]},"extra":1}"#;
    let env = Envelope::from_json(line.as_bytes()).unwrap();
    assert_eq!(env.event.type_name(), "future.thing");
    assert_eq!(env.seq, Some(3));
    let line = r#"{"scope":"session","scope_id":"s","seq":4,"type":"turn.completed","ts":"","data":{"turn_id":"t","new_field":true}}"#;
    let env = Envelope::from_json(line.as_bytes()).unwrap();
    assert!(env.critical, "durable events are critical");
    assert!(matches!(env.event, Event::TurnCompleted(ref t) if t.turn_id == "t"));
}

#[test]
fn transient_envelope_has_no_id_or_seq() {
    let line = r#"{"scope":"session","scope_id":"s","after_seq":16,"type":"turn.delta","critical":true,"ts":"","data":{"turn_id":"t","message_id":"m","offset":3,"text":"é"}}"#;
    let env = Envelope::from_json(line.as_bytes()).unwrap();
    assert!(!env.is_durable());
    assert_eq!(env.after_seq, Some(16));
    assert_eq!(env.to_json(), line);
}

#[test]
fn a_delta_read_over_another_leaves_nothing_of_it() {
    let first = r#"{"scope":"session","scope_id":"s","after_seq":16,"type":"turn.delta","critical":true,"ts":"t0","data":{"turn_id":"t","message_id":"m","offset":3,"text":"abc"}}"#;
    // No scope_id, ts or turn ids: each reads as absent, as it does alone.
    let second =
        r#"{"scope":"session","after_seq":17,"type":"turn.delta","data":{"offset":6,"text":"d"}}"#;
    let mut env = Envelope::from_json(first.as_bytes()).unwrap();
    json::read_over(second, &mut env, json::Payloads::Typed).unwrap();
    assert_eq!(env, Envelope::from_json(second.as_bytes()).unwrap());
    let Event::TurnDelta(d) = &env.event else {
        panic!("a delta")
    };
    assert_eq!(
        (d.turn_id.as_str(), d.message_id.as_str(), d.text.as_str()),
        ("", "", "d")
    );
    assert_eq!((env.scope_id.as_str(), env.ts.as_str()), ("", ""));
}

#[test]
fn the_hub_reads_each_scope_as_its_client_would() {
    let read = |text: &str| json::from_str_with::<Envelope>(text, json::Payloads::AsTheirClients);
    let data = r#""data":{"message_id":"m","turn_id":"t","role":"user","text":"hi"}"#;
    // A session's payload typed: its machine gets it read, once.
    let typed = format!(
        r#"{{"scope":"session","scope_id":"s","seq":1,"type":"message.committed",{data}}}"#
    );
    assert!(
        matches!(read(&typed).unwrap().event, Event::MessageCommitted(ref m) if m.text == "hi")
    );
    // The scope after the payload: decided at the envelope's end.
    let late = format!(
        r#"{{"seq":1,"type":"message.committed",{data},"scope_id":"s","scope":"session"}}"#
    );
    assert!(matches!(
        read(&late).unwrap().event,
        Event::MessageCommitted(_)
    ));
    // Any other scope's kept as text, as a log's client reads it.
    let process =
        r#"{"scope":"process","scope_id":"p","seq":1,"type":"process.output","data":{"x":1}}"#;
    let env = read(process).unwrap();
    assert!(
        matches!(env.event, Event::Unknown { ref type_name, .. } if type_name == "process.output")
    );
    assert_eq!(env, json::from_str_opaque::<Envelope>(process).unwrap());
    let hello = r#"{"scope":"team","scope_id":"x","type":"hello","data":{"epoch":"e","head":3}}"#;
    assert!(matches!(read(hello).unwrap().event, Event::Hello(ref h) if h.head == 3));
}

#[test]
fn transcript_serialises_keys_in_canonical_order() {
    let t = Transcript {
        epoch: "e".into(),
        cursor: 2,
        items: vec![
            TranscriptItem::Tool {
                call_id: "c1".into(),
                turn_id: "t1".into(),
                name: "shell".into(),
                status: "ok".into(),
                output: Some("x".into()),
                input: RawJson::parse(r#"{"cmd":"ls"}"#).unwrap(),
            },
            TranscriptItem::TurnEnd {
                turn_id: "t1".into(),
                outcome: "completed".into(),
                reason: None,
            },
        ],
        pending_prompts: vec![],
        tasks: TasksSnapshot::default(),
    };
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        r#"{"epoch":"e","cursor":2,"items":[{"kind":"tool","call_id":"c1","turn_id":"t1","name":"shell","status":"ok","output":"x","input":{"cmd":"ls"}},{"kind":"turn_end","turn_id":"t1","outcome":"completed"}],"pending_prompts":[],"tasks":{"version":0,"tasks":[],"background_wait":null}}"#
    );
}

#[test]
fn tagged_items_read_in_one_pass_when_the_tag_comes_first() {
    // Tag first (what both writers produce), tag last, whitespace, and a
    // tag that is not a string.
    let first = r#"{"kind":"turn_end","turn_id":"u","outcome":"failed","reason":"r"}"#;
    let last = r#"{"turn_id":"u","outcome":"failed","reason":"r","kind":"turn_end"}"#;
    let spaced = r#" { "kind" : "turn_end" , "turn_id":"u","outcome":"failed","reason":"r" } "#;
    let want = TranscriptItem::TurnEnd {
        turn_id: "u".into(),
        outcome: "failed".into(),
        reason: Some("r".into()),
    };
    for text in [first, last, spaced] {
        assert_eq!(
            json::from_str::<TranscriptItem>(text),
            Ok(want.clone()),
            "{text}"
        );
    }
    assert!(json::from_str::<TranscriptItem>(r#"{"kind":1,"turn_id":"u"}"#).is_err());
    assert!(json::from_str::<TranscriptItem>(r#"{"kind":"tool","turn_id":"u",}"#).is_err());
    assert_eq!(
        json::from_str::<Vec<TranscriptItem>>(&format!("[{first},{last}]")),
        Ok(vec![want.clone(), want])
    );
}

#[cfg(not(target_arch = "wasm32"))]
mod round_trip {
    use std::fmt::Debug;

    use proptest::prelude::*;
    use serde::de::DeserializeOwned;

    use super::super::*;
    use crate::json::arb::Arb;
    use crate::json::FromJson;

    /// Types whose raw JSON serde reads from its own buffer (an internally
    /// tagged enum's fields: a tool item's `input`), not from the text.
    const BUFFERED: &[&str] = &["Transcript", "TranscriptItem"];

    /// Both writers write the same text, and both readers read the value
    /// back; serde, of a `BUFFERED` type, the same JSON value (its numbers
    /// spelt its way), or nothing where a `serde_json::Value` holds nothing
    /// either (a number beyond f64).
    fn round_trip<T>(v: &T, buffered: bool) -> Result<(), TestCaseError>
    where
        T: Serialize + DeserializeOwned + FromJson + PartialEq + Debug,
    {
        let text = serde_json::to_string(v).expect("serde_json writes it");
        prop_assert_eq!(&json::to_string(v).expect("the client writes it"), &text);
        prop_assert_eq!(
            &json::from_str::<T>(&text).expect("the client reads it"),
            v,
            "{}",
            text
        );
        if buffered {
            let value = serde_json::from_str::<serde_json::Value>(&text);
            match serde_json::from_str::<T>(&text) {
                Ok(back) => prop_assert_eq!(
                    serde_json::to_value(&back).expect("serde writes it"),
                    value.expect("a JSON value"),
                    "{}",
                    text
                ),
                Err(e) => prop_assert!(value.is_err(), "serde refused {}: {}", text, e),
            }
        } else {
            prop_assert_eq!(
                &serde_json::from_str::<T>(&text).expect("serde reads it"),
                v,
                "{}",
                text
            );
        }
        read_over(v, v)
    }

    /// Read over a value read before (as the machine reads each stream
    /// envelope over the last: `FromJson::read_into`), `b`'s text reads as
    /// it reads alone, whatever `a` held.
    fn read_over<T>(a: &T, b: &T) -> Result<(), TestCaseError>
    where
        T: Serialize + FromJson + PartialEq + Debug,
    {
        let mut over: T = json::from_str(&json::to_string(a).expect("written")).expect("read");
        let text = json::to_string(b).expect("the client writes it");
        json::read_over(&text, &mut over, json::Payloads::Typed)
            .expect("the client reads it over another");
        prop_assert_eq!(&over, b, "{}", text);
        Ok(())
    }

    /// Envelopes carrying deltas: the in-place path of `turn.delta`.
    fn delta_envelope() -> impl Strategy<Value = Envelope> {
        (Envelope::arb(), TurnDelta::arb()).prop_map(|(mut env, delta)| {
            env.event = Event::TurnDelta(delta);
            env
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn an_envelope_reads_over_another_as_alone(a in Envelope::arb(), b in Envelope::arb()) {
            read_over(&a, &b)?;
        }

        #[test]
        fn a_delta_reads_over_a_delta_as_alone(a in delta_envelope(), b in delta_envelope()) {
            read_over(&a, &b)?;
        }

        #[test]
        fn an_envelope_and_a_delta_read_over_each_other(a in Envelope::arb(), b in delta_envelope()) {
            read_over(&a, &b)?;
            read_over(&b, &a)?;
        }

        /// As a backlog's pages are read, each over the last of its kind.
        #[test]
        fn a_page_reads_over_another_as_alone(a in ReplayPage::arb(), b in ReplayPage::arb()) {
            read_over(&a, &b)?;
        }

        #[test]
        fn an_event_page_reads_over_another_as_alone(a in EventPage::arb(), b in EventPage::arb()) {
            read_over(&a, &b)?;
        }
    }

    macro_rules! every_wire_type {
        ($($ty:ident),* $(,)?) => {
            /// The types the property covers, by name.
            const COVERED: &[&str] = &[$(stringify!($ty)),*];

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(64))]
                $(
                    #[test]
                    #[allow(non_snake_case)]
                    fn $ty(v in <$ty as Arb>::arb()) {
                        round_trip(&v, BUFFERED.contains(&stringify!($ty)))?;
                    }
                )*
            }
        };
    }

    every_wire_type!(
        Scope,
        Envelope,
        Empty,
        WithReason,
        SessionCreated,
        TurnStarted,
        Role,
        MessageCommitted,
        ToolStarted,
        ToolStatus,
        ToolCompleted,
        QuestionAsked,
        QuestionAnswered,
        QuestionDeclined,
        TurnRef,
        TurnFailed,
        Hello,
        Heartbeat,
        TurnDelta,
        ToolProgress,
        LiveTurnSnapshot,
        LiveTurn,
        LiveTurnState,
        LiveTool,
        PendingQuestion,
        TasksSnapshot,
        Task,
        TaskState,
        BackgroundWait,
        ProcessStarted,
        ProcessExited,
        OutputStream,
        ProcessOutput,
        TeamMessage,
        Delivery,
        Worktree,
        SystemStarted,
        SystemRecovered,
        ReplayPage,
        EventPage,
        ErrorBody,
        CreateSession,
        SessionCreatedReply,
        PostMessage,
        MessageAccepted,
        AnswerQuestion,
        CancelTurn,
        CancelAccepted,
        Transcript,
        TranscriptItem,
        PendingPrompt,
    );

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// An event's `data`, written by both writers, read back for its
        /// `type` by both readers.
        #[test]
        #[allow(non_snake_case)]
        fn Event(v in Event::arb()) {
            let text = v.data_json();
            prop_assert_eq!(&json::to_string(&Data(&v)).expect("the client writes it"), &text);
            let ty = v.type_name();
            prop_assert_eq!(&Event::read_data(ty, Some(&text)).expect("the client reads it"), &v, "{}", text);
            prop_assert_eq!(&Event::decode_serde(ty, Some(&text)).expect("serde reads it"), &v, "{}", text);
        }
    }

    struct Data<'a>(&'a Event);

    impl Serialize for Data<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.serialize_data(s)
        }
    }

    #[test]
    fn every_declared_type_is_covered() {
        // Every file of the protocol's types (one per PROTOCOL section).
        let sources = [
            include_str!("../protocol.rs"),
            include_str!("events.rs"),
            include_str!("live_turn.rs"),
            include_str!("scopes.rs"),
            include_str!("pages.rs"),
            include_str!("writes.rs"),
            include_str!("canonical.rs"),
        ];
        let mut declared: Vec<&str> = sources
            .iter()
            .flat_map(|source| source.lines())
            .filter_map(|l| {
                let l = l.trim_start();
                l.strip_prefix("pub struct ")
                    .or_else(|| l.strip_prefix("pub enum "))
            })
            .map(|rest| rest.split([' ', '(', '{']).next().unwrap_or_default())
            .collect();
        declared.sort_unstable();
        let mut covered = COVERED.to_vec();
        covered.push("Event");
        covered.sort_unstable();
        assert_eq!(covered, declared);
    }
}
