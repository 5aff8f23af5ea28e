//! The barrier's buffer (rules 2, 4, 10): live frames held while a restore
//! or repair reads pages, and its bound. Up to `Config::buffer_limit` frames
//! are held as they come; beyond it (a restore or repair that keeps failing
//! while the stream goes on) each frame is reduced to a summary and only the
//! newest summary of each kind is kept, so nothing piles up however long the
//! barrier stays up.

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

impl Machine {
    /// Rule 10 and the barrier's bound. Up to [`Config::buffer_limit`]
    /// frames are held as they come. Beyond it (a restore or repair that
    /// keeps failing while the stream goes on) nothing piles up: droppable
    /// events are dropped (counted), and every other frame is reduced to its
    /// summary (see [`overflow_form`](Self::overflow_form)), of which only the
    /// newest of each kind is held, at the end. So at most `buffer_limit +
    /// OVERFLOW_KINDS` frames are held, whatever the stream sends.
    ///
    /// [`Config::buffer_limit`]: super::Config
    pub(super) fn hold(&mut self, frame: Frame) {
        let limit = self.cfg.buffer_limit;
        if self.buffer.len() < limit {
            self.buffer.push_back(frame);
            return;
        }
        let Some(mut frame) = self.overflow_form(frame) else {
            self.counters.droppable_dropped += 1;
            return;
        };
        let kind = overflow_kind(&frame);
        let same = (limit..self.buffer.len())
            .find(|&i| self.buffer.get(i).is_some_and(|f| overflow_kind(f) == kind));
        match same.and_then(|i| self.buffer.remove(i)) {
            // Both say "missing up to here": the higher mark covers both.
            Some(Frame::LiveFrom(old)) => {
                if let Frame::LiveFrom(new) = &mut frame {
                    *new = (*new).max(old);
                }
            }
            Some(_) => {}
            None if self.buffer.len() - limit >= OVERFLOW_KINDS => {
                // More kinds of unknown critical transients than kept.
                self.counters.droppable_dropped += 1;
                return;
            }
            None => {}
        }
        self.buffer.push_back(frame);
    }

    /// Frames held behind the barrier (restore or repair) right now: at most
    /// [`Config::buffer_limit`](super::Config) plus one summary per kind.
    pub fn held_frames(&self) -> usize {
        self.buffer.len()
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
