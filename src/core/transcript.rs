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
