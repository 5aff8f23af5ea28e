//! What the runtime said of the session itself: its title and whether it is
//! open, from `session.created`, `session.closed` and `session.failed`.

use crate::protocol::Event;
use crate::{wire_enum, wire_struct};

wire_enum! {
    /// Whether the session still runs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum SessionState {
        /// Created (or not said otherwise yet).
        Open = "open",
        /// Closed by the runtime (`session.closed`).
        Closed = "closed",
        /// Failed (`session.failed`, with its reason).
        Failed = "failed",
    }
}

// `wire_enum!` takes no `#[default]` on a variant.
#[allow(clippy::derivable_impls)]
impl Default for SessionState {
    fn default() -> Self {
        SessionState::Open
    }
}

wire_struct! {
    /// `view.session`: the title of the last `session.created`, and the
    /// state the last of `session.created`, `session.closed` and
    /// `session.failed` left (`reason` only when failed).
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SessionInfo {
        /// Human title (empty until a `session.created` names one).
        title: String = default,
        /// `open`, `closed` or `failed`.
        state: SessionState = default,
        /// Why it failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String> = default,
    }
}

impl SessionInfo {
    /// Applies a session lifecycle event, moving its strings; `false` when
    /// `event` is not one.
    pub(super) fn apply(&mut self, event: &mut Event) -> bool {
        match event {
            Event::SessionCreated(c) => {
                *self = SessionInfo {
                    title: std::mem::take(&mut c.title),
                    ..SessionInfo::default()
                };
            }
            Event::SessionClosed(_) => {
                self.state = SessionState::Closed;
                self.reason = None;
            }
            Event::SessionFailed(f) => {
                self.state = SessionState::Failed;
                self.reason = Some(std::mem::take(&mut f.reason));
            }
            _ => return false,
        }
        true
    }
}
