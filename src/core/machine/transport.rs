//! Which transport follows the log (docs/protocol.md §6, rule 13): the live
//! stream, or polling the backlog's endpoint after the cursor when
//! something between the client and the runtime mutes the stream (a proxy
//! that buffers or compresses `text/event-stream`: its headers come, its
//! events never do) while the runtime's JSON answers still come.
//!
//! - A stream *try* is muted when it ends without an event after its
//!   `hello` for a reason a muting proxy gives: no first byte in time
//!   (`timeout`), or no event in time (`stalled`: bytes that never complete
//!   one do not count as one). Any other end (a network error, an HTTP
//!   status, a clean end, a flood of bytes past the body budget) starts the
//!   count again: that runtime is down, restarting or hostile, and is
//!   retried with backoff as before, never polled.
//! - After [`MUTED_TRIES`] muted tries in a row the machine polls once to
//!   check the runtime; when a page answers after the first muted try, it
//!   follows by polling (with one [`Notice::StreamMuted`]).
//! - Until a stream of this machine has shown its `hello`, a stream that
//!   may be muted must not leave the view blind: the machine polls beside
//!   it (a turn started just after the page loaded shows).
//! - Polls read the same endpoints as a restore (the replay endpoint of a
//!   session, whose `live_turn` keeps the overlay growing; event pages of
//!   other scopes) through the same dedupe, gap and snapshot rules. Their
//!   pace: [`POLL_BUSY_MS`] while a turn or a background task is open,
//!   else doubling up to [`POLL_IDLE_MAX_MS`] while nothing changes;
//!   [`HIDDEN_FACTOR`] times slower in a hidden page; a failed poll is
//!   retried with the fetch backoff (and `Retry-After`).
//! - While polling, the stream is tried again every [`REPROBE_MS`] and on
//!   `online` (after an `offline` or not) and on becoming visible; one that
//!   shows its `hello` (within the connect deadline: a later one is timed
//!   out) ends polling. On `online` a probe in flight (it has not shown its
//!   `hello`: one that did ended polling) is closed and replaced at once:
//!   it may have gone through the network that was left, where the proxy
//!   still muted it; it counts as no try and sets no re-probe time. Only
//!   a probe muted again, or one that fails while the polls fail too (the
//!   runtime is down), waits the re-probe period; one that ends otherwise
//!   (a network error, an HTTP status, a clean end: the shared connection
//!   was replaced or failed) is tried again with the stream's backoff, as
//!   any try.
//! - A probe stands in for the poll due next (skipped; the one after keeps
//!   its time): re-probing adds no request to the idle pace.
//! - Every stream try of a polling machine, and the first after `online`,
//!   visible or shown again, is a *probe* ([`Action::OpenStream`]'s
//!   `probe`): it waits out no backoff, so a shared connection waiting out
//!   its own opens at once for it (`share/connection.rs`).
//!
//! [`Action::OpenStream`]: super::Action::OpenStream

use super::error::CoreError;
use super::types::{FetchKind, Notice, State};
use super::{Machine, Mode};
use crate::protocol::TaskState;

/// Muted stream tries in a row before the machine follows by polling.
pub const MUTED_TRIES: u32 = 2;
/// The poll interval while a turn or a background task is open.
pub const POLL_BUSY_MS: u64 = 1_000;
/// The longest poll interval of a visible page with nothing open.
pub const POLL_IDLE_MAX_MS: u64 = 10_000;
/// How much slower a hidden page polls.
pub const HIDDEN_FACTOR: u64 = 5;
/// How often a polling machine tries the stream again.
pub const REPROBE_MS: u64 = 180_000;

/// The transport decision's inputs so far (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Link {
    /// Following by polling.
    polling: bool,
    /// Muted stream tries in a row.
    muted: u32,
    /// When the first of them was opened.
    muted_since: Option<u64>,
    /// The next stream try waits out no backoff (`online`, visible, shown
    /// again): a probe even when not polling.
    probe_next: bool,
    /// When a page last answered (2xx).
    json_ok_at: Option<u64>,
    /// The last page request failed (the runtime is down, not muted).
    json_failing: bool,
    /// A stream of this machine has shown its `hello`.
    hello_seen: bool,
    /// The page is hidden.
    hidden: bool,
    /// Polls in a row that moved nothing (the idle pace doubles).
    idle_polls: u32,
    /// When the next poll goes out.
    poll_at: Option<u64>,
    /// The cursor when the poll in flight went out.
    poll_from: Option<u64>,
}

