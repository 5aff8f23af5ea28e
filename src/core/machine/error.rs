//! The core's one error type and its JS-friendly summary.

use serde::{Deserialize, Serialize};

/// Everything that can go wrong while following a scope. Each variant has a
/// stable [`code`](CoreError::code) that notices and `Status::last_error`
/// carry to the application.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum CoreError {
    /// A frame or a page was not valid JSON for its type.
    #[error("bad json: {0}")]
    BadJson(String),
    /// An SSE event was larger than `Config::max_event_size`.
    #[error("event of {size} bytes exceeds the limit of {limit}")]
    EventTooLarge {
        /// The configured limit.
        limit: usize,
        /// Bytes seen when the event was dropped.
        size: usize,
    },
    /// The server rejected the cursor as malformed (`400 invalid_cursor`).
    #[error("invalid cursor: {0}")]
    InvalidCursor(String),
    /// The cursor is above the server's head (`409 cursor_ahead`).
    #[error("cursor ahead of the server: {0}")]
    CursorAhead(String),
    /// 401 or 403.
    #[error("unauthorized (HTTP {status}){}", reason_suffix(.message))]
    Unauthorized {
        /// The HTTP status.
        status: u16,
        /// The body's `message` (the server's reason), empty without one.
        message: String,
    },
    /// Any other HTTP error status; its [`code`](CoreError::code) is the
    /// body's, `http_status` without one.
    #[error("HTTP {status}: {message}")]
    HttpStatus {
        /// The HTTP status.
        status: u16,
        /// The body's `error` code, if the body was JSON.
        code: String,
        /// The body's `message`, if any.
        message: String,
    },
    /// The stream answered with something other than `text/event-stream`.
    #[error("wrong content type: `{0}`")]
    WrongContentType(String),
    /// The log was recreated; local state was discarded.
    #[error("epoch changed from `{previous}` to `{current}`")]
    EpochChanged {
        /// The epoch the client had.
        previous: String,
        /// The epoch the server has.
        current: String,
    },
    /// Gap repair found a different event at the cursor than the one
    /// applied, or an older page other events than those before the oldest
    /// one held.
    #[error("history differs at cursor {cursor}")]
    HistoryMismatch {
        /// The cursor that no longer matches.
        cursor: u64,
    },
    /// A page said `has_more` but did not move the cursor (a broken proxy
    /// or cache would have it asked for again and again).
    #[error("a page with more to come did not move the cursor from {cursor}")]
    PageNotAdvancing {
        /// The cursor the page was asked from.
        cursor: u64,
    },
    /// A page held more events than its request's `limit` (a broken or
    /// hostile server: nothing would bound what it sends next).
    #[error("a page of {len} events exceeds its limit of {limit}")]
    PageOverLimit {
        /// The request's `limit`.
        limit: u32,
        /// The events it held.
        len: usize,
    },
    /// A replay or event page held an event further past the head it
    /// announced than one page could have grown it (a server that lies, or
    /// pages for ever).
    #[error("a page's event {cursor} lies past its head {head}")]
    HistoryPastHead {
        /// The event's cursor.
        cursor: u64,
        /// The head the page announced.
        head: u64,
    },
    /// One restore or repair read more than its budget
    /// ([`Config::restore_max_events`](super::Config::restore_max_events),
    /// [`Config::restore_max_bytes`](super::Config::restore_max_bytes)).
    #[error("the history read exceeds its budget ({events} events, {bytes} bytes)")]
    HistoryTooLarge {
        /// Events read.
        events: u64,
        /// Bytes of page bodies read.
        bytes: u64,
    },
    /// The stream ended before it carried anything after its `hello` (or
    /// before its `hello`): a failed connection, retried with a growing
    /// backoff.
    #[error("the stream ended before it carried an event after its hello")]
    StreamEndedEarly,
    /// No event on the stream for too long.
    #[error("stream stalled for {idle_ms} ms")]
    Stalled {
        /// Milliseconds since the last event (or the stream's opening).
        idle_ms: u64,
    },
    /// A body read whole grew past its bound
    /// ([`Config::max_body_bytes`](super::Config::max_body_bytes)).
    #[error("the answer's body exceeds {limit} bytes")]
    BodyTooLarge {
        /// The bound, in bytes.
        limit: u64,
    },
    /// A request got no answer in time.
    #[error("request timed out after {after_ms} ms")]
    Timeout {
        /// Milliseconds waited.
        after_ms: u64,
    },
    /// The stored value could not be used.
    #[error("corrupt storage: {0}")]
    CorruptStorage(String),
    /// The transport failed (fetch rejected, body errored).
    #[error("network error: {0}")]
    Network(String),
    /// The server answered, but without CORS headers for this page's
    /// origin (the page's origin), so the browser hid the answer: the
    /// executor's probe of the same URL without CORS got one. Retried like
    /// a network error (the server may be restarted with the origin).
    #[error("the server answered, but not to this page's origin {0} (no CORS headers for it): start it with --allow-origin {0}")]
    Cors(String),
    /// The application's credentials source failed (`getToken()` threw,
    /// rejected or returned no string); code `unauthorized`.
    #[error("getToken failed: {0}")]
    Credentials(String),
    /// The client was closed; nothing more is sent.
    #[error("the client is closed")]
    Closed,
    /// Writes go to a session: this client follows another target.
    #[error("writes need a session client")]
    NotASession,
    /// The storage failed or did not answer; state is kept in memory.
    #[error("storage unavailable, keeping state in memory: {0}")]
    StorageUnavailable(String),
    /// A queued message was not accepted within `Config::outbox_max_age_ms`
    /// of its sending: it is not sent long after the user meant it.
    #[error("the message was not sent within {max_age_ms} ms")]
    Expired {
        /// The bound.
        max_age_ms: u64,
    },
    /// The application discarded the message before the runtime accepted it.
    #[error("the message was discarded")]
    Discarded,
    /// Another client holds the claim of the message (`Action::Post`'s
    /// `claim`): it is sending it. The outbox waits; never shown.
    #[error("another client is sending this message")]
    Claimed,
    /// The question ended (answered elsewhere, declined, its turn ended)
    /// before this answer reached the runtime: the runtime's own code for
    /// an answer to a closed question.
    #[error("the question was closed before the answer reached the runtime")]
    QuestionClosed,
    /// Another answer to this question is queued or being sent.
    #[error("another answer to this question is being sent")]
    AnswerPending,
}

