//! The server's own canonical transcript (PROTOCOL.md §7): a plain batch fold
//! of a session's durable events. It is the test oracle, deliberately written
//! independently of the client's incremental fold.

use replay_client::core::protocol::{
    Envelope, Event, PendingPrompt, TasksSnapshot, ToolStatus, Transcript, TranscriptItem,
};

/// Folds a session's durable events, in seq order, into its transcript.
pub fn fold(epoch: &str, events: &[Envelope], tasks: TasksSnapshot) -> Transcript {
    let mut items: Vec<TranscriptItem> = Vec::new();
    let mut pending: Vec<PendingPrompt> = Vec::new();
    let mut cursor = 0;
    for env in events {
        cursor = env.seq.unwrap_or(cursor);
        match &env.event {
            Event::MessageCommitted(m) => items.push(TranscriptItem::Message {
                message_id: m.message_id.clone(),
                turn_id: m.turn_id.clone(),
                role: m.role,
                text: m.text.clone(),
            }),
            Event::ToolStarted(t) => items.push(TranscriptItem::Tool {
                call_id: t.call_id.clone(),
                turn_id: t.turn_id.clone(),
                name: t.name.clone(),
                status: "running".into(),
                output: None,
            }),
            Event::ToolCompleted(done) => {
                for item in items.iter_mut() {
                    if let TranscriptItem::Tool {
                        call_id,
                        status,
                        output,
                        ..
                    } = item
                    {
                        if *call_id == done.call_id {
                            *status = match done.status {
                                ToolStatus::Ok => "ok",
                                ToolStatus::Error => "error",
                            }
                            .into();
                            *output = Some(done.output.clone());
                        }
                    }
                }
            }
            Event::TurnCompleted(t) => items.push(turn_end(&t.turn_id, "completed", None)),
            Event::TurnCancelled(t) => items.push(turn_end(&t.turn_id, "cancelled", None)),
            Event::TurnFailed(t) => {
                items.push(turn_end(&t.turn_id, "failed", Some(t.reason.clone())))
            }
            Event::QuestionAsked(q) => pending.push(PendingPrompt {
                question_id: q.question_id.clone(),
                prompt: q.prompt.clone(),
                options: q.options.clone(),
                persisted: true,
            }),
            Event::QuestionAnswered(q) => pending.retain(|p| p.question_id != q.question_id),
            Event::QuestionDeclined(q) => pending.retain(|p| p.question_id != q.question_id),
            _ => {}
        }
    }
    Transcript {
        epoch: epoch.to_owned(),
        cursor,
        items,
        pending_prompts: pending,
        tasks,
    }
}

fn turn_end(turn_id: &str, outcome: &str, reason: Option<String>) -> TranscriptItem {
    TranscriptItem::TurnEnd {
        turn_id: turn_id.to_owned(),
        outcome: outcome.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_client::core::protocol::Scope;

    fn env(seq: u64, ty: &str, data: serde_json::Value) -> Envelope {
        Envelope {
            id: Some(seq),
            scope: Scope::Session,
            scope_id: "s".into(),
            seq: Some(seq),
            after_seq: None,
            critical: true,
            ts: String::new(),
            event: Event::decode(ty, Some(&data.to_string())).unwrap(),
        }
    }

    #[test]
    fn folds_messages_tools_turn_ends_and_questions() {
        use serde_json::json;
        let events = vec![
            env(1, "session.created", json!({"title": "t"})),
            env(
                2,
                "turn.started",
                json!({"turn_id": "t1", "input_message_id": "m1"}),
            ),
            env(
                3,
                "message.committed",
                json!({"message_id": "m1", "turn_id": "t1", "role": "user", "text": "hi"}),
            ),
            env(
                4,
                "tool.started",
                json!({"turn_id": "t1", "call_id": "c1", "name": "shell", "input": {}}),
            ),
            env(
                5,
                "question.asked",
                json!({"turn_id": "t1", "question_id": "q1", "prompt": "ok?", "options": ["yes"]}),
            ),
            env(
                6,
                "question.asked",
                json!({"turn_id": "t1", "question_id": "q2", "prompt": "and?", "options": []}),
            ),
            env(
                7,
                "tool.completed",
                json!({"turn_id": "t1", "call_id": "c1", "status": "error", "output": "boom"}),
            ),
            env(
                8,
                "question.answered",
                json!({"question_id": "q1", "answer": "yes"}),
            ),
            env(
                9,
                "turn.failed",
                json!({"turn_id": "t1", "reason": "worker_restart"}),
            ),
        ];
        let t = fold("e1", &events, TasksSnapshot::default());
        assert_eq!(t.cursor, 9);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(
            json["items"],
            json!([
                {"kind": "message", "message_id": "m1", "turn_id": "t1", "role": "user", "text": "hi"},
                {"kind": "tool", "call_id": "c1", "turn_id": "t1", "name": "shell", "status": "error", "output": "boom"},
                {"kind": "turn_end", "turn_id": "t1", "outcome": "failed", "reason": "worker_restart"}
            ])
        );
        assert_eq!(
            json["pending_prompts"],
            json!([{"question_id": "q2", "prompt": "and?", "options": [], "persisted": true}])
        );
    }
}