impl Link {
    /// A stream try opened at `opened_at` ended; `muted`: the way a muting
    /// proxy ends one.
    pub(super) fn stream_ended(&mut self, muted: bool, opened_at: u64) {
        if muted {
            self.muted = self.muted.saturating_add(1);
            self.muted_since.get_or_insert(opened_at);
        } else if !self.polling {
            self.muted = 0;
            self.muted_since = None;
        }
    }

    /// Whether to follow by polling from now on: enough muted tries, and a
    /// page answered since they began.
    pub(super) fn should_poll(&self) -> bool {
        !self.polling
            && !self.json_failing
            && self.muted >= MUTED_TRIES
            && matches!((self.json_ok_at, self.muted_since), (Some(ok), Some(since)) if ok >= since)
    }

    /// Whether polls run: when following by polling, while no stream has
    /// shown its `hello`, and to check the runtime after muted tries.
    pub(super) fn wants_polls(&self) -> bool {
        self.polling || !self.hello_seen || self.muted >= MUTED_TRIES
    }
}

/// The wait before the next poll: `busy` (a turn or task open), the count
/// of idle polls in a row, and whether the page is hidden.
pub fn poll_interval(busy: bool, idle_polls: u32, hidden: bool) -> u64 {
    let visible = if busy {
        POLL_BUSY_MS
    } else {
        POLL_BUSY_MS
            .saturating_mul(1u64 << idle_polls.min(16))
            .min(POLL_IDLE_MAX_MS)
    };
    if hidden {
        visible.saturating_mul(HIDDEN_FACTOR)
    } else {
        visible
    }
}

/// Whether `err`, ending a stream that carried nothing after its `hello`,
/// is how a muting proxy ends one.
fn mutes(err: Option<&CoreError>) -> bool {
    matches!(
        err,
        Some(CoreError::Timeout { .. } | CoreError::Stalled { .. })
    )
}

impl Machine {
    /// Following by polling (diagnostics: `transport: "polling"`).
    pub fn polling(&self) -> bool {
        self.link.polling
    }

    /// A turn or a background task is open: polls go at the busy pace.
    fn busy(&self) -> bool {
        self.view.as_session().is_some_and(|s| {
            s.overlay().is_some()
                || s.tasks().background_wait.is_some()
                || s.tasks()
                    .tasks
                    .iter()
                    .any(|t| matches!(t.state, TaskState::Queued | TaskState::Running))
        })
    }

    /// Whether a poll may use the page slot now: following (a restore or
    /// repair reads its own pages), and polls wanted.
    fn polls_due(&self) -> bool {
        !self.halted() && self.mode == Mode::Follow && self.link.wants_polls()
    }

    /// The stream is being dropped for `err` (before `stream_retry` forgets
    /// it): counts muted tries. Returns the wait before the next try when
    /// polling and the probe was muted again, or failed while the polls
    /// fail too (the runtime is down: the polls back off and see it come
    /// back): the re-probe period, to replace the backoff's.
    pub(super) fn link_stream_ended(&mut self, err: Option<&CoreError>) -> Option<u64> {
        let (proven, opened_at) = match &self.stream {
            Some(s) => (s.proven, s.last_byte_at),
            None => (false, 0),
        };
        let muted = !proven && mutes(err);
        self.link.stream_ended(muted, opened_at);
        (self.link.polling && (muted || self.link.json_failing)).then_some(REPROBE_MS)
    }

    /// The next stream try waits out no backoff (its backoff was just
    /// reset for `online`, visible or shown again).
    pub(super) fn link_probe_next(&mut self) {
        self.link.probe_next = true;
    }

    /// Whether the stream try being opened is a probe (see the module docs).
    pub(super) fn link_probe(&mut self) -> bool {
        std::mem::take(&mut self.link.probe_next) || self.link.polling
    }

    /// A probe is a request to the runtime like a poll: it stands in for
    /// the poll due next, which is skipped (the one after it keeps its
    /// time), so that re-probing adds no request to the idle pace (at most
    /// 6 a minute) whenever the probe comes between two polls.
    pub(super) fn link_probe_opened(&mut self, now: u64) {
        if !self.link.polling || self.fetch.is_some() {
            return;
        }
        let wait = poll_interval(self.busy(), self.link.idle_polls, self.link.hidden);
        let due = self.link.poll_at.map_or(now, |t| t.max(now));
        self.link.poll_at = Some(due.saturating_add(wait));
    }

