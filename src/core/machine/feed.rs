//! What a UI is told, and when: the one revision counter of everything a
//! snapshot shows (view, status, notices), the application's notice list,
//! and the pacing of subscriber calls. The browser layer only delivers.

use std::collections::VecDeque;

use serde::Serialize;

use super::error::ErrorInfo;
use super::types::{Notice, State, Status};

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
    /// which the status already shows.
    pub fn from_notice(n: &Notice, at: u64) -> Option<Self> {
        let range = |what: &str, from: u64, to: u64| {
            what.to_owned() + " from cursor " + &from.to_string() + " to " + &to.to_string()
        };
        Some(match n {
            Notice::Restored {
                from_cursor,
                to_cursor,
            } => Self::new("restored", range("restored", *from_cursor, *to_cursor), at),
            Notice::GapRepaired {
                from_cursor,
                to_cursor,
            } => Self::new(
                "gap_repaired",
                range("gap repaired", *from_cursor, *to_cursor),
                at,
            ),
            Notice::EpochChanged { error } => Self::from_error("epoch_changed", error, at),
            Notice::CursorRejected { error, .. } => Self::from_error("cursor_reset", error, at),
            Notice::StorageDiscarded { error } => Self::from_error("corrupt_storage", error, at),
            Notice::StorageFallback { error } => Self::from_error("storage_fallback", error, at),
            Notice::FrameSkipped { error } | Notice::Failed { error } => {
                Self::from_error(&error.code, error, at)
            }
            Notice::TurnInterrupted { turn_id, reason } => Self::new(
                "turn_interrupted",
                turn_id.clone() + " interrupted: " + reason,
                at,
            ),
            Notice::Retrying { .. } => return None,
        })
    }
}

/// The revision counter and the notice list (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Feed {
    revision: u64,
    notices: VecDeque<ClientNotice>,
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

/// When subscribers are told about a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// At most once per animation frame (`setTimeout(0)` where there is none).
    Frame,
    /// Right after the input that changed something.
    Sync,
    /// At most once per this many milliseconds.
    Every(u32),
}

/// When the subscribers of a due change are called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotifyAt {
    /// Now, synchronously.
    Now,
    /// At the next animation frame.
    NextFrame,
    /// After this many milliseconds.
    After(u64),
}

/// Paces subscriber calls: at most one call in flight, spaced as
/// [`Notify`] says. Pure: the caller passes the time.
///
/// With [`Notify::Frame`] while animation frames run, it also paces the
/// live stream's input: the executor holds the body's chunks until the next
/// frame and delivers them together, inside that frame, where the
/// subscribers are then called at once ([`schedule_in_frame`]). A UI shows a
/// chunk no earlier than that frame anyway; one delivery per frame costs one
/// crossing into the machine instead of one per chunk (a paced answer sends
/// each event in its own chunk, several per frame), and no frame callback
/// of its own (docs/benchmarks.md). Where no frames run (a hidden page, a
/// Worker), chunks are delivered as they come: the stall watchdog and the
/// stored state keep up. A frame awaited is awaited at most
/// [`FRAME_WAIT_MS`](Self::FRAME_WAIT_MS): a page can be visible and still
/// run none (an iframe styled `display: none`).
///
/// [`schedule_in_frame`]: NotifyPacer::schedule_in_frame
#[derive(Clone, Debug)]
pub struct NotifyPacer {
    mode: Notify,
    scheduled: bool,
    last: u64,
}

impl NotifyPacer {
    /// The longest an executor waits for an animation frame (to deliver held
    /// chunks, or to call the subscribers at [`NotifyAt::NextFrame`]) while
    /// frames should run, before it acts as if one came: a visible page
    /// normally runs one every 16.7 ms, but an iframe styled
    /// `display: none` runs none and would otherwise hold chunks, without
    /// bound, and never notify.
    pub const FRAME_WAIT_MS: u32 = 100;

    /// How long to wait for the next animation frame, given whether frames
    /// run (as for [`holds_chunks`](Self::holds_chunks)): at most
    /// [`FRAME_WAIT_MS`](Self::FRAME_WAIT_MS) on a visible page; on a
    /// hidden one until it shows again (`None`: it shows nothing before,
    /// and its timers run once a second at best).
    pub fn frame_wait(frames_run: bool) -> Option<u32> {
        frames_run.then_some(Self::FRAME_WAIT_MS)
    }

