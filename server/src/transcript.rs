//! The server's canonical transcript (PROTOCOL.md §7): the client's own
//! session fold ([`replay_core::transcript::fold`]) over the
//! session's durable events, with the task state the store keeps. One fold
//! for both sides, so the oracle and the SDK cannot disagree on an item.

use replay_core::protocol::{Envelope, TasksSnapshot, Transcript};

/// Folds a session's durable events, in seq order, into its transcript.
pub fn fold(epoch: &str, events: &[Envelope], tasks: TasksSnapshot) -> Transcript {
    Transcript {
        tasks,
        ..replay_core::transcript::fold(epoch, events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_core::protocol::{Event, Scope};

    fn env(seq: u64, ty: &str, data: serde_json::Value) -> Envelope {
        let event = Event::decode(ty, Some(&data.to_string())).unwrap();
        Envelope::durable(seq, Scope::Session, "s".into(), seq, String::new(), event)
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
                {"kind": "tool", "call_id": "c1", "turn_id": "t1", "name": "shell", "status": "error", "output": "boom", "input": {}},
                {"kind": "question", "question_id": "q1", "turn_id": "t1", "prompt": "ok?", "outcome": "answered", "answer": "yes"},
                {"kind": "turn_end", "turn_id": "t1", "outcome": "failed", "reason": "worker_restart"}
            ])
        );
        assert_eq!(
            json["pending_prompts"],
            json!([{"question_id": "q2", "prompt": "and?", "options": [], "persisted": true}])
        );
    }
}
