//! What a UI is told, and when: the one revision counter of everything a
//! snapshot shows (view, status, notices) and the application's notice
//! list; when subscribers are told is `pace.rs`'s.

use std::collections::VecDeque;

use serde::Serialize;

use super::error::ErrorInfo;
use super::page_update;
use super::types::{Notice, State, Status};
use crate::fold::REASON_BOOT_CHANGED;
use crate::protocol::REASON_WORKER_RESTART;

/// How many notices [`Machine::recent_notices`](super::Machine::recent_notices)
/// keeps (oldest dropped first).
pub const NOTICE_CAPACITY: usize = 50;

/// Something the application should know, in the JS `Notice` shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientNotice {
    /// Stable code, e.g. `cursor_reset`, `storage_fallback`, `restored`.
    pub code: String,
    /// Human text.
    pub message: String,
    /// When (`now` of the input that raised it).
    pub at: u64,
    /// HTTP status, when the notice came from an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

impl ClientNotice {
    fn new(code: &str, message: String, at: u64) -> Self {
        ClientNotice {
            code: code.to_owned(),
            message,
            at,
            status: None,
        }
    }

    fn from_error(code: &str, e: &ErrorInfo, at: u64) -> Self {
        ClientNotice {
            code: code.to_owned(),
            message: e.message.clone(),
            at,
            status: e.status,
        }
    }

    /// The application-facing form of a machine notice; `None` for retries,
    /// which the status already shows. The message is for a person: counts,
    /// not cursors; what happened, not reason codes.
    pub fn from_notice(n: &Notice, at: u64) -> Option<Self> {
        Some(match n {
            Notice::Restored {
                from_cursor,
                to_cursor,
            } => Self::new("restored", restored_words(*from_cursor, *to_cursor), at),
            Notice::GapRepaired {
                from_cursor,
                to_cursor,
            } => Self::new(
                "gap_repaired",
                events(to_cursor.saturating_sub(*from_cursor)) + " fetched again",
                at,
            ),
            Notice::EpochChanged { error } => Self::from_error("epoch_changed", error, at),
            Notice::RestoreFailed { error } => Self::from_error("restore_failed", error, at),
            Notice::CursorRejected { error, .. } => Self::from_error("cursor_reset", error, at),
            Notice::StorageDiscarded { error } => Self::from_error("corrupt_storage", error, at),
            Notice::StorageFallback { error } => Self::from_error("storage_fallback", error, at),
            Notice::FrameSkipped { error } | Notice::Failed { error } => {
                Self::from_error(&error.code, error, at)
            }
            Notice::TurnInterrupted { reason, .. } => {
                Self::new("turn_interrupted", interrupted_words(reason), at)
            }
            Notice::StreamMuted { tries, waited_ms } => {
                Self::new("stream_muted", muted_words(*tries, *waited_ms), at)
            }
            Notice::Retrying { .. } => return None,
        })
    }
}

/// "1 missed event", "3 missed events".
fn events(n: u64) -> String {
    let noun = if n == 1 {
        " missed event"
    } else {
        " missed events"
    };
    n.to_string() + noun
}

/// A first load says how much history came; a later one that it caught up.
fn restored_words(from: u64, to: u64) -> String {
    let n = to.saturating_sub(from);
    let noun = if n == 1 { " event" } else { " events" };
    if from == 0 {
        "loaded ".to_owned() + &n.to_string() + noun + " of history"
    } else {
        "caught up: ".to_owned() + &n.to_string() + noun + " loaded"
    }
}

/// What was seen of a muted stream, and what the operator can change.
fn muted_words(tries: u32, waited_ms: u64) -> String {
    "the live stream delivered no event within ".to_owned()
        + &waited_ms.to_string()
        + " ms on "
        + &tries.to_string()
        + " tries while JSON requests succeeded: following by polling (about every second \
        while an answer runs). A proxy is likely buffering or compressing text/event-stream: \
        have it honour `X-Accel-Buffering: no` (nginx: do not set proxy_ignore_headers \
        X-Accel-Buffering) or exclude text/event-stream from compression (nginx gzip_types)"
}

