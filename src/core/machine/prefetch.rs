//! Pipelined backlog paging: while a scoped backlog is read page by page,
//! one speculative request for the page after the one in flight keeps the
//! server, the network and the client's decoding busy at the same time.
//!
//! Seqs are dense per scope (PROTOCOL.md §2), so a full page after `a` with
//! limit `L` ends at exactly `a + L`: the following page is `after = a + L`.
//! It is asked for only when the server has shown a head beyond `a + L`
//! (hello, heartbeat, a page or a durable frame), so a backlog of one page
//! never costs an extra request. When the cursor lands on the prefetch's
//! `after` it becomes the normal fetch (its body is read then, if it came
//! early); otherwise (short or stopped page) it is aborted and the page is
//! fetched normally. A prefetch that fails is dropped without a notice or a
//! backoff: the normal path fetches that page with its own retries.
//! The global list's cursor is a row id, not dense: it is never pipelined.

use super::types::{Action, FetchKind, RequestId};
use super::{paths, Client, FetchSlot, Mode, Prefetch};

impl Client {
    /// The path of the page of `kind` after `after`.
    pub(super) fn page_path(&self, kind: FetchKind, after: u64, limit: u32) -> String {
        match kind {
            FetchKind::Replay => paths::replay(&self.cfg.target, after, limit)
                .expect("replay pages only for sessions"),
            FetchKind::Events => paths::events(&self.cfg.target, after, limit),
        }
    }

    /// Raises what is known of the scope's durable head.
    pub(super) fn saw_head(&mut self, head: u64) {
        self.known_head = self.known_head.max(head);
    }

    /// Issues the prefetch if the fetch in flight is a plain backlog page
    /// and the known head lies beyond the page after it.
    pub(super) fn maybe_prefetch(&mut self, now: u64) {
        if self.prefetch.is_some() || !self.scoped() || self.halted() {
            return;
        }
        // A verifying page's first event is a check, not progress; pages of
        // a repair or restore only (nothing is fetched while following).
        let plain = matches!(
            self.mode,
            Mode::Restore { verify: false } | Mode::Repair { verify: false, .. }
        );
        let limit = self.next_limit();
        let head = self.known_head;
        let Some(f) = self.fetch.as_mut() else { return };
        // A full page after `a` ends at `a + f.limit` (the first page of a
        // restore is smaller); the speculative one is full-size.
        let end = f.after + u64::from(f.limit);
        // Not while the slot waits to retry: the server is struggling.
        if !plain || f.id.is_none() || f.speculated || head <= end {
            return;
        }
        f.speculated = true;
        let (kind, after) = (f.kind, end);
        let path = self.page_path(kind, after, limit);
        let id = self.alloc_id();
        self.actions.push_back(Action::Fetch {
            id,
            path_and_query: path.clone(),
            kind,
        });
        self.prefetch = Some(Prefetch {
            id,
            kind,
            path,
            after,
            limit,
            issued_at: now,
            body: None,
        });
    }

    /// Keeps the body of the prefetch until it is promoted; false if `id`
    /// is not the prefetch.
    pub(super) fn keep_prefetched(&mut self, id: RequestId, kind: FetchKind, body: &[u8]) -> bool {
        match self.prefetch.as_mut() {
            Some(p) if p.id == id && p.body.is_none() => {
                if p.kind == kind {
                    p.body = Some(body.to_vec());
                } else {
                    self.prefetch = None;
                }
                true
            }
            _ => false,
        }
    }

    /// Makes the prefetch the current fetch if it asked for the page after
    /// the cursor; otherwise aborts it. True when promoted.
    pub(super) fn promote_prefetch(&mut self, kind: FetchKind) -> bool {
        match self.prefetch.take() {
            Some(p) if p.kind == kind && p.after == self.pos.cursor => {
                // The slot's own request just answered: nothing to abort.
                self.fetch = Some(FetchSlot {
                    id: Some(p.id),
                    kind,
                    path: p.path,
                    after: p.after,
                    limit: p.limit,
                    issued_at: p.issued_at,
                    retry_at: None,
                    body: p.body,
                    speculated: false,
                });
                true
            }
            other => {
                self.prefetch = other;
                self.drop_prefetch();
                false
            }
        }
    }

    /// Forgets the prefetch, aborting it if it is still in flight.
    pub(super) fn drop_prefetch(&mut self) {
        if let Some(p) = self.prefetch.take() {
            if p.body.is_none() {
                self.actions.push_back(Action::Abort { id: p.id });
            }
        }
    }

    /// When a prefetch still in flight has waited too long.
    pub(super) fn prefetch_deadline(&self) -> Option<u64> {
        self.prefetch
            .as_ref()
            .filter(|p| p.body.is_none())
            .map(|p| p.issued_at + self.cfg.fetch_timeout_ms)
    }
}
