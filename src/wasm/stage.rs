//! A restore's items converted to JS while its backlog is still arriving.
//!
//! A restore is painted once, at its end (rule 2); converting thousands of
//! items then took ~20 ms on the critical path. Between pages the page is
//! mostly waiting for the network, so the driver converts each page's new
//! items right after applying it, and the final paint reuses them.

use js_sys::Array;

use super::js;
use crate::core::fold::{View, ViewChange};
use crate::core::machine::Client as Machine;

/// Items `0..len` of the machine's session view as JS objects, built during
/// restore number `restore`.
#[derive(Default)]
pub struct Staged {
    items: Option<Array>,
    restore: u64,
}

impl Staged {
    /// Follows one batch of view progress (`Machine::poll_view_progress`).
    /// Only while a restore runs, or until its staged items are used.
    pub fn track(&mut self, m: &Machine, p: ViewChange) {
        let View::Session(s) = m.view() else {
            return;
        };
        let restore = m.counters().restores;
        let current = self.items.is_some() && self.restore == restore;
        if !m.is_restoring() && !current {
            return;
        }
        if p.reset || !current {
            self.items = Some(Array::new());
            self.restore = restore;
        }
        let Some(staged) = self.items.as_mut() else {
            return;
        };
        let items = s.items();
        let have = staged.length() as usize;
        if have > items.len() {
            // Only a reset shrinks the view, and it restages; be safe anyway.
            self.items = None;
            return;
        }
        for &i in p.items_updated.iter().filter(|&&i| i < have) {
            staged.set(i as u32, js::to_js(&items[i]));
        }
        if have < items.len() {
            let appended: Array = js::to_js(&items[have..]).into();
            *staged = staged.concat(&appended);
        }
    }

    /// The staged items if they are exactly the view's `len` items after the
    /// restore completed; staging then stops until the next restore.
    pub fn take(&mut self, m: &Machine, len: usize) -> Option<Array> {
        let usable = !m.is_restoring()
            && self.restore == m.counters().restores
            && self.items.as_ref()?.length() as usize == len;
        if usable {
            self.items.take()
        } else {
            None
        }
    }
}