/// Why the shown answer stopped, in words (rule 7's two reasons).
fn interrupted_words(reason: &str) -> String {
    match reason {
        REASON_WORKER_RESTART => {
            "the answer in progress was interrupted: the runtime restarted".into()
        }
        REASON_BOOT_CHANGED => "the answer in progress can no longer be followed live: \
            the connection reached another runtime process; its end will show when it is saved"
            .into(),
        other => "the answer in progress was interrupted: ".to_owned() + other,
    }
}

/// The revision counter and the notice list (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Feed {
    revision: u64,
    notices: VecDeque<ClientNotice>,
    /// The view's `status` and `notices` changed since the pages' last
    /// update (`page_update.rs`'s bits, taken there).
    pub(super) page_parts: u32,
    /// The transport changed since the pages' last update: their
    /// diagnostics show it (taken by `page_update.rs`).
    pub(super) page_transport: bool,
    last_status: Option<Status>,
    /// Subscribers should be told (cleared by `take_notify`).
    due: bool,
    /// The pending view change was already counted.
    change_counted: bool,
}

impl Feed {
    pub(super) fn revision(&self) -> u64 {
        self.revision
    }

    pub(super) fn notices(&self) -> &VecDeque<ClientNotice> {
        &self.notices
    }

    fn bump(&mut self, notify: bool) {
        self.revision += 1;
        self.due |= notify;
    }

    /// A machine notice was raised.
    pub(super) fn notice(&mut self, n: &Notice, now: u64) {
        if let Some(n) = ClientNotice::from_notice(n, now) {
            if self.notices.len() == NOTICE_CAPACITY {
                self.notices.pop_front();
            }
            self.notices.push_back(n);
            self.page_parts |= page_update::NOTICES;
            self.bump(true);
        }
    }

    /// The status after an input. A snapshot always shows the current
    /// status, but the error-free connecting/restoring steps notify nobody:
    /// a restore is one notification (its completion, together with `live`).
    pub(super) fn status(&mut self, status: Status) {
        if self.last_status.as_ref() != Some(&status) {
            let quiet = matches!(status.state, State::Connecting | State::Restoring)
                && status.last_error.is_none();
            self.last_status = Some(status);
            self.page_parts |= page_update::STATUS;
            self.bump(!quiet);
        }
    }

    /// Whether `status` (given by parts) is the one last recorded: checked
    /// on every input, so nothing is cloned unless it changed.
    pub(super) fn status_unchanged(
        &self,
        state: State,
        since: u64,
        next_retry_at: Option<u64>,
        last_error: Option<&ErrorInfo>,
    ) -> bool {
        self.last_status.as_ref().is_some_and(|s| {
            s.state == state
                && s.since == since
                && s.next_retry_at == next_retry_at
                && s.last_error.as_ref() == last_error
        })
    }

    /// The transport changed (stream or polling): diagnostics show it, and
    /// a host that posts them to its pages posts on a notification.
    pub(super) fn transport_changed(&mut self) {
        self.page_transport = true;
        self.bump(true);
    }

    /// A view change is ready for `poll_view_change` (once per change).
    pub(super) fn view_changed(&mut self) {
        if !self.change_counted {
            self.change_counted = true;
            self.bump(true);
        }
    }

    /// `poll_view_change` took the change.
    pub(super) fn view_change_taken(&mut self) {
        self.change_counted = false;
    }

    /// Whether subscribers are due; clears the flag.
    pub(super) fn take_notify(&mut self) -> bool {
        std::mem::take(&mut self.due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_status_steps_count_but_do_not_notify() {
        let mut f = Feed::default();
        let status = |state| Status {
            state,
            since: 0,
            next_retry_at: None,
            last_error: None,
            history_incomplete: false,
        };
        f.status(status(State::Connecting));
        f.status(status(State::Restoring));
        assert_eq!(f.revision(), 2);
        assert!(!f.take_notify());
        f.status(status(State::Live));
        assert!(f.take_notify());
        f.status(status(State::Live));
        assert_eq!(f.revision(), 3, "unchanged status counts nothing");
        f.view_changed();
        f.view_changed();
        assert_eq!(f.revision(), 4, "one count per change taken");
        f.view_change_taken();
        f.view_changed();
        assert_eq!(f.revision(), 5);
    }
}
