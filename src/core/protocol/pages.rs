//! The JSON pages and the error body (PROTOCOL.md §4.1, §4.2): replay
//! pages, event pages and what a non-2xx answer carries.

use super::*;

wire_struct! {
    /// `GET /v1/sessions/{id}/replay` (PROTOCOL.md §4.1).
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ReplayPage {
        /// The log's epoch.
        epoch: String,
        /// The runtime run that produced `live_turn`.
        boot_id: String = default,
        /// Seq of the last event in `history` (or `after_cursor` when empty).
        cursor: u64,
        /// Durable head.
        head: u64,
        /// More pages follow.
        has_more: bool = default,
        /// Durable events, ascending.
        history: Vec<Envelope> = default,
        /// The running turn (meaningful on the last page only).
        live_turn: Option<LiveTurn> = default,
        /// Task state (meaningful on the last page only).
        tasks: Option<TasksSnapshot> = default,
        /// A page asked for by `tail` (docs/protocol.md §4.1): the seq
        /// before its first event, a turn boundary; 0 = nothing older.
        /// Absent from a runtime without the extension.
        #[serde(skip_serializing_if = "Option::is_none")]
        older_cursor: Option<u64> = default,
    }
}

wire_struct! {
    /// `GET /v1/{scope_path}/events` as JSON (PROTOCOL.md §4.2).
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct EventPage {
        /// The log's epoch.
        epoch: String,
        /// Durable head.
        head: u64,
        /// Durable events, ascending.
        events: Vec<Envelope> = default,
        /// More pages follow.
        has_more: bool = default,
    }
}

wire_struct! {
    /// Every error response body: `{"error": CODE, "message": TEXT}`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ErrorBody {
        /// Stable code, e.g. `invalid_cursor`, `cursor_ahead`.
        error: String,
        /// Human text.
        message: String = default,
        /// With `cursor_ahead`: the log's epoch.
        #[serde(skip_serializing_if = "Option::is_none")]
        epoch: Option<String> = default,
        /// With `cursor_ahead`: the durable head.
        #[serde(skip_serializing_if = "Option::is_none")]
        head: Option<u64> = default,
    }
}
