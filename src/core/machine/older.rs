//! The newest page first (docs/protocol.md §4.1). A first visit (no stored
//! state) with [`Config::tail`](super::Config) asks the replay for its
//! newest page (`tail=N`), which starts at a turn boundary: the cursor
//! jumps to that boundary and the page is applied as any (rule 3 from
//! there; the client follows live from its end). Older pages are read only
//! when the application asks ([`Machine::load_older`]): each is folded
//! alone and put before the items shown, exactly once, and the position
//! remembers where the history held starts (`Position::older`). A runtime
//! without the extension answers the page after cursor 0 with no
//! `older_cursor`: the history is then read forward, as without a tail.

use super::error::CoreError;
use super::types::{WriteDone, WriteId, WriteOutcome};
use super::{paths, Machine, RequestId};
use crate::fold::{SessionView, ViewChange};
use crate::json::{self, Payloads};
use crate::protocol::ReplayPage;

/// An older page being read: its requests, from `start` (the boundary the
/// runtime chose, known from its first answer) up to `before`.
#[derive(Debug)]
pub(super) struct OlderRead {
    /// In flight under this id; `None` until sent (after a restore).
    id: Option<RequestId>,
    /// The page's end: `Position::older` when it was asked for.
    before: u64,
    /// Its boundary and its last seq folded so far (from the first answer).
    start: Option<(u64, u64)>,
    /// The page folded alone so far.
    view: SessionView,
    /// The application's requests it settles.
    waiting: Vec<WriteId>,
}

impl Machine {
    /// `loadOlder()`: reads the page before the oldest item held and puts
    /// it first. The returned id is settled (`poll_write_done`) with
    /// [`WriteOutcome::Older`] once that page is shown, at once when
    /// nothing is older (`Position::older` is 0: the view holds the log
    /// from its start), or with the error that ended the read.
    pub fn load_older(&mut self, now: u64) -> WriteId {
        let id = self.writes.next_write_id();
        if self.closed {
            let result = Err(CoreError::Closed);
            self.writes.done.push_back(WriteDone { id, result });
        } else if let Some(o) = self.older.as_mut() {
            o.waiting.push(id);
        } else if self.pos.older == 0 || !self.cfg.target.is_session() {
            let result = Ok(WriteOutcome::Older);
            self.writes.done.push_back(WriteDone { id, result });
        } else {
            self.older = Some(OlderRead {
                id: None,
                before: self.pos.older,
                start: None,
                view: SessionView::default(),
                waiting: vec![id],
            });
            self.send_older();
        }
        self.after_input(now);
        id
    }

    /// Sends the older page's next request, unless a restore is being
    /// read (the page is put before the state that restore paints).
    pub(super) fn send_older(&mut self) {
        if self.restore.is_some() || self.halted() {
            return;
        }
        let Some(o) = self.older.as_ref().filter(|o| o.id.is_none()) else {
            return;
        };
        let limit = self.cfg.replay_page_limit;
        let path = paths::older(
            &self.cfg.target,
            o.before,
            o.start.map(|(_, last)| last),
            self.cfg.tail.max(1),
            limit,
        );
        let id = self.alloc_id();
        if let Some(o) = self.older.as_mut() {
            o.id = Some(id);
        }
        self.actions.push_back(super::Action::Fetch {
            id,
            path_and_query: path,
            kind: super::FetchKind::Replay,
        });
    }

    /// Whether request `id` is the older page's.
    pub(super) fn is_older(&self, id: RequestId) -> bool {
        self.older.as_ref().is_some_and(|o| o.id == Some(id))
    }

    /// Ends the older read: its requests settle with `result`.
    pub(super) fn end_older(&mut self, result: Result<WriteOutcome, CoreError>) {
        let Some(o) = self.older.take() else { return };
        if let Some(id) = o.id {
            self.actions.push_back(super::Action::Abort { id });
        }
        for id in o.waiting {
            let result = result.clone();
            self.writes.done.push_back(WriteDone { id, result });
        }
    }

    /// The older page's request failed: the read ends with the error (the
    /// application may ask again).
    pub(super) fn older_failed(&mut self, error: CoreError) {
        if let Some(o) = self.older.as_mut() {
            o.id = None;
        }
        self.end_older(Err(error));
    }

    /// An answer of the older page's request.
    pub(super) fn on_older_page(&mut self, body: &[u8], now: u64) {
        if let Some(o) = self.older.as_mut() {
            o.id = None;
        }
        let mut page = ReplayPage::default();
        let read = json::utf8(body).and_then(|t| json::read_over(t, &mut page, Payloads::Typed));
        if let Err(e) = read {
            return self.older_failed(CoreError::BadJson(e.to_string()));
        }
        // Another log: the view restarts from its newest page (rule 8).
        if !self.check_epoch(&page.epoch, now) {
            return;
        }
        let Some(o) = self.older.as_mut() else { return };
        let (start, mut last) = match o.start {
            Some(s) => s,
            None => match page.older_cursor {
                Some(s) if s < o.before => (s, s),
                // No boundary before the oldest item: nothing to page back to.
                _ => {
                    self.pos.older = 0;
                    self.dirty = true;
                    return self.end_older(Ok(WriteOutcome::Older));
                }
            },
        };
        let mut ch = ViewChange::default();
        for env in &mut page.history {
            // Not the events after `last` up to `before`: not this page.
            if env.seq != Some(last + 1) || last >= o.before {
                return self.older_failed(CoreError::HistoryMismatch { cursor: last });
            }
            o.view.apply_durable(env, &mut ch);
            last += 1;
        }
        o.start = Some((start, last));
        if last < o.before {
            if page.history.is_empty() {
                return self.older_failed(CoreError::PageNotAdvancing { cursor: last });
            }
            return self.send_older();
        }
        let view = std::mem::take(&mut o.view);
        self.with_view(true, |v, ch| v.prepend(view, ch));
        self.pos.older = start;
        self.dirty = true;
        self.end_older(Ok(WriteOutcome::Older));
    }
}
