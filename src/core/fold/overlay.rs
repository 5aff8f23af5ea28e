//! The live overlay: the running turn shown over committed history (rule 6).

use crate::protocol::{LiveTool, LiveTurn, LiveTurnState, PendingQuestion, TurnDelta};

/// The uncommitted tail of a running turn. Never persisted: it is not
/// durable state, and a restore gets the runtime's own (`live_turn`).
#[derive(Clone, Debug, PartialEq)]
pub struct Overlay {
    /// The running turn.
    pub turn_id: String,
    /// The assistant message being written.
    pub message_id: String,
    /// Revision of the snapshot it came from (0 when built from deltas).
    pub rev: u64,
    /// What the turn is doing, when a snapshot said so.
    pub state: Option<LiveTurnState>,
    /// Text from `text_offset` on.
    pub text: TailText,
    /// Offset (Unicode scalar values) of `text`'s first character.
    pub text_offset: u64,
    /// Length of `text` in scalar values (cached: deltas align on it).
    pub text_len: u64,
    /// Tool calls of the turn.
    pub tools: Vec<LiveTool>,
    /// A question waiting for an answer, possibly not persisted yet.
    pub pending_question: Option<PendingQuestion>,
    /// A delta was missed; the text is incomplete until the next snapshot.
    pub stale: bool,
    /// The runtime run that produced it.
    pub boot_id: String,
}

/// A turn whose worker died: its partial text, never promoted (rule 7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptedTurn {
    /// The turn.
    pub turn_id: String,
    /// The message that was being written.
    pub message_id: String,
    /// The partial text that was shown.
    pub text: String,
    /// Offset of `text` in the message.
    pub text_offset: u64,
    /// `worker_restart` or `boot_changed`.
    pub reason: String,
}

/// Most scalar values the overlay's text keeps: the server's bound on
/// `live_turn.text` (PROTOCOL.md §5, 16 384), so what is shown and what is
/// persisted stay bounded however long a turn writes or a peer sends.
pub(crate) const TEXT_MAX: u64 = 16_384;

fn scalars(s: &str) -> u64 {
    s.chars().count() as u64
}

/// A text whose start is cut off as it grows at the end (the overlay keeps
/// the last [`TEXT_MAX`] scalars). The bytes cut off are removed once they
/// outweigh the rest: removing them at each cut moved the whole text, 16 KB,
/// for every delta of a long answer (9 % of a 60 000-character burst's
/// main-thread time, docs/benchmarks.md). Read, compared and written as the
/// text it holds.
#[derive(Clone, Default)]
pub struct TailText {
    buf: String,
    /// Bytes at the start of `buf` already cut off.
    cut: usize,
}

impl TailText {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.buf[self.cut..]
    }

    /// Appends `s`.
    pub fn push_str(&mut self, s: &str) {
        self.buf.push_str(s);
    }

    /// Empties the text.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.cut = 0;
    }

    /// Cuts the first `n` scalars off (all of them if there are fewer).
    fn cut_scalars(&mut self, n: usize) {
        let text = self.as_str();
        self.cut += text.char_indices().nth(n).map_or(text.len(), |(b, _)| b);
        if self.cut > self.buf.len() / 2 {
            self.buf.drain(..self.cut);
            self.cut = 0;
        }
    }

    /// The text as an owned `String`.
    pub fn into_string(mut self) -> String {
        self.buf.drain(..self.cut);
        self.buf
    }
}

impl From<String> for TailText {
    fn from(buf: String) -> Self {
        TailText { buf, cut: 0 }
    }
}

impl std::ops::Deref for TailText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for TailText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<&str> for TailText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for TailText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl std::fmt::Debug for TailText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl Overlay {
    /// Builds the overlay from a `live_turn` object.
    pub fn from_live(live: &LiveTurn, boot_id: &str) -> Self {
        let mut o = Overlay {
            turn_id: live.turn_id.clone(),
            message_id: live.message_id.clone(),
            rev: live.rev,
            state: Some(live.state),
            text: live.text.clone().into(),
            text_offset: live.text_offset,
            text_len: scalars(&live.text),
            tools: live.tools.clone(),
            pending_question: live.pending_question.clone(),
            stale: false,
            boot_id: boot_id.to_owned(),
        };
        o.keep_tail();
        o
    }

    /// Starts an overlay from a delta when no snapshot was seen.
    pub fn from_delta(delta: &TurnDelta, boot_id: &str) -> Self {
        let mut o = Overlay {
            turn_id: delta.turn_id.clone(),
            message_id: delta.message_id.clone(),
            rev: 0,
            state: None,
            text: TailText::default(),
            text_offset: 0,
            text_len: 0,
            tools: Vec::new(),
            pending_question: None,
            stale: false,
            boot_id: boot_id.to_owned(),
        };
        o.apply_delta(delta);
        o
    }

    /// Offset just past the last known character.
    pub fn end(&self) -> u64 {
        self.text_offset.saturating_add(self.text_len)
    }

    /// Cuts the text to its last [`TEXT_MAX`] scalars, moving `text_offset`
    /// on as the server does.
    fn keep_tail(&mut self) {
        let Some(cut) = self.text_len.checked_sub(TEXT_MAX).filter(|&c| c > 0) else {
            return;
        };
        self.text.cut_scalars(cut as usize);
        self.text_offset = self.text_offset.saturating_add(cut);
        self.text_len = TEXT_MAX;
    }