    /// A pacer for `mode`.
    pub fn new(mode: Notify) -> Self {
        NotifyPacer {
            mode,
            scheduled: false,
            last: 0,
        }
    }

    /// Whether the live stream's chunks are held until the next animation
    /// frame and delivered there together (see the type's docs), given
    /// whether frames run (`requestAnimationFrame` exists and the page is
    /// visible; the executor asks at start and after each page lifecycle
    /// event: a hidden or frozen page runs none).
    pub fn holds_chunks(&self, frames_run: bool) -> bool {
        self.mode == Notify::Frame && frames_run
    }

    /// Like [`schedule`](Self::schedule), for a change made by an input
    /// delivered inside an animation frame: with [`Notify::Frame`] that
    /// frame is the one to call the subscribers in, now.
    pub fn schedule_in_frame(&mut self, now: u64) -> Option<NotifyAt> {
        if self.mode == Notify::Frame && !self.scheduled {
            return Some(NotifyAt::Now);
        }
        self.schedule(now)
    }

    /// Something is due at `now`: when to call the subscribers, or `None`
    /// when a call is already scheduled (it will see this change too).
    pub fn schedule(&mut self, now: u64) -> Option<NotifyAt> {
        if self.scheduled {
            return None;
        }
        let at = match self.mode {
            Notify::Sync => return Some(NotifyAt::Now),
            Notify::Frame => NotifyAt::NextFrame,
            Notify::Every(ms) => {
                NotifyAt::After(self.last.saturating_add(ms.into()).saturating_sub(now))
            }
        };
        self.scheduled = true;
        Some(at)
    }

    /// The subscribers are being called at `now`.
    pub fn delivered(&mut self, now: u64) {
        self.scheduled = false;
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_wait_for_the_frame_only_while_frames_run() {
        let f = NotifyPacer::new(Notify::Frame);
        assert!(f.holds_chunks(true));
        assert!(
            !f.holds_chunks(false),
            "a hidden page gets chunks as they come"
        );
        assert_eq!(
            NotifyPacer::frame_wait(true),
            Some(100),
            "a visible page waits 100 ms at most"
        );
        assert_eq!(
            NotifyPacer::frame_wait(false),
            None,
            "a hidden page waits until it shows"
        );
        for mode in [Notify::Sync, Notify::Every(50)] {
            let p = NotifyPacer::new(mode);
            assert!(
                !p.holds_chunks(true),
                "{mode:?} delivers chunks as they come"
            );
        }
    }

    #[test]
    fn an_input_delivered_in_a_frame_notifies_in_that_frame() {
        let mut f = NotifyPacer::new(Notify::Frame);
        assert_eq!(f.schedule_in_frame(0), Some(NotifyAt::Now));
        f.delivered(0);
        // A frame call already asked for (by a timer's input) is kept.
        assert_eq!(f.schedule(1), Some(NotifyAt::NextFrame));
        assert_eq!(f.schedule_in_frame(2), None);
        let mut e = NotifyPacer::new(Notify::Every(100));
        assert_eq!(e.schedule_in_frame(0), Some(NotifyAt::After(100)));
    }

    #[test]
    fn a_pacer_keeps_one_call_in_flight_and_spaces_calls() {
        let mut p = NotifyPacer::new(Notify::Every(100));
        assert_eq!(p.schedule(1_000), Some(NotifyAt::After(0)));
        assert_eq!(p.schedule(1_001), None, "already scheduled");
        p.delivered(1_010);
        assert_eq!(p.schedule(1_050), Some(NotifyAt::After(60)));
        p.delivered(1_110);
        assert_eq!(p.schedule(5_000), Some(NotifyAt::After(0)));
        let mut f = NotifyPacer::new(Notify::Frame);
        assert_eq!(f.schedule(0), Some(NotifyAt::NextFrame));
        assert_eq!(f.schedule(0), None);
        let mut s = NotifyPacer::new(Notify::Sync);
        assert_eq!(s.schedule(0), Some(NotifyAt::Now));
        assert_eq!(s.schedule(0), Some(NotifyAt::Now));
    }

    #[test]
    fn quiet_status_steps_count_but_do_not_notify() {
        let mut f = Feed::default();
        let status = |state| Status {
            state,
            since: 0,
            next_retry_at: None,
            last_error: None,
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
