//! The fold of events into what the UI shows (PROTOCOL.md §5, §7).
//!
//! A session folds into a [`SessionView`] (committed items, live overlay,
//! tasks, prompts, interrupted turns); every other scope into a bounded
//! [`LogView`]. Each applied event costs O(1) amortised and records what it
//! touched in a [`ViewChange`], so the UI re-reads only the changed parts.

mod extras;
mod hash;
mod log;
mod overlay;
mod session;
mod session_info;

pub use extras::{Extra, EXTRAS_MAX};
pub use log::{LogEntry, LogView};
pub use overlay::{InterruptedTurn, Overlay};
pub use session::{SessionView, REASON_BOOT_CHANGED};
pub use session_info::{SessionInfo, SessionState};

use serde::{Deserialize, Serialize};

use crate::json::{FromJson, JsonError, Reader};
use crate::protocol::{Envelope, LiveTurn, TasksSnapshot};

/// The folded state of one machine's target. Serialised externally tagged
/// (`{"session": {...}}`): an internal tag would buffer the envelopes of a
/// log view, which keep their data as raw JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
// One view per client, never moved in bulk: boxing would only add a hop.
#[allow(clippy::large_enum_variant)]
pub enum View {
    /// A session.
    Session(SessionView),
    /// Any other scope, or the global list.
    Log(LogView),
}

impl View {
    /// An empty view of the right kind.
    pub fn empty(session: bool, log_capacity: usize) -> Self {
        if session {
            View::Session(SessionView::default())
        } else {
            View::Log(LogView::new(log_capacity))
        }
    }

    /// The session view, if this is one.
    pub fn as_session(&self) -> Option<&SessionView> {
        match self {
            View::Session(s) => Some(s),
            View::Log(_) => None,
        }
    }

    /// The log view, if this is one.
    pub fn as_log(&self) -> Option<&LogView> {
        match self {
            View::Log(l) => Some(l),
            View::Session(_) => None,
        }
    }

    /// Applies one durable event (the caller checked its position). Its
    /// strings may be moved into the view: the event is spent afterwards.
    pub fn apply_durable(&mut self, env: &mut Envelope, change: &mut ViewChange) {
        match self {
            View::Session(s) => s.apply_durable(env, change),
            View::Log(l) => l.apply_durable(env, change),
        }
    }

    /// Applies one transient event (the caller checked `after_seq`).
    pub fn apply_transient(&mut self, env: &Envelope, change: &mut ViewChange) {
        match self {
            View::Session(s) => s.apply_transient(env, change),
            View::Log(l) => l.apply_transient(env, change),
        }
    }

    /// The runtime run currently serving this view (from `hello` or replay);
    /// an overlay of another run is interrupted (rule 7).
    pub fn set_boot(&mut self, boot_id: &str, change: &mut ViewChange) {
        if let View::Session(s) = self {
            s.set_boot(boot_id, change);
        }
    }

    /// Puts the fold of an older page before this one (sessions only, see
    /// [`SessionView::prepend`]).
    pub fn prepend(&mut self, older: SessionView, change: &mut ViewChange) {
        if let View::Session(s) = self {
            s.prepend(older, change);
        }
    }

    /// Applies the `live_turn` and `tasks` of a replay's last page.
    pub fn apply_replay_tail(
        &mut self,
        boot_id: &str,
        live_turn: Option<&LiveTurn>,
        tasks: Option<&TasksSnapshot>,
        change: &mut ViewChange,
    ) {
        if let View::Session(s) = self {
            s.apply_replay_tail(boot_id, live_turn, tasks, change);
        }
    }
}

/// What changed since the last [`ViewChange`] was taken, so the UI can fetch
/// only those parts. Changes accumulate until polled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewChange {
    /// Committed items (or log entries) from this index on are new.
    pub items_appended_from: Option<usize>,
    /// Committed items updated in place (indices below `items_appended_from`;
    /// sorted, unique).
    pub items_updated: Vec<usize>,
    /// The live overlay changed (or appeared, or went away).
    pub overlay: bool,
    /// Tasks or `background_wait` changed.
    pub tasks: bool,
    /// Pending prompts changed.
    pub prompts: bool,
    /// Interrupted turns changed.
    pub interrupted: bool,
    /// The session's title or state changed.
    pub session: bool,
    /// An event of a type the fold does not know was kept.
    pub extras: bool,
    /// The outbox's pending messages changed (the machine's, not the
    /// fold's: a commit that ends one is in the same change as its item).
    pub pending: bool,
    /// Connection status changed.
    pub status: bool,
    /// A restore finished: repaint everything once.
    pub restore_completed: bool,
    /// The state was discarded (epoch change, cursor rejected): start over.
    pub reset: bool,
}

impl ViewChange {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ViewChange::default()
    }

    /// Records an appended item at `index`.
    pub fn appended(&mut self, index: usize) {
        match self.items_appended_from {
            Some(from) if from <= index => {}
            _ => self.items_appended_from = Some(index),
        }
    }

    /// Records an item updated in place.
    pub fn updated(&mut self, index: usize) {
        if self.items_appended_from.is_some_and(|from| index >= from) {
            return;
        }
        // Kept sorted and unique as it grows (a handful per input; a
        // general sort costs 3 KB of wasm).
        if let Err(at) = self.items_updated.binary_search(&index) {
            self.items_updated.insert(at, index);
        }
    }

    /// Merges a later change into this one.
    pub fn merge(&mut self, later: &ViewChange) {
        if let Some(i) = later.items_appended_from {
            self.appended(i);
        }
        for &i in &later.items_updated {
            self.updated(i);
        }
        self.overlay |= later.overlay;
        self.tasks |= later.tasks;
        self.prompts |= later.prompts;
        self.interrupted |= later.interrupted;
        self.session |= later.session;
        self.extras |= later.extras;
        self.pending |= later.pending;
        self.status |= later.status;
        self.restore_completed |= later.restore_completed;
        self.reset |= later.reset;
    }

    /// Drops updated indices now covered by the append.
    pub fn normalise(&mut self) {
        if let Some(from) = self.items_appended_from {
            self.items_updated.retain(|&i| i < from);
        }
    }
}

// Externally tagged, as serde writes it: `{"session": {...}}` or `{"log": {...}}`.
impl FromJson for View {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let mut view = None;
        r.object(&mut |r, key| {
            view = Some(match key {
                "session" => View::Session(SessionView::read(r)?),
                "log" => View::Log(LogView::read(r)?),
                _ => return Err(JsonError::Type(r.pos(), "a view kind")),
            });
            Ok(())
        })?;
        view.ok_or(JsonError::Missing("session"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn view_change_merges_appends_and_drops_covered_updates() {
        let mut a = ViewChange::default();
        assert!(a.is_empty());
        a.updated(2);
        a.updated(7);
        a.updated(2);
        let mut b = ViewChange::default();
        b.appended(5);
        b.appended(9);
        b.tasks = true;
        a.merge(&b);
        a.normalise();
        assert_eq!(a.items_appended_from, Some(5));
        assert_eq!(a.items_updated, vec![2], "7 is inside the appended range");
        assert!(a.tasks && !a.overlay);
    }
}
