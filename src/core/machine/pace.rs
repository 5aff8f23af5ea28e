//! When subscribers are told, and whether the live stream's chunks wait for
//! an animation frame: decided here, carried out by the executor.
//!
//! Inputs: whether frames run ([`Machine::handle_frames`]), a frame began
//! ([`Machine::handle_frame`]), the body reader started holding chunks
//! ([`Machine::handle_chunks_held`]), and the timer. Outputs: [`Pace`]
//! values from [`Machine::poll_pace`], and the frame-overdue and paced
//! notification deadlines in [`Machine::poll_timeout`].
//!
//! With [`Notify::Frame`] while frames run, the live stream's chunks wait
//! for the next frame and are delivered together inside it, where the
//! subscribers are then called: a UI shows a chunk no earlier than that
//! frame anyway, and one delivery per frame costs one crossing into the
//! machine instead of one per chunk (a paced answer sends each event in its
//! own chunk, several per frame; docs/benchmarks.md). Where no frames run
//! (a hidden page, a Worker) chunks are delivered as they come: the stall
//! watchdog and the stored state keep up. A frame is awaited at most
//! [`FRAME_WAIT_MS`] while frames should run: a page can be visible and
//! still run none (an iframe styled `display: none`).

use std::collections::VecDeque;

use super::Machine;

/// The longest a frame is awaited while frames run, before the machine acts
/// as if one came: a visible page runs one every 16.7 ms, but an iframe
/// styled `display: none` runs none and would otherwise hold chunks, without
/// bound, and never notify.
pub const FRAME_WAIT_MS: u64 = 100;

/// When subscribers are told about a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Notify {
    /// At most once per animation frame (at once, as a timer, where there
    /// are none).
    Frame,
    /// Right after the input that changed something.
    Sync,
    /// At most once per this many milliseconds.
    Every(u32),
}

/// Whether the executor's context runs animation frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frames {
    /// A visible document with `requestAnimationFrame`.
    Running,
    /// Frames exist but none run now (a hidden page): one asked for comes
    /// when the page shows; nothing waits for it meanwhile but a
    /// notification.
    Paused,
    /// No frames in this context (a Worker).
    Absent,
}

/// What the executor does about pacing, from [`Machine::poll_pace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// From now on the body reader holds the live stream's chunks until
    /// [`ReleaseChunks`](Pace::ReleaseChunks) or until they reach this many
    /// bytes ([`Config::max_held_bytes`](super::Config::max_held_bytes);
    /// it reports the first one held through
    /// [`Machine::handle_chunks_held`]), or delivers them as they come (0).
    HoldChunks(usize),
    /// Call [`Machine::handle_frame`] in the next animation frame.
    RequestFrame,
    /// Deliver the held chunks now, as the body's next inputs.
    ReleaseChunks,
    /// Call the subscribers now.
    Notify,
}

/// A notification waiting for its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Due {
    /// At the next frame.
    Frame,
    /// At this time.
    At(u64),
}

/// The pacing state of one machine.
#[derive(Debug)]
pub(super) struct Pacer {
    mode: Notify,
    frames: Frames,
    /// What `HoldChunks` last said.
    holding: bool,
    /// Bytes the reader may hold ([`Config::max_held_bytes`](super::Config::max_held_bytes)).
    max_held: usize,
    /// The body reader holds chunks.
    chunks_held: bool,
    /// A `RequestFrame` is out, since then.
    frame_asked_at: Option<u64>,
    /// A notification is scheduled.
    due: Option<Due>,
    /// When the subscribers were last called.
    last_notified: u64,
    /// A frame (or its overdue stand-in) is being run: a change it makes is
    /// notified at once. Ends when the outputs are drained.
    in_frame: bool,
    out: VecDeque<Pace>,
}

impl Pacer {
    pub(super) fn new(mode: Notify, max_held: usize) -> Self {
        Pacer {
            mode,
            frames: Frames::Absent,
            holding: false,
            max_held,
            chunks_held: false,
            frame_asked_at: None,
            due: None,
            last_notified: 0,
            in_frame: false,
            out: VecDeque::new(),
        }
    }

    fn frames(&mut self, frames: Frames, now: u64) {
        if self.frames == Frames::Running && frames != Frames::Running {
            // A frame asked for while they ran is asked for again when
            // wanted (the executor's request replaces the old one): one
            // already scheduled by the browser may run before the page
            // reports it hidden.
            self.frame_asked_at = None;
            if frames == Frames::Paused && self.due == Some(Due::Frame) {
                self.ask_frame(now);
            }
        }
        self.frames = frames;
        let hold = self.mode == Notify::Frame && frames == Frames::Running;
        if hold != self.holding {
            self.holding = hold;
            self.out
                .push_back(Pace::HoldChunks(if hold { self.max_held } else { 0 }));
            if !hold && std::mem::take(&mut self.chunks_held) {
                self.out.push_back(Pace::ReleaseChunks);
            }
        }
        if frames == Frames::Absent && self.due == Some(Due::Frame) {
            // No frame will come: notify as a timer would.
            self.due = Some(Due::At(0));
        }
    }

