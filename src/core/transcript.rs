//! The canonical transcript of a durable session log (PROTOCOL.md §7), as
//! one batch call: the session fold ([`SessionView`]) that the client runs
//! incrementally, applied to the whole log at once. The reference server's
//! `GET .../transcript` is this function, so server and client cannot fold
//! differently; tests use it as the oracle for what the machine shows after
//! restores, cuts, gaps and repairs.

use crate::fold::{SessionView, ViewChange};
use crate::protocol::{Envelope, PendingPrompt, Transcript};

/// Folds durable session events (ascending `seq`; transient events and
/// repeated `seq`s are ignored) into the transcript. Its `tasks` are the
/// default: tasks travel in snapshots, not in the log.
pub fn fold(epoch: &str, events: &[Envelope]) -> Transcript {
    let (view, cursor) = fold_view(events);
    view.transcript(epoch, cursor)
}

/// The session view [`fold`] reads its transcript from, and the last `seq`
/// applied: the oracle of the folded parts that are not in a transcript
/// (`session`, `extras`).
pub fn fold_view(events: &[Envelope]) -> (SessionView, u64) {
    let mut view = SessionView::default();
    let mut change = ViewChange::default();
    let mut cursor = 0;
    for env in events {
        let Some(seq) = env.seq else { continue };
        if seq <= cursor {
            continue;
        }
        cursor = seq;
        view.apply_durable(&mut env.clone(), &mut change);
    }
    (view, cursor)
}

