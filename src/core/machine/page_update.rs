//! What the pages that show a machine's view from another context (the
//! tabs of a SharedWorker, the page of a dedicated worker) are posted: the
//! parts of the view changed since the last update, from the machine's own
//! [`ViewChange`]s; the live answer's text as what it gained; the
//! diagnostics only when a page would show a difference: at once when the
//! position, the status or the transport (stream or polling) moved, and
//! for the counters alone at most once per [`COUNTERS_EVERY_MS`] (the last
//! ones of an answer go with its commit, which moves the position).
//!
//! Every page of a machine is posted the same updates, in order (a port's
//! messages are neither lost nor reordered), so one record serves them
//! all: the host takes an update when its client tells it of changes
//! (paced as the client's notifications are) and posts it to each page. A
//! page that has none of them yet (attached, or resumed after a freeze)
//! gets the whole view ([`PageUpdate::WHOLE`]) once the others got what
//! changed, so that all go on from the same update.

use super::Machine;
use crate::fold::ViewChange;

/// The least time between two updates that carry changed counters
/// (`bytes` and `events` change with every event; a page shows them as
/// they stand, not per event).
pub const COUNTERS_EVERY_MS: u64 = 1_000;

/// The view's parts by the names of the JS `View`, in its order: bit `i`
/// of [`PageUpdate::parts`] is `PAGE_PARTS[i]`, which a worker host names
/// by the view's `i`th key. `tests/fixtures/view_parts.json` lists them
/// for both sides (`tests/view_parts.rs`, `tests/js/view_parts.test.mjs`).
pub const PAGE_PARTS: [&str; 16] = [
    "scope",
    "scopeId",
    "epoch",
    "cursor",
    "items",
    "events",
    "live",
    "interrupted",
    "pendingPrompts",
    "tasks",
    "status",
    "notices",
    "session",
    "extras",
    "pending",
    "hasOlder",
];

/// `epoch`, `cursor`, `hasOlder`.
const POSITION: u32 = 1 << 2 | 1 << 3 | 1 << 15;
const LIVE: u32 = 1 << 6;
/// `status` and `notices`: the feed marks them as it changes them.
pub(super) const STATUS: u32 = 1 << 10;
pub(super) const NOTICES: u32 = 1 << 11;

/// An update for the pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageUpdate {
    /// The view's parts that changed, a bit per part ([`PAGE_PARTS`]); the
    /// page keeps the others. The position (`epoch`, `cursor`, `hasOlder`)
    /// with any of them; none: the diagnostics alone.
    pub parts: u32,
    /// 1 + the offset (UTF-16 code units, as JS counts) from which the
    /// text of `live` is new: `live` goes without its text and the page
    /// appends the rest. 0: `live` (if posted) is whole.
    pub live_from: usize,
    /// The diagnostics go too.
    pub diagnostics: bool,
}

impl PageUpdate {
    /// Every part and the diagnostics: for a page that has none of the
    /// updates.
    pub const WHOLE: PageUpdate = PageUpdate {
        parts: (1 << PAGE_PARTS.len()) - 1,
        live_from: 0,
        diagnostics: true,
    };

    /// The names of [`parts`](Self::parts), in the view's order.
    pub fn names(&self) -> Vec<&'static str> {
        let bit = |i: &usize| self.parts >> i & 1 == 1;
        (0..PAGE_PARTS.len())
            .filter(bit)
            .map(|i| PAGE_PARTS[i])
            .collect()
    }
}

/// What the pages were last posted, and which parts changed since.
#[derive(Debug, Default)]
pub(super) struct Pages {
    /// The parts changed since the last update.
    parts: u32,
    /// The live answer as the pages have it: message id, text offset, and
    /// the text's length in UTF-16 code units. A message's
    /// text from one offset only grows (the fold appends deltas; a snapshot
    /// of it is the runtime's same text; a new message or a cut start moves
    /// the id or the offset), so a longer one goes as what it gained.
    live: Option<(String, u64, usize)>,
    /// The cursor of the last update.
    cursor: u64,
    /// When the last diagnostics went, and the bytes received then (they
    /// move with every event or poll, and so with any other counter or a
    /// change of transport).
    said_at: u64,
    said_bytes: u64,
}

impl Pages {
    /// A view change, for the next update. Bits in the view's order; the
    /// items' bit stands for the log's `events` too (a view has one of
    /// them).
    pub(super) fn changed(&mut self, c: &ViewChange) {
        let items = c.items_appended_from.is_some() || !c.items_updated.is_empty();
        self.parts |= if c.reset || c.restore_completed {
            PageUpdate::WHOLE.parts
        } else {
            (u32::from(items) * 0b11) << 4
                | u32::from(c.overlay) << 6
                | u32::from(c.interrupted) << 7
                // A prompt shows its answer while the outbox holds it.
                | u32::from(c.prompts || c.pending) << 8
                | u32::from(c.tasks) << 9
                | u32::from(c.session) << 12
                | u32::from(c.extras) << 13
                | u32::from(c.pending) << 14
        };
    }
}

impl Machine {
    /// The pages' next update: what changed since the last one (see the
    /// module docs), or `None` when nothing did.
    pub fn page_update(&mut self, now: u64) -> Option<PageUpdate> {
        let cursor = self.cursor();
        // Behind a restore the view shows what was last painted, but no
        // change of `live` is reported then (`poll_view_change`): a live
        // part posted is the machine's.
        let overlay = self.view.as_session().and_then(|s| s.overlay());
        let bytes = self.counters.bytes;
        // A page shows the transport, which can change alone.
        let transport = std::mem::take(&mut self.feed.page_transport);
        let p = &mut self.pages;
        let mut u = PageUpdate {
            parts: std::mem::take(&mut p.parts) | std::mem::take(&mut self.feed.page_parts),
            ..PageUpdate::default()
        };
        let moved = p.cursor != cursor;
        // The position moves with durable events, not with every delta:
        // posted at once, as the view's is.
        u.diagnostics = moved
            || u.parts & STATUS != 0
            || transport
            || (p.said_bytes != bytes && now >= p.said_at.saturating_add(COUNTERS_EVERY_MS));
        if u.parts == 0 && !u.diagnostics {
            return None;
        }
        // The position goes with any part, so that a page's view is of one
        // moment; alone when only it moved.
        if u.parts != 0 || moved {
            u.parts |= POSITION;
        }
        if u.parts & LIVE != 0 {
            let was = p.live.take();
            p.live = overlay.map(|o| {
                // UTF-16 code units: a unit per scalar, two for each above
                // U+FFFF (the ones written in four bytes).
                let astral = o.text.bytes().filter(|b| *b >= 0xF0).count();
                let units = o.text_len as usize + astral;
                let (id, offset) = (&o.message_id, o.text_offset);
                if let Some(w) = was.filter(|w| w.0 == *id && w.1 == offset && w.2 <= units) {
                    u.live_from = w.2 + 1;
                }
                (id.clone(), offset, units)
            });
        }
        if u.diagnostics {
            (p.said_at, p.said_bytes) = (now, bytes);
        }
        p.cursor = cursor;
        Some(u)
    }
}