    fn ask_frame(&mut self, now: u64) {
        if self.frame_asked_at.is_none() {
            self.frame_asked_at = Some(now);
            self.out.push_back(Pace::RequestFrame);
        }
    }

    fn chunks_held(&mut self, now: u64) {
        if self.holding && !self.chunks_held {
            self.chunks_held = true;
            self.ask_frame(now);
        }
    }

    /// A frame began, or the one awaited is overdue.
    fn frame(&mut self) {
        self.frame_asked_at = None;
        self.in_frame = true;
        if std::mem::take(&mut self.chunks_held) {
            self.out.push_back(Pace::ReleaseChunks);
        }
    }

    /// Something changed at `now`: schedule the subscribers' call.
    fn changed(&mut self, now: u64) {
        if self.due.is_some() || self.out.contains(&Pace::Notify) {
            return;
        }
        match self.mode {
            Notify::Sync => self.out.push_back(Pace::Notify),
            Notify::Frame if self.in_frame => self.out.push_back(Pace::Notify),
            // No frame will come: a timer at once, so that what arrives
            // together is told together.
            Notify::Frame if self.frames == Frames::Absent => self.due = Some(Due::At(now)),
            Notify::Frame => {
                self.ask_frame(now);
                self.due = Some(Due::Frame);
            }
            Notify::Every(ms) => {
                self.due = Some(Due::At(self.last_notified.saturating_add(ms.into())));
            }
        }
    }

    fn deadline(&self) -> Option<u64> {
        let frame = self
            .frame_asked_at
            .filter(|_| self.frames == Frames::Running)
            .map(|t| t.saturating_add(FRAME_WAIT_MS));
        let due = match self.due {
            Some(Due::At(t)) => Some(t),
            _ => None,
        };
        match (frame, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn timeout(&mut self, now: u64) {
        let overdue = self.frames == Frames::Running
            && self
                .frame_asked_at
                .is_some_and(|t| now >= t.saturating_add(FRAME_WAIT_MS));
        if overdue {
            // As if the frame came: a visible page that runs none (an
            // iframe styled `display: none`) still gets its chunks.
            self.frame();
        }
        if matches!(self.due, Some(Due::At(t)) if now >= t) && !self.out.contains(&Pace::Notify) {
            self.out.push_back(Pace::Notify);
        }
    }

    fn poll(&mut self, changed: bool, now: u64) -> Option<Pace> {
        if changed {
            self.changed(now);
        }
        // A change waiting for this frame is told once what the frame
        // releases was delivered.
        let frame_due = self.in_frame && self.due == Some(Due::Frame);
        if frame_due
            && !self.out.contains(&Pace::ReleaseChunks)
            && !self.out.contains(&Pace::Notify)
        {
            self.out.push_back(Pace::Notify);
        }
        let next = self.out.pop_front();
        match next {
            Some(Pace::Notify) => {
                self.due = None;
                self.last_notified = now;
                self.in_frame = false;
            }
            None => self.in_frame = false,
            _ => {}
        }
        next
    }

    fn clear(&mut self) {
        self.out.clear();
        self.due = None;
        self.frame_asked_at = None;
    }
}

impl Machine {
    /// Whether frames run in the executor's context: reported at start and
    /// after every page lifecycle event.
    pub fn handle_frames(&mut self, frames: Frames, now: u64) {
        if !self.closed {
            self.pacer.frames(frames, now);
        }
    }

    /// An animation frame began (one [`Pace::RequestFrame`] asked for).
    pub fn handle_frame(&mut self, _now: u64) {
        if !self.closed {
            self.pacer.frame();
        }
    }

    /// The body reader holds a first chunk of the live stream (while
    /// [`Pace::HoldChunks`] said so): a frame is awaited to deliver it.
    pub fn handle_chunks_held(&mut self, now: u64) {
        if !self.closed {
            self.pacer.chunks_held(now);
        }
    }

    /// The next pacing step, after the other outputs of an input were
    /// taken; call until `None`. Carry each out before polling the next:
    /// [`Pace::ReleaseChunks`] delivers inputs that a [`Pace::Notify`]
    /// after it reports.
    pub fn poll_pace(&mut self, now: u64) -> Option<Pace> {
        if self.closed {
            return None;
        }
        let changed = self.feed.take_notify();
        self.pacer.poll(changed, now)
    }

    pub(super) fn pace_deadline(&self) -> Option<u64> {
        self.pacer.deadline()
    }

    pub(super) fn pace_timeout(&mut self, now: u64) {
        self.pacer.timeout(now);
    }

    pub(super) fn pace_clear(&mut self) {
        self.pacer.clear();
    }
}
