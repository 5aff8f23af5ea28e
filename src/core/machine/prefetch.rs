//! Pipelined backlog paging: while a scoped backlog is read page by page,
//! up to [`Config::prefetch_depth`](super::Config) speculative requests for
//! the pages after the one in flight keep the server, the network and the
//! client's decoding busy at the same time. A browser's request latency
//! (~20 ms on loopback) exceeds the decoding of a full page, so one page
//! ahead still left the client waiting; two hide it.
//!
//! Seqs are dense per scope (PROTOCOL.md §2), so a full page after `a` with
//! limit `L` ends at exactly `a + L`: the following page is `after = a + L`.
//! It is asked for only when the server has shown a head beyond `a + L`
//! (hello, heartbeat, a page or a durable frame), so a backlog of one page
//! never costs an extra request. When the cursor lands on the first
//! prefetch's `after` it becomes the normal fetch (its body is read then,
//! if it came early); otherwise (short or stopped page) every prefetch is
//! aborted and the page is fetched normally. A prefetch that fails or times
//! out is dropped with those behind it, without a notice or a backoff, and
//! its page is never speculated again: the normal path fetches it with its
//! own retries. The global list's cursor is a row id, not dense: it is
//! never pipelined.

use super::types::{Action, FetchKind, RequestId};
use super::{paths, FetchSlot, Machine, Mode, Prefetch};

impl Machine {
    /// The path of the page of `kind` after `after`.
    pub(super) fn page_path(&self, kind: FetchKind, after: u64, limit: u32) -> String {
        match kind {
            FetchKind::Replay if self.asking_tail => {
                paths::tail(&self.cfg.target, self.cfg.tail, limit)
            }
            FetchKind::Replay => paths::replay(&self.cfg.target, after, limit)
                .expect("replay pages only for sessions"),
            FetchKind::Events => paths::events(&self.cfg.target, after, limit),
        }
    }

    /// Raises what is known of the scope's durable head.
    pub(super) fn saw_head(&mut self, head: u64) {
        self.known_head = self.known_head.max(head);
    }

    /// Extends the prefetches behind a plain backlog page in flight, up to
    /// the configured depth and the known head.
    pub(super) fn maybe_prefetch(&mut self, now: u64) {
        // A page after the newest one is not after `0 + limit`.
        if !self.scoped() || self.halted() || self.asking_tail {
            return;
        }
        // A verifying page's first event is a check, not progress; pages of
        // a repair or restore only (nothing is fetched while following).
        let plain = matches!(
            self.mode,
            Mode::Restore { verify: false } | Mode::Repair { verify: false, .. }
        );
        let Some(f) = self.fetch.as_ref() else { return };
        // Not while the slot waits to retry: the server is struggling.
        if !plain || f.id.is_none() {
            return;
        }
        let kind = f.kind;
        let (mut after, mut limit) = match self.prefetch.back() {
            Some(p) => (p.after, p.limit),
            None => (f.after, f.limit),
        };
        while self.prefetch.len() < usize::from(self.cfg.prefetch_depth) {
            // A full page after `after` ends at `after + limit`; each page
            // behind it doubles the limit, up to the configured one.
            let next = after.saturating_add(u64::from(limit));
            if self.known_head <= next || self.unspeculated == Some(next) {
                return;
            }
            after = next;
            limit = self.limit_after(limit);
            let path = self.page_path(kind, after, limit);
            let id = self.alloc_id();
            self.actions.push_back(Action::Fetch {
                id,
                path_and_query: path.clone(),
                kind,
            });
            self.prefetch.push_back(Prefetch {
                id,
                kind,
                path,
                after,
                limit,
                issued_at: now,
                body: None,
            });
        }
    }

    /// Keeps the body of a prefetch until it is promoted; false if `id` is
    /// not a prefetch waiting for its answer.
    pub(super) fn keep_prefetched(&mut self, id: RequestId, kind: FetchKind, body: &[u8]) -> bool {
        let Some(p) = self
            .prefetch
            .iter_mut()
            .find(|p| p.id == id && p.body.is_none())
        else {
            return false;
        };
        if p.kind == kind {
            p.body = Some(body.to_vec());
        } else {
            self.prefetch_failed(id);
        }
        true
    }

    /// Makes the first prefetch the current fetch if it asked for the page
    /// after the cursor; otherwise aborts them all. True when promoted.
    pub(super) fn promote_prefetch(&mut self, kind: FetchKind) -> bool {
        let cursor = self.pos.cursor;
        let fits = |p: &Prefetch| p.kind == kind && p.after == cursor;
        let Some(p) = self
            .prefetch
            .front()
            .is_some_and(fits)
            .then(|| self.prefetch.pop_front())
            .flatten()
        else {
            self.drop_prefetch();
            return false;
        };
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
        });
        true
    }

    /// Forgets every prefetch, aborting those still in flight.
    pub(super) fn drop_prefetch(&mut self) {
        self.cut_prefetch(0);
    }

    /// Forgets the prefetches from index `from` on, aborting those in flight.
    fn cut_prefetch(&mut self, from: usize) {
        for p in self.prefetch.drain(from.min(self.prefetch.len())..) {
            if p.body.is_none() {
                self.actions.push_back(Action::Abort { id: p.id });
            }
        }
    }

    /// The prefetch `id` failed (its request is over): it is dropped with
    /// those behind it, and its page is left to the normal path.
    pub(super) fn prefetch_failed(&mut self, id: RequestId) {
        if let Some(i) = self.prefetch.iter().position(|p| p.id == id) {
            if let Some(p) = self.prefetch.remove(i) {
                self.unspeculated = Some(p.after);
            }
            self.cut_prefetch(i);
        }
    }

    /// Drops a prefetch in flight that has waited too long, with those
    /// behind it; its page is left to the normal path.
    pub(super) fn expire_prefetch(&mut self, now: u64) {
        let timeout = self.cfg.fetch_timeout_ms;
        let expired = self
            .prefetch
            .iter()
            .position(|p| p.body.is_none() && now >= p.issued_at.saturating_add(timeout));
        if let Some(i) = expired {
            self.unspeculated = Some(self.prefetch[i].after);
            self.cut_prefetch(i);
        }
    }

    /// When the oldest prefetch still in flight will have waited too long.
    pub(super) fn prefetch_deadline(&self) -> Option<u64> {
        self.prefetch
            .iter()
            .filter(|p| p.body.is_none())
            .map(|p| p.issued_at.saturating_add(self.cfg.fetch_timeout_ms))
            .min()
    }
}
