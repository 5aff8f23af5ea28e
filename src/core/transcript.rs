//! The batch fold of a durable session log into its canonical transcript
//! (PROTOCOL.md §7). Deliberately simple and separate from the incremental
//! view fold, so tests can use it as the oracle the view must agree with.

use crate::core::protocol::{
    Envelope, Event, PendingPrompt, ToolStatus, Transcript, TranscriptItem,
};

/// Folds durable session events (ascending `seq`; transient events and
/// repeated `seq`s are ignored) into the transcript.
pub fn fold(epoch: &str, events: &[Envelope]) -> Transcript {
    let mut items: Vec<TranscriptItem> = Vec::new();
    let mut prompts: Vec<PendingPrompt> = Vec::new();
    let mut resolved: Vec<String> = Vec::new();
    let mut cursor = 0;
    for env in events {
        let Some(seq) = env.seq else { continue };
        if seq <= cursor {
            continue;
        }
        cursor = seq;
        match &env.event {
            Event::MessageCommitted(m) => items.push(TranscriptItem::Message {
                message_id: m.message_id.clone(),
                turn_id: m.turn_id.clone(),
                role: m.role,
                text: m.text.clone(),
            }),
            Event::ToolStarted(t) => {
                let exists = items.iter_mut().find_map(|i| match i {
                    TranscriptItem::Tool { call_id, name, .. } if *call_id == t.call_id => {
                        Some(name)
                    }
                    _ => None,
                });
                match exists {
                    Some(name) => name.clone_from(&t.name),
                    None => items.push(TranscriptItem::Tool {
                        call_id: t.call_id.clone(),
                        turn_id: t.turn_id.clone(),
                        name: t.name.clone(),
                        status: "running".into(),
                        output: None,
                    }),
                }
            }
            Event::ToolCompleted(t) => {
                let st = if t.status == ToolStatus::Ok {
                    "ok"
                } else {
                    "error"
                };
                let card = items.iter_mut().find_map(|i| match i {
                    TranscriptItem::Tool {
                        call_id,
                        status,
                        output,
                        ..
                    } if *call_id == t.call_id => Some((status, output)),
                    _ => None,
                });
                match card {
                    Some((status, output)) => {
                        *status = st.into();
                        *output = Some(t.output.clone());
                    }
                    None => items.push(TranscriptItem::Tool {
                        call_id: t.call_id.clone(),
                        turn_id: t.turn_id.clone(),
                        name: String::new(),
                        status: st.into(),
                        output: Some(t.output.clone()),
                    }),
                }
            }
            Event::QuestionAsked(q)
                if !resolved.contains(&q.question_id)
                    && !prompts.iter().any(|p| p.question_id == q.question_id) =>
            {
                prompts.push(PendingPrompt {
                    question_id: q.question_id.clone(),
                    prompt: q.prompt.clone(),
                    options: q.options.clone(),
                    persisted: true,
                });
            }
            Event::QuestionAnswered(q) => {
                resolved.push(q.question_id.clone());
                prompts.retain(|p| p.question_id != q.question_id);
            }
            Event::QuestionDeclined(q) => {
                resolved.push(q.question_id.clone());
                prompts.retain(|p| p.question_id != q.question_id);
            }
            Event::TurnCompleted(t) => items.push(turn_end(&t.turn_id, "completed", None)),
            Event::TurnCancelled(t) => items.push(turn_end(&t.turn_id, "cancelled", None)),
            Event::TurnFailed(t) => {
                items.push(turn_end(&t.turn_id, "failed", Some(t.reason.clone())))
            }
            _ => {}
        }
    }
    Transcript {
        epoch: epoch.to_owned(),
        cursor,
        items,
        pending_prompts: prompts,
        tasks: Default::default(),
    }
}

fn turn_end(turn_id: &str, outcome: &str, reason: Option<String>) -> TranscriptItem {
    TranscriptItem::TurnEnd {
        turn_id: turn_id.to_owned(),
        outcome: outcome.to_owned(),
        reason,
    }
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
    use crate::core::protocol::Scope;
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
                r#"{"kind":"tool","call_id":"c1","turn_id":"t1","name":"shell","status":"ok","output":"..."},"#,
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
}
