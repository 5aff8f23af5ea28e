//! Turn boundaries: where a page of a session's history may start so that
//! a client can fold it alone and put it before what it already shows
//! (docs/protocol.md §4.1, the newest page first).
//!
//! A boundary `S` (the page holds the events after `S`) is the log's start
//! or a turn's end (`turn.completed`, `.failed`, `.cancelled`) such that no
//! event after it belongs to a turn, a tool call or a question begun at or
//! before it. A turn begins with its user's `message.committed` (written
//! when the message is accepted), or with its `turn.started` where that
//! comes first (a runtime may write a turn's start before its input
//! message), a call with `tool.started`, a question with `question.asked`. A turn's end comes after its calls' and
//! questions' ends (the agent's cancel, startup recovery), so nothing after
//! a boundary can refer back across it later either.

use std::collections::HashSet;

use replay_core::protocol::{Event, Role, Scope};

use super::{Reads, StoreResult};

/// Events read back from a page's end looking for a boundary, beyond the
/// page's own size: a longer turn starts the page at the log's beginning
/// (it is then read forward in pages, as without the extension).
pub const BOUNDARY_SCAN_MAX: u64 = 10_000;

/// Events read per query while walking back (bounded memory per read).
const CHUNK: u64 = 64;

/// What the events after a point still refer to, walking back.
#[derive(Default)]
struct Walk {
    /// `(kind, id)` of turns (`t`), calls (`c`) and questions (`q`) used
    /// after the point and not begun after it.
    open: HashSet<(u8, String)>,
    /// User messages passed: a `turn.started` before its own input message
    /// is where that turn begins.
    inputs: HashSet<String>,
}

impl Walk {
    /// Takes one event, walking back (the one just before what was taken).
    fn take(&mut self, event: &Event) {
        let mut used = |kind, id: &str| {
            self.open.insert((kind, id.to_owned()));
        };
        let begun = match event {
            Event::MessageCommitted(m) if m.role == Role::User => {
                self.inputs.insert(m.message_id.clone());
                Some((b't', &m.turn_id))
            }
            Event::MessageCommitted(m) => {
                used(b't', &m.turn_id);
                None
            }
            Event::TurnStarted(t) if self.inputs.contains(&t.input_message_id) => {
                Some((b't', &t.turn_id))
            }
            Event::TurnStarted(t) => {
                used(b't', &t.turn_id);
                None
            }
            Event::TurnCompleted(t) | Event::TurnCancelled(t) => {
                used(b't', &t.turn_id);
                None
            }
            Event::TurnFailed(t) => {
                used(b't', &t.turn_id);
                None
            }
            Event::ToolStarted(t) => {
                used(b't', &t.turn_id);
                Some((b'c', &t.call_id))
            }
            Event::ToolCompleted(t) => {
                used(b't', &t.turn_id);
                used(b'c', &t.call_id);
                None
            }
            Event::QuestionAsked(q) => {
                used(b't', &q.turn_id);
                Some((b'q', &q.question_id))
            }
            Event::QuestionAnswered(q) => {
                used(b'q', &q.question_id);
                None
            }
            Event::QuestionDeclined(q) => {
                used(b'q', &q.question_id);
                None
            }
            _ => None,
        };
        if let Some((kind, id)) = begun {
            self.open.remove(&(kind, id.clone()));
        }
    }
}

fn is_turn_end(event: &Event) -> bool {
    matches!(
        event,
        Event::TurnCompleted(_) | Event::TurnFailed(_) | Event::TurnCancelled(_)
    )
}

/// The newest boundary at least `at_least` events before `end` (0 when
/// there is none within [`BOUNDARY_SCAN_MAX`] more).
pub(super) fn find<R: Reads + ?Sized>(
    reads: &R,
    session_id: &str,
    end: u64,
    at_least: u64,
) -> StoreResult<u64> {
    let mut walk = Walk::default();
    let floor = end.saturating_sub(at_least.saturating_add(BOUNDARY_SCAN_MAX));
    let mut hi = end;
    while hi > floor {
        let lo = hi.saturating_sub(CHUNK).max(floor);
        let chunk = reads.page(Scope::Session, session_id, lo, (hi - lo) as usize)?;
        for env in chunk.iter().rev() {
            let Some(seq) = env.seq else { continue };
            if seq > hi {
                continue;
            }
            if end - seq >= at_least && walk.open.is_empty() && is_turn_end(&env.event) {
                return Ok(seq);
            }
            walk.take(&env.event);
        }
        hi = lo;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ty: &str, data: &str) -> Event {
        Event::decode(ty, Some(data)).unwrap()
    }

    #[test]
    fn a_call_or_question_used_later_keeps_its_beginning_open() {
        let mut w = Walk::default();
        w.take(&ev(
            "question.answered",
            r#"{"question_id":"q","answer":"y"}"#,
        ));
        w.take(&ev(
            "tool.completed",
            r#"{"turn_id":"t","call_id":"c","status":"ok","output":""}"#,
        ));
        assert_eq!(w.open.len(), 3);
        w.take(&ev(
            "question.asked",
            r#"{"turn_id":"t","question_id":"q","prompt":"?","options":[]}"#,
        ));
        w.take(&ev(
            "tool.started",
            r#"{"turn_id":"t","call_id":"c","name":"x","input":null}"#,
        ));
        assert_eq!(w.open.len(), 1, "the turn is still open");
        w.take(&ev(
            "message.committed",
            r#"{"message_id":"m","turn_id":"t","role":"user","text":""}"#,
        ));
        assert!(w.open.is_empty());
    }

    #[test]
    fn a_turn_started_before_its_input_message_begins_there() {
        // Walking back over turn.started, the user's message, the reply and
        // the turn's end: the turn is not open before its start.
        let mut w = Walk::default();
        w.take(&ev("turn.completed", r#"{"turn_id":"t"}"#));
        w.take(&ev(
            "message.committed",
            r#"{"message_id":"a","turn_id":"t","role":"assistant","text":""}"#,
        ));
        w.take(&ev(
            "message.committed",
            r#"{"message_id":"u","turn_id":"t","role":"user","text":""}"#,
        ));
        w.take(&ev(
            "turn.started",
            r#"{"turn_id":"t","input_message_id":"u"}"#,
        ));
        assert!(w.open.is_empty(), "{:?}", w.open);
        // A start whose input message comes before it (the usual order, and
        // a message queued during the turn before) keeps the turn open.
        w.take(&ev(
            "turn.started",
            r#"{"turn_id":"t2","input_message_id":"u2"}"#,
        ));
        assert_eq!(w.open.len(), 1);
    }
}
