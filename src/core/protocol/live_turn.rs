//! The in-flight turn (PROTOCOL.md §5): `live_turn` as a replay page and a
//! `live_turn.snapshot` carry it.

use super::*;

wire_struct! {
    /// What a running turn looks like right now (PROTOCOL.md §5).
    #[derive(Clone, Debug, PartialEq)]
    pub struct LiveTurn {
        /// The turn.
        turn_id: String,
        /// The assistant message being written.
        message_id: String = default,
        /// Revision within one boot id; higher wins.
        rev: u64,
        /// What the turn is doing.
        state: LiveTurnState,
        /// Tail of the uncommitted assistant text (at most 16 384 scalars).
        text: String = default,
        /// Offset of `text`'s first scalar in the message.
        text_offset: u64 = default,
        /// Tool calls of the turn and their states.
        tools: Vec<LiveTool> = default,
        /// A question waiting for an answer, possibly not yet persisted.
        pending_question: Option<PendingQuestion> = default,
    }
}

wire_enum! {
    /// State of a live turn.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum LiveTurnState {
        /// The model is writing.
        Sampling = "sampling",
        /// A tool runs.
        ToolRunning = "tool_running",
        /// A question waits for the person.
        WaitingForAnswer = "waiting_for_answer",
    }
}

wire_struct! {
    /// A tool call inside a live turn.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct LiveTool {
        /// The call.
        call_id: String,
        /// Tool name.
        name: String = default,
        /// `running`, `ok` or `error` from the reference runtime (typed
        /// there). Read as text: a state another runtime adds is shown as
        /// it is, where an unknown enum value would fail the whole
        /// `live_turn` and blank the running answer.
        state: String = default,
        /// Latest progress text.
        progress: String = default,
    }
}

wire_struct! {
    /// A question in a live turn.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct PendingQuestion {
        /// The question.
        question_id: String,
        /// What is asked.
        prompt: String = default,
        /// Answer choices.
        options: Vec<String> = default,
    }
}