/// Transcript equality (PROTOCOL.md §6): items equal, and the persisted
/// pending prompts equal (live-only prompts are compared separately).
pub fn transcript_eq(a: &Transcript, b: &Transcript) -> bool {
    let persisted = |t: &Transcript| -> Vec<PendingPrompt> {
        t.pending_prompts
            .iter()
            .filter(|p| p.persisted)
            .cloned()
            .collect()
    };
    a.items_eq(b) && persisted(a) == persisted(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Event, Scope, TranscriptItem};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn log(events: &[(&str, &str)]) -> Vec<Envelope> {
        events
            .iter()
            .enumerate()
            .map(|(i, (ty, data))| Envelope {
                id: Some(100 + i as u64),
                scope: Scope::Session,
                scope_id: "s".into(),
                seq: Some(i as u64 + 1),
                after_seq: None,
                critical: true,
                ts: String::new(),
                event: Event::decode(ty, Some(data)).unwrap(),
            })
            .collect()
    }

    #[test]
    fn folds_the_protocol_example_into_canonical_json() {
        let events = log(&[
            ("session.created", r#"{"title":"x"}"#),
            (
                "message.committed",
                r#"{"message_id":"m1","turn_id":"t1","role":"user","text":"hi"}"#,
            ),
            (
                "turn.started",
                r#"{"turn_id":"t1","input_message_id":"m1"}"#,
            ),
            (
                "tool.started",
                r#"{"turn_id":"t1","call_id":"c1","name":"shell","input":{}}"#,
            ),
            (
                "question.asked",
                r#"{"turn_id":"t1","question_id":"q0","prompt":"Go?","options":[]}"#,
            ),
            (
                "question.answered",
                r#"{"question_id":"q0","answer":"yes"}"#,
            ),
            (
                "tool.completed",
                r#"{"turn_id":"t1","call_id":"c1","status":"ok","output":"..."}"#,
            ),
            ("turn.completed", r#"{"turn_id":"t1"}"#),
            (
                "turn.started",
                r#"{"turn_id":"t2","input_message_id":"m2"}"#,
            ),
            (
                "question.asked",
                r#"{"turn_id":"t2","question_id":"q1","prompt":"Proceed?","options":["yes","no"]}"#,
            ),
            (
                "turn.failed",
                r#"{"turn_id":"t2","reason":"worker_restart"}"#,
            ),
            ("future.event", r#"{"x":1}"#),
        ]);
        let t = fold("e_91c2", &events);
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            concat!(
                r#"{"epoch":"e_91c2","cursor":12,"items":["#,
                r#"{"kind":"message","message_id":"m1","turn_id":"t1","role":"user","text":"hi"},"#,
                r#"{"kind":"tool","call_id":"c1","turn_id":"t1","name":"shell","status":"ok","output":"...","input":{}},"#,
                r#"{"kind":"question","question_id":"q0","turn_id":"t1","prompt":"Go?","outcome":"answered","answer":"yes"},"#,
                r#"{"kind":"turn_end","turn_id":"t1","outcome":"completed"},"#,
                r#"{"kind":"turn_end","turn_id":"t2","outcome":"failed","reason":"worker_restart"}],"#,
                r#""pending_prompts":[{"question_id":"q1","prompt":"Proceed?","options":["yes","no"],"persisted":true}],"#,
                r#""tasks":{"version":0,"tasks":[],"background_wait":null}}"#
            )
        );
    }

    #[test]
    fn repeated_seqs_and_transients_are_ignored() {
        let mut events = log(&[
            (
                "message.committed",
                r#"{"message_id":"m1","turn_id":"t","role":"user","text":"a"}"#,
            ),
            ("turn.cancelled", r#"{"turn_id":"t"}"#),
        ]);
        events.insert(1, events[0].clone());
        let mut transient = events[0].clone();
        transient.seq = None;
        events.push(transient);
        let t = fold("e", &events);
        assert_eq!(t.items.len(), 2);
        assert_eq!(t.cursor, 2);
    }

    #[test]
    fn transcript_eq_ignores_live_only_prompts() {
        let events = log(&[(
            "message.committed",
            r#"{"message_id":"m","turn_id":"t","role":"assistant","text":"x"}"#,
        )]);
        let a = fold("e", &events);
        let mut b = a.clone();
        b.pending_prompts.push(PendingPrompt {
            question_id: "live".into(),
            prompt: String::new(),
            options: vec![],
            persisted: false,
        });
        assert!(transcript_eq(&a, &b));
        b.pending_prompts[0].persisted = true;
        assert!(!transcript_eq(&a, &b));
        let c = fold("e", &[]);
        assert!(!transcript_eq(&a, &c));
    }

    fn turn_end(turn_id: &str, outcome: &str, reason: Option<String>) -> TranscriptItem {
        TranscriptItem::TurnEnd {
            turn_id: turn_id.to_owned(),
            outcome: outcome.to_owned(),
            reason,
        }
    }

    fn tool(name: &str, status: &str, output: Option<&str>) -> TranscriptItem {
        TranscriptItem::Tool {
            call_id: "c1".into(),
            turn_id: "t1".into(),
            name: name.into(),
            status: status.into(),
            output: output.map(Into::into),
            input: crate::json::RawJson::empty_object(),
        }
    }

    // PROTOCOL.md §7: a tool card appears at its `tool.started` and only
    // `tool.completed` updates it. One call, one card.
    #[test]
    fn a_repeated_tool_started_keeps_one_card() {
        let started = |name: &str| {
            format!(r#"{{"turn_id":"t1","call_id":"c1","name":"{name}","input":{{}}}}"#)
        };
        let events = log(&[
            ("tool.started", &started("shell")),
            ("tool.started", &started("shell")),
        ]);
        assert_eq!(
            fold("e", &events).items,
            vec![tool("shell", "running", None)]
        );
        let events = log(&[
            ("tool.started", &started("shell")),
            (
                "tool.completed",
                r#"{"turn_id":"t1","call_id":"c1","status":"ok","output":"done"}"#,
            ),
            ("tool.started", &started("other")),
        ]);
        let t = fold("e", &events);
        assert_eq!(t.items, vec![tool("shell", "ok", Some("done"))]);
        assert_eq!(t.cursor, 3);
    }

    // PROTOCOL.md §7: items appear at `message.committed`, `tool.started`
    // and a turn's end; a completion with no card has nothing to update.
    #[test]
    fn an_orphan_tool_completed_adds_no_card() {
        let events = log(&[
            (
                "tool.completed",
                r#"{"turn_id":"t1","call_id":"c1","status":"error","output":"x"}"#,
            ),
            ("turn.completed", r#"{"turn_id":"t1"}"#),
        ]);
        let t = fold("e", &events);
        assert_eq!(t.items, vec![turn_end("t1", "completed", None)]);
        assert_eq!(t.cursor, 2);
    }
}