    /// `online` without an `offline` before it: a polling machine probes
    /// now, whether it was waiting for its next probe or one is in flight.
    /// A probe in flight has shown no `hello` (one that did ended polling)
    /// and may have gone through the network that was left, where the
    /// proxy still muted it: it is closed (`open_stream` aborts it, and
    /// its late answers are ignored as a stale id's), counting as no muted
    /// try and setting no re-probe time.
    pub(super) fn link_probe_now(&mut self, now: u64) {
        let hello_shown = self.stream.as_ref().is_some_and(|s| s.hello_seen);
        if self.link.polling && !hello_shown && !self.halted() {
            self.stream_backoff.reset();
            self.link_probe_next();
            self.open_stream(now);
        }
    }

    /// A stream showed its `hello` (in time: a late one was timed out).
    pub(super) fn link_hello(&mut self) {
        self.link.hello_seen = true;
        self.link.muted = 0;
        self.link.muted_since = None;
        if self.link.polling {
            self.link.polling = false;
            self.link.poll_at = None;
            self.feed.transport_changed();
        }
    }

    /// A page answered (2xx): the runtime's JSON comes through.
    pub(super) fn link_page_answered(&mut self, now: u64) {
        self.link.json_ok_at = Some(now);
        self.link.json_failing = false;
    }

    /// A page request failed or its answer was unusable.
    pub(super) fn link_page_failed(&mut self) {
        self.link.json_failing = true;
    }

    /// The page became hidden or visible.
    pub(super) fn link_hidden(&mut self, hidden: bool, now: u64) {
        self.link.hidden = hidden;
        if !hidden && self.link.polling {
            // Seen again: read what came meanwhile at once.
            self.link.idle_polls = 0;
            self.link.poll_at = Some(now);
        }
    }

    /// Called after every input: switches to polling when due, schedules
    /// the next poll when the slot is free, counts idle polls.
    pub(super) fn link_after_input(&mut self, now: u64) {
        if self.fetch.is_none() {
            if let Some(from) = self.link.poll_from.take() {
                if self.pos.cursor > from || self.busy() {
                    self.link.idle_polls = 0;
                } else {
                    self.link.idle_polls = self.link.idle_polls.saturating_add(1);
                }
            }
        }
        if self.link.should_poll() && !self.halted() {
            self.link.polling = true;
            self.feed.transport_changed();
            self.link.idle_polls = 0;
            self.link.poll_at = Some(now);
            self.notices.push_back(Notice::StreamMuted {
                tries: self.link.muted,
                waited_ms: self.cfg.connect_timeout_ms,
            });
            // The next stream try is a probe, at the re-probe period.
            if self.stream.is_none() {
                self.stream_retry_at = Some(now.saturating_add(REPROBE_MS));
            }
            self.stream_backoff.reset();
        }
        if !self.polls_due() {
            self.link.poll_at = None;
            return;
        }
        if self.fetch.is_none() && self.link.poll_at.is_none() {
            let wait = poll_interval(self.busy(), self.link.idle_polls, self.link.hidden);
            self.link.poll_at = Some(now.saturating_add(wait));
        }
    }

    /// When the next poll is due.
    pub(super) fn link_deadline(&self) -> Option<u64> {
        if self.polls_due() && self.fetch.is_none() {
            self.link.poll_at
        } else {
            None
        }
    }

    /// The timer: sends the poll when it is due.
    pub(super) fn link_timeout(&mut self, now: u64) {
        if !self.polls_due() || self.fetch.is_some() {
            return;
        }
        if self.link.poll_at.is_some_and(|t| now >= t) {
            self.link.poll_at = None;
            self.link.poll_from = Some(self.pos.cursor);
            let kind = if self.cfg.target.is_session() {
                FetchKind::Replay
            } else {
                FetchKind::Events
            };
            self.issue_fetch(kind, self.pos.cursor, false, 0, now);
        }
    }

    /// The state shown while following by polling: live, or backoff while
    /// a failed poll waits for its retry.
    pub(super) fn link_state(&self) -> Option<State> {
        if !self.link.polling || self.mode != Mode::Follow {
            return None;
        }
        let waiting = self
            .fetch
            .as_ref()
            .is_some_and(|f| f.id.is_none() && f.retry_at.is_some());
        Some(if waiting { State::Backoff } else { State::Live })
    }
}
