//! The pages that show a machine's view from another context (the tabs of
//! a SharedWorker or a dedicated worker host): a worker has no document,
//! so it learns visibility from them. The machine counts as hidden only
//! while every page that reported is hidden; one visible page makes it
//! visible (its polls at the visible pace, its stream probed: §6 rule 13).
//! A machine no page reported to (a client on a page, which hears its own
//! document) is never hidden by this.

use super::types::Lifecycle;
use super::Machine;

/// Viewers at most: a page's report past this is ignored (a host serves a
/// few tabs per scope; the bound keeps a misbehaving one from growing it).
pub const MAX_VIEWERS: usize = 1_024;

/// Each reporting page with whether it is hidden.
#[derive(Debug, Default)]
pub(super) struct Viewers(Vec<(u64, bool)>);

impl Viewers {
    /// Whether the machine counts as hidden: some page reported, and every
    /// one is hidden.
    pub(super) fn hidden(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|v| v.1)
    }

    /// Page `viewer` is hidden or visible (`Some`), or went away (`None`).
    pub(super) fn set(&mut self, viewer: u64, hidden: Option<bool>) {
        let at = self.0.iter().position(|v| v.0 == viewer);
        match (at, hidden) {
            (Some(i), Some(h)) => self.0[i].1 = h,
            (Some(i), None) => {
                self.0.swap_remove(i);
            }
            (None, Some(h)) if self.0.len() < MAX_VIEWERS => self.0.push((viewer, h)),
            (None, _) => {}
        }
    }
}

impl Machine {
    /// Page `viewer`, which shows this machine's view from another
    /// context, is hidden or visible (`Some`), or went away (`None`). When
    /// that changes whether every reporting page is hidden, the machine
    /// takes it as [`Lifecycle::Hidden`] or [`Lifecycle::Visible`].
    pub fn handle_viewer(&mut self, viewer: u64, hidden: Option<bool>, now: u64) {
        let was = self.viewers.hidden();
        self.viewers.set(viewer, hidden);
        let is = self.viewers.hidden();
        if was != is {
            let event = if is {
                Lifecycle::Hidden
            } else {
                Lifecycle::Visible
            };
            self.handle_lifecycle(event, now);
        }
    }
}
