//! The canonical transcript (PROTOCOL.md §7), as the server's
//! `/transcript` returns it and the tests compare it.

use super::*;

wire_struct! {
    /// The canonical transcript of a session (PROTOCOL.md §7).
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Transcript {
        /// The log's epoch.
        epoch: String,
        /// Seq of the last applied durable event.
        cursor: u64,
        /// Committed items in durable order.
        items: Vec<TranscriptItem>,
        /// Unanswered questions, persisted and live.
        pending_prompts: Vec<PendingPrompt>,
        /// Task state.
        tasks: TasksSnapshot,
    }
}

impl Transcript {
    /// Transcript equality (PROTOCOL.md §6): the committed items only.
    pub fn items_eq(&self, other: &Transcript) -> bool {
        self.items == other.items
    }
}

wire_tagged! {
    /// One committed item of a transcript.
    #[derive(Clone, Debug, PartialEq)]
    pub enum TranscriptItem (tag = "kind") {
        /// A committed message.
        Message = "message" {
            /// The message.
            message_id: String,
            /// Its turn.
            turn_id: String,
            /// Author.
            role: Role,
            /// Whole text.
            text: String,
        },
        /// A tool card.
        Tool = "tool" {
            /// The call.
            call_id: String,
            /// Its turn.
            turn_id: String,
            /// Tool name.
            name: String,
            /// `running`, `ok` or `error`.
            status: String,
            /// Output once completed.
            output: Option<String> = default,
            /// The call's `input` as `tool.started` gave it (any JSON).
            input: RawJson = default,
        },
        /// A question once answered or declined (while open it is in
        /// `pending_prompts`), at its answer's place in durable order.
        Question = "question" {
            /// The question.
            question_id: String,
            /// Its turn.
            turn_id: String,
            /// What was asked.
            prompt: String,
            /// `answered` or `declined`.
            outcome: String,
            /// The answer given (answered).
            #[serde(skip_serializing_if = "Option::is_none")]
            answer: Option<String> = default,
            /// Why it was declined, e.g. `cancelled`, `orphaned`.
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<String> = default,
        },
        /// The end of a turn.
        TurnEnd = "turn_end" {
            /// The turn.
            turn_id: String,
            /// `completed`, `failed` or `cancelled`.
            outcome: String,
            /// Why it failed.
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<String> = default,
        },
    }
}

wire_struct! {
    /// An unanswered question.
    #[derive(Clone, Debug, PartialEq)]
    pub struct PendingPrompt {
        /// The question.
        question_id: String,
        /// What is asked.
        prompt: String,
        /// Answer choices.
        options: Vec<String>,
        /// False when it exists only in a live turn.
        persisted: bool,
    }
}
