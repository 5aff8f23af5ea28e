//! The barrier's buffer (rules 2, 4, 10): live frames held while a restore
//! or repair reads pages, and its bounds. Up to `Config::buffer_limit` frames
//! of at most `Config::buffer_bytes_limit` bytes in all (as sent) are held as
//! they come; beyond either (a restore or repair that keeps failing while the
//! stream goes on) each frame is reduced to a summary and only the newest
//! summary of each kind is kept, so nothing piles up however long the
//! barrier stays up.

use std::collections::VecDeque;

use super::{Frame, Machine};
use crate::protocol::Event;

/// How many summaries (kinds of held frames) may follow the buffer's bound:
/// the missing-events marker, the delta marker, the two snapshot kinds, and
/// room for critical transients of types this client does not know.
const OVERFLOW_KINDS: usize = 8;

/// The kind of a frame held beyond the bound: one of each is kept.
fn overflow_kind(frame: &Frame) -> Option<&str> {
    match frame {
        Frame::LiveFrom(_) => None,
        Frame::Event(env) => Some(env.event.type_name()),
    }
}

/// The held frames in order, each with its size as sent (its SSE `data`),
/// and their total: the summaries held beyond the bound come last.
#[derive(Debug, Default)]
pub(super) struct Held {
    frames: VecDeque<(Frame, usize)>,
    bytes: usize,
    /// How many frames at the end are summaries.
    summaries: usize,
}

impl Held {
    pub(super) fn len(&self) -> usize {
        self.frames.len()
    }

    /// The `i`th held frame, oldest first (it keeps its size as sent).
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut Frame> {
        self.frames.get_mut(i).map(|(f, _)| f)
    }

    pub(super) fn clear(&mut self) {
        *self = Held::default();
    }

    fn push_back(&mut self, frame: Frame, bytes: usize, summary: bool) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.summaries += usize::from(summary);
        self.frames.push_back((frame, bytes));
    }

    /// The oldest frame and its size.
    pub(super) fn pop_front(&mut self) -> Option<(Frame, usize)> {
        let (frame, bytes) = self.frames.pop_front()?;
        self.bytes -= bytes;
        self.summaries = self.summaries.min(self.frames.len());
        Some((frame, bytes))
    }

    /// Puts a frame just popped back in front (as a whole frame).
    pub(super) fn push_front(&mut self, frame: Frame, bytes: usize) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.frames.push_front((frame, bytes));
    }

    /// Removes the summary of `kind`, if one is held.
    fn take_summary(&mut self, kind: Option<&str>) -> Option<Frame> {
        let from = self.frames.len() - self.summaries;
        let i = (from..self.frames.len()).find(|&i| {
            self.frames
                .get(i)
                .is_some_and(|(f, _)| overflow_kind(f) == kind)
        })?;
        let (frame, bytes) = self.frames.remove(i)?;
        self.bytes -= bytes;
        self.summaries -= 1;
        Some(frame)
    }
}

impl Machine {
    /// Rule 10 and the barrier's bounds. Up to [`Config::buffer_limit`]
    /// frames of at most [`Config::buffer_bytes_limit`] bytes in all (`bytes`:
    /// the frame's size as sent) are held as they come. Beyond either (a
    /// restore or repair that keeps failing while the stream goes on)
    /// nothing piles up: droppable events are dropped (counted), and every
    /// other frame is reduced to its summary (see
    /// [`overflow_form`](Self::overflow_form)), of which only the newest of
    /// each kind is held, at the end, until the frames before them are
    /// drained. So at most `buffer_limit + OVERFLOW_KINDS` frames, of
    /// `buffer_bytes_limit` bytes plus the summaries kept as they are (a
    /// snapshot: at most `max_event_size` each), are held, whatever the
    /// stream sends.
    ///
    /// [`Config::buffer_limit`]: super::Config
    /// [`Config::buffer_bytes_limit`]: super::Config
    pub(super) fn hold(&mut self, frame: Frame, bytes: usize) {
        // Once summaries are held, every frame is summarised until the drain
        // reaches them: they stay at the end.
        let held = &self.buffer;
        if held.summaries == 0
            && held.len() < self.cfg.buffer_limit
            && held.bytes.saturating_add(bytes) <= self.cfg.buffer_bytes_limit
        {
            self.buffer.push_back(frame, bytes, false);
            return;
        }
        let Some(mut frame) = self.overflow_form(frame) else {
            self.counters.droppable_dropped += 1;
            return;
        };
        match self.buffer.take_summary(overflow_kind(&frame)) {
            // Both say "missing up to here": the higher mark covers both.
            Some(Frame::LiveFrom(old)) => {
                if let Frame::LiveFrom(new) = &mut frame {
                    *new = (*new).max(old);
                }
            }
            Some(_) => {}
            None if self.buffer.summaries >= OVERFLOW_KINDS => {
                // More kinds of unknown critical transients than kept.
                self.counters.droppable_dropped += 1;
                return;
            }
            None => {}
        }
        let bytes = match frame {
            Frame::LiveFrom(_) => 0,
            Frame::Event(_) => bytes,
        };
        self.buffer.push_back(frame, bytes, true);
    }

    /// Frames held behind the barrier (restore or repair) right now: at most
    /// [`Config::buffer_limit`](super::Config) plus one summary per kind.
    pub fn held_frames(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes (as sent) of the frames held behind the barrier right now: at
    /// most [`Config::buffer_bytes_limit`](super::Config) plus the summaries.
    pub fn held_bytes(&self) -> usize {
        self.buffer.bytes
    }

    /// What a frame beyond the bound is held as; `None` drops it. Durable
    /// events, heartbeats and `hello` heads become a marker "events up to
    /// here are missing" (gap repair fills it); a `turn.delta` becomes an
    /// empty delta at the end of its text, which, applied later, marks the
    /// overlay stale unless it already holds that text (rule 6); snapshots
    /// and other critical transients are kept as they are (the newest of
    /// each kind wins); droppable events are dropped.
    fn overflow_form(&self, frame: Frame) -> Option<Frame> {
        let mut env = match frame {
            Frame::LiveFrom(head) => return Some(Frame::LiveFrom(head)),
            Frame::Event(env) => env,
        };
        if let Some(key) = self.durable_key(&env) {
            return Some(Frame::LiveFrom(key));
        }
        if !env.critical {
            return None;
        }
        match &mut env.event {
            Event::Heartbeat(hb) => return Some(Frame::LiveFrom(hb.head)),
            Event::TurnDelta(d) => {
                d.offset = d.offset.saturating_add(d.text.chars().count() as u64);
                d.text.clear();
            }
            _ => {}
        }
        Some(Frame::Event(env))
    }
}