    /// Aligns a delta by offset: append at the end, trim an overlap, mark a
    /// hole stale; the text keeps its last [`TEXT_MAX`] scalars. A delta of
    /// another message of the same turn restarts the text. Returns whether
    /// anything visible changed.
    pub fn apply_delta(&mut self, delta: &TurnDelta) -> bool {
        if delta.message_id != self.message_id {
            self.message_id = delta.message_id.clone();
            self.text.clear();
            self.text_offset = 0;
            self.text_len = 0;
            self.stale = false;
        }
        let end = self.end();
        if delta.offset > end {
            let was = self.stale;
            self.stale = true;
            return !was;
        }
        let skip = end - delta.offset;
        let added = scalars(&delta.text);
        if added <= skip {
            return false;
        }
        let from = match delta.text.char_indices().nth(skip as usize) {
            Some((i, _)) => i,
            None => return false,
        };
        self.text.push_str(&delta.text[from..]);
        self.text_len += added - skip;
        self.keep_tail();
        true
    }

    /// Records a tool's progress; returns whether the call is known.
    pub fn apply_progress(&mut self, call_id: &str, progress: &str) -> bool {
        match self.tools.iter_mut().find(|t| t.call_id == call_id) {
            Some(t) => {
                t.progress = progress.to_owned();
                true
            }
            None => false,
        }
    }

    /// The record kept when this overlay's worker died.
    pub fn interrupt(self, reason: &str) -> InterruptedTurn {
        InterruptedTurn {
            turn_id: self.turn_id,
            message_id: self.message_id,
            text: self.text.into_string(),
            text_offset: self.text_offset,
            reason: reason.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn delta(msg: &str, offset: u64, text: &str) -> TurnDelta {
        TurnDelta {
            turn_id: "t".into(),
            message_id: msg.into(),
            offset,
            text: text.into(),
        }
    }

    #[test]
    fn rule_6_delta_at_end_appends_and_overlap_is_trimmed_by_scalars() {
        let mut o = Overlay::from_delta(&delta("m", 0, "héllo"), "b");
        assert_eq!((o.text.as_str(), o.end()), ("héllo", 5));
        assert!(o.apply_delta(&delta("m", 3, "lo wörld")));
        assert_eq!(o.text, "héllo wörld");
        assert!(
            !o.apply_delta(&delta("m", 0, "hé")),
            "full overlap is a no-op"
        );
        assert_eq!(o.text_len, 11);
    }

    #[test]
    fn rule_6_delta_beyond_end_marks_stale_without_appending() {
        let mut o = Overlay::from_delta(&delta("m", 0, "ab"), "b");
        assert!(o.apply_delta(&delta("m", 5, "zz")));
        assert!(o.stale);
        assert_eq!(o.text, "ab");
    }

    #[test]
    fn the_text_keeps_its_last_16384_scalars_and_aligns_after_the_cut() {
        let mut o = Overlay::from_delta(&delta("m", 0, &"é".repeat(16_000)), "b");
        assert_eq!((o.text_len, o.text_offset), (16_000, 0));
        assert!(o.apply_delta(&delta("m", 16_000, &"ab".repeat(500))));
        assert_eq!((o.text_len, o.text_offset, o.end()), (16_384, 616, 17_000));
        assert_eq!(o.text.chars().count(), 16_384);
        assert!(o.text.starts_with('é') && o.text.ends_with("ab"));
        // Overlap with the cut part is trimmed by offset, as before.
        assert!(o.apply_delta(&delta("m", 10, &"x".repeat(16_991))));
        assert_eq!((o.end(), o.text_len), (17_001, 16_384));
        assert!(o.text.ends_with("abx"));
        // A delta of 100 000 scalars at once keeps only its tail.
        assert!(o.apply_delta(&delta("m", 17_001, &"z".repeat(100_000))));
        assert_eq!((o.text_offset, o.text_len), (117_001 - 16_384, 16_384));
        assert!(o.text.chars().all(|c| c == 'z'));
    }

    #[test]
    fn a_long_answer_keeps_its_exact_tail_with_the_cut_bytes_removed_in_batches() {
        let mut o = Overlay::from_delta(&delta("m", 0, ""), "b");
        let mut whole = String::new();
        let mut deferred = 0;
        for i in 0..10_000u64 {
            let piece = if i % 3 == 0 { "é€x" } else { "abcd" };
            assert!(o.apply_delta(&delta("m", o.end(), piece)));
            whole.push_str(piece);
            if i % 97 == 0 || i == 9_999 {
                let n = whole.chars().count();
                let tail: String = whole.chars().skip(n.saturating_sub(16_384)).collect();
                assert_eq!(o.text, tail, "after delta {i}");
                assert_eq!(o.text_offset, n.saturating_sub(16_384) as u64);
            }
            // What is cut off waits, but never outweighs the text kept.
            assert!(o.text.cut <= o.text.buf.len() / 2 + piece.len());
            deferred += usize::from(o.text.cut > 0);
        }
        assert!(
            deferred > 5_000,
            "the cut bytes were removed at {deferred} deltas"
        );
    }

    #[test]
    fn offsets_near_the_top_of_the_range_saturate() {
        let mut o = Overlay::from_delta(&delta("m", 0, "ab"), "b");
        o.text_offset = u64::MAX - 1;
        assert_eq!(o.end(), u64::MAX);
        assert!(!o.apply_delta(&delta("m", u64::MAX, "")));
    }

    #[test]
    fn rule_6_delta_of_a_new_message_restarts_the_text() {
        let mut o = Overlay::from_delta(&delta("m1", 0, "first"), "b");
        o.apply_delta(&delta("m2", 0, "second"));
        assert_eq!((o.message_id.as_str(), o.text.as_str()), ("m2", "second"));
    }
}
