//! Write bodies and their answers (PROTOCOL.md §4.4).

use super::*;

wire_struct! {
    /// `POST /v1/sessions` body.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct CreateSession {
        /// Human title.
        title: String = default,
    }
}

wire_struct! {
    /// `POST /v1/sessions` answer.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SessionCreatedReply {
        /// The new session.
        session_id: String,
        /// Its log's epoch.
        epoch: String,
    }
}

wire_struct! {
    /// `POST /v1/sessions/{id}/messages` body.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct PostMessage {
        /// Chosen by the client; a retry with the same id starts nothing.
        message_id: String,
        /// The text.
        text: String,
    }
}

wire_struct! {
    /// `POST /v1/sessions/{id}/messages` answer.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct MessageAccepted {
        /// The turn the message started (the same on a retry).
        turn_id: String,
    }
}

wire_struct! {
    /// `POST /v1/sessions/{id}/questions/{qid}/answer` body.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AnswerQuestion {
        /// The answer.
        answer: String,
    }
}

wire_struct! {
    /// `POST /v1/sessions/{id}/cancel` body: the turn to stop. A cancel that
    /// names a turn stops nothing else, so a retry never stops the next turn.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct CancelTurn {
        /// The turn to stop; absent: whichever turn is running.
        #[serde(skip_serializing_if = "Option::is_none")]
        turn_id: Option<String> = default,
    }
}

wire_struct! {
    /// The `202` answer to a cancel: the turn it stopped, `null` when none ran.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct CancelAccepted {
        /// The stopped turn.
        turn_id: Option<String> = default,
    }
}