impl CoreError {
    /// Stable machine-readable code. An HTTP error keeps the server's own
    /// code (the body's `error`, e.g. `not_found`), its status beside it in
    /// [`status`](Self::status); `http_status` when the body named none.
    pub fn code(&self) -> &str {
        match self {
            CoreError::HttpStatus { code, .. } if !code.is_empty() => code,
            CoreError::BadJson(_) => "bad_json",
            CoreError::EventTooLarge { .. } => "event_too_large",
            CoreError::InvalidCursor(_) => "invalid_cursor",
            CoreError::CursorAhead(_) => "cursor_ahead",
            CoreError::Unauthorized { .. } => "unauthorized",
            CoreError::HttpStatus { .. } => "http_status",
            CoreError::WrongContentType(_) => "wrong_content_type",
            CoreError::EpochChanged { .. } => "epoch_changed",
            CoreError::HistoryMismatch { .. } => "history_mismatch",
            CoreError::PageNotAdvancing { .. } => "page_not_advancing",
            CoreError::PageOverLimit { .. } => "page_over_limit",
            CoreError::HistoryPastHead { .. } => "history_past_head",
            CoreError::HistoryTooLarge { .. } => "history_too_large",
            CoreError::StreamEndedEarly => "stream_ended_early",
            CoreError::Stalled { .. } => "stalled",
            CoreError::Timeout { .. } => "timeout",
            CoreError::BodyTooLarge { .. } => "body_too_large",
            CoreError::CorruptStorage(_) => "corrupt_storage",
            CoreError::Network(_) => "network",
            CoreError::Cors(_) => "cors",
            CoreError::Credentials(_) => "unauthorized",
            CoreError::Closed => "closed",
            CoreError::NotASession => "invalid_options",
            CoreError::StorageUnavailable(_) => "storage_fallback",
            CoreError::Expired { .. } => "expired",
            CoreError::Discarded => "discarded",
            CoreError::Claimed => "claimed",
            CoreError::QuestionClosed => "question_closed",
            CoreError::AnswerPending => "answer_pending",
        }
    }

    /// The HTTP status behind the error, when there is one.
    pub fn status(&self) -> Option<u16> {
        match self {
            CoreError::Unauthorized { status, .. } | CoreError::HttpStatus { status, .. } => {
                Some(*status)
            }
            CoreError::InvalidCursor(_) => Some(400),
            CoreError::CursorAhead(_) | CoreError::QuestionClosed => Some(409),
            _ => None,
        }
    }

    /// The serialisable summary used in notices and status.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo {
            code: self.code().to_owned(),
            message: self.to_string(),
            status: self.status(),
        }
    }
}

/// A [`CoreError`] flattened for the application: code, text, HTTP status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Stable code, see [`CoreError::code`].
    pub code: String,
    /// Human text.
    pub message: String,
    /// HTTP status, when the error came from a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

impl From<&CoreError> for ErrorInfo {
    fn from(e: &CoreError) -> Self {
        e.info()
    }
}

/// `": reason"`, or nothing when the server gave no reason.
fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        ": ".to_owned() + reason
    }
}
