//! The cursor logic: restore barrier (rule 2), apply (rule 3), gap repair
//! (rule 4), snapshots (rule 5), epochs (rule 8), droppable events (rule 10).

use super::error::CoreError;
use super::persist::{self, LastApplied, Position};
use super::types::{Config, FetchKind, Notice, Target};
use super::{Frame, Machine, Mode};
use crate::fold::{View, ViewChange};
use crate::json::{self, JsonError, Payloads};
use crate::protocol::{Envelope, Event, EventPage, Hello, ReplayPage};
use crate::sse::SseEventRef;

/// Whether a page of `len` events holds more than its request's `limit`.
fn over(len: usize, limit: u32) -> bool {
    len as u64 > u64::from(limit)
}

/// Applies a live frame to the live view of a failed restore (`shown`, see
/// `Machine::restore_failed`): a durable event after the last one shown
/// (past a gap too; its key is the row id if `global`), a transient
/// whatever its `after_seq`. A durable event is spent there (a copy would be
/// new code in the wasm) and leaves a marker in its place: the gap repair
/// after the backlog reads it again. Free of `self` for split borrows.
fn show(shown: &mut Option<(View, u64)>, global: bool, change: &mut ViewChange, frame: &mut Frame) {
    let Frame::Event(env) = frame else { return };
    let Some((view, last)) = shown else { return };
    match if global { env.id } else { env.seq } {
        Some(k) => {
            if k > *last {
                *last = k;
                view.apply_durable(env, change);
            }
            *frame = Frame::LiveFrom(k);
        }
        None if matches!(env.event, Event::Heartbeat(_)) => {}
        None => view.apply_transient(env, change),
    }
}

/// The `(message_id, turn_id)` of a `message.committed` frame that [`show`]
/// will apply to the live view of a failed restore.
fn shown_commit<'a>(
    shown: &Option<(View, u64)>,
    global: bool,
    frame: &'a Frame,
) -> Option<(&'a String, &'a String)> {
    let (Frame::Event(env), Some((_, last))) = (frame, shown) else {
        return None;
    };
    let key = if global { env.id } else { env.seq };
    match &env.event {
        Event::MessageCommitted(m) if key.is_some_and(|k| k > *last) => {
            Some((&m.message_id, &m.turn_id))
        }
        _ => None,
    }
}

/// What one restore or repair has read, against its budget
/// ([`Config::restore_max_events`], [`Config::restore_max_bytes`]).
#[derive(Debug, Default)]
pub(super) struct BacklogRead {
    events: u64,
    bytes: u64,
}

impl BacklogRead {
    /// Counts a page of `events` in a body of `bytes`; the error when the
    /// read is now past its budget.
    fn add(&mut self, events: usize, bytes: usize, cfg: &Config) -> Option<CoreError> {
        self.events = self.events.saturating_add(events as u64);
        self.bytes = self.bytes.saturating_add(bytes as u64);
        (self.events > cfg.restore_max_events || self.bytes > cfg.restore_max_bytes).then_some(
            CoreError::HistoryTooLarge {
                events: self.events,
                bytes: self.bytes,
            },
        )
    }
}

/// What applying one frame led to.
enum Step {
    Done,
    /// Something is missing; `requeue` keeps the frame for after the repair.
    Gap {
        requeue: bool,
    },
}

impl Machine {
    pub(super) fn scoped(&self) -> bool {
        matches!(self.cfg.target, Target::Scoped { .. })
    }

    /// Runs a view mutation, merging its change and emitting interruption
    /// notices; `persist` marks the state dirty when something changed.
    pub(super) fn with_view(&mut self, persist: bool, f: impl FnOnce(&mut View, &mut ViewChange)) {
        let before = self.view.as_session().map_or(0, |s| s.interrupted().len());
        let mut ch = ViewChange::default();
        f(&mut self.view, &mut ch);
        if let Some(s) = self.view.as_session() {
            // New entries are at the end; a turn that ended on its own
            // may also have left the list (the fold's `end_turn`).
            for t in s.interrupted().iter().skip(before) {
                self.notices.push_back(Notice::TurnInterrupted {
                    turn_id: t.turn_id.clone(),
                    reason: t.reason.clone(),
                });
            }
        }
        // While `shown` is what a UI reads, this view's changes are not
        // reported: the restore's end repaints it whole.
        if !ch.is_empty() {
            self.dirty |= persist;
            if self.shown.is_none() {
                if self.restore.is_some() {
                    self.progress.merge(&ch);
                }
                self.change.merge(&ch);
            }
        }
    }

    /// Rule 2, a backlog that cannot be read (`err`): non-fatal. Said once
    /// per restore (`final_`: and when it is given up); the live frames are
    /// shown at once on a copy of the view, the durable one still waiting
    /// for the backlog (seed 001: the live subscription continues).
    pub(super) fn restore_failed(&mut self, err: &CoreError, final_: bool) {
        if self.restore.is_none() {
            return;
        }
        if self.shown.is_none() {
            // A copy through the persisted form: a `Clone` of the view would
            // be new code in the wasm, this is code it has.
            let copy = persist::decode(&self.persisted_value(), &self.cfg.target);
            let copy = copy.expect("a persisted value reads back");
            self.shown = Some((copy.view, copy.pos.cursor));
            // The copy is painted whole (what is staged from the progress
            // meanwhile is restaged at the restore's end: `drain`).
            self.change.reset = true;
            let global = matches!(self.cfg.target, Target::Global);
            let mut i = 0;
            while let Some(f) = self.buffer.get_mut(i) {
                let commit = shown_commit(&self.shown, global, f)
                    .filter(|c| self.writes.outbox.awaits(c.0))
                    .map(|(m, t)| (m.clone(), t.clone()));
                show(&mut self.shown, global, &mut self.change, f);
                i += 1;
                if let Some((m, t)) = commit {
                    self.message_committed(&m, &t, true);
                }
            }
        } else if !final_ {
            return;
        }
        let error = err.info();
        self.notices.push_back(Notice::RestoreFailed { error });
    }

    /// A 4xx on the backlog: the restore is given up, not the live follow
    /// (a session that is gone fails the stream too, and so the client).
    pub(super) fn give_up_restore(&mut self, err: &CoreError) {
        self.restore_failed(err, true);
        self.end_fetch();
        self.buffer.clear();
        self.mode = Mode::Unrestored;
        self.restore = None;
    }

    /// Rule 2: open the live stream without a cursor and read the backlog
    /// from the stored cursor at the same time; hold live frames meanwhile.
    pub(super) fn start_restore(&mut self, now: u64) {
        let verify = self.scoped() && !self.cfg.target.is_session() && self.pos.cursor > 0;
        self.mode = Mode::Restore { verify };
        self.restore = Some(self.pos.cursor);
        self.shown = None;
        self.backlog = BacklogRead::default();
        self.counters.restores += 1;
        // A first visit reads the newest page first (`older.rs`).
        self.asking_tail =
            self.cfg.target.is_session() && self.pos.cursor == 0 && self.cfg.tail > 0;
        // A consumer of the progress stages this restore from the whole view.
        self.progress = ViewChange {
            reset: true,
            ..ViewChange::default()
        };
        self.buffer.clear();
        // Back-to-back restarts from 0 (a server that keeps rejecting) are paced.
        let delay = if self.zero_restarts > 1 {
            self.restart_backoff
                .next_delay(&self.cfg.backoff, &mut self.rng, 0)
        } else {
            0
        };
        self.open_stream_after(delay, now);
        if self.cfg.target.is_session() {
            self.issue_fetch(FetchKind::Replay, self.pos.cursor, true, delay, now);
        } else {
            let after = self.verify_from(verify);
            self.issue_fetch(FetchKind::Events, after, true, delay, now);
        }
    }

    /// `after_seq` of a verifying page: the cursor minus one, so the first
    /// event returned is the last one applied (rule 4).
    fn verify_from(&self, verify: bool) -> u64 {
        if verify {
            self.pos.cursor - 1
        } else {
            self.pos.cursor
        }
    }

    /// Rule 4: hold live frames and fetch event pages from the cursor.
    fn start_repair(&mut self, now: u64) {
        let verify = self.scoped() && self.pos.cursor > 0;
        self.backlog = BacklogRead::default();
        self.mode = Mode::Repair {
            from_cursor: self.pos.cursor,
            verify,
        };
        // A repair that cannot make progress (server inconsistency) backs off.
        let delay = if self.idle_repairs > 0 {
            self.fetch_backoff
                .next_delay(&self.cfg.backoff, &mut self.rng, 0)
        } else {
            0
        };
        let after = self.verify_from(verify);
        self.issue_fetch(FetchKind::Events, after, true, delay, now);
    }

    /// The restore is done and the stream's `hello` agreed with its epoch
    /// (in either order): the scope is live from `now`.
    fn went_live(&mut self, now: u64) {
        self.live_since.get_or_insert(now);
    }

    /// Whether the restarts from 0 so far are over: the scope has been live
    /// for the backoff's cap since the last one. Until then they count as
    /// in a row and are paced, whether the restore agreed or not: a page
    /// and a stream that disagree on the epoch, or a server that changes it
    /// right after every agreeing restore, would restart at once, for ever.
    /// The cap is the longest wait any retry has, so a loop can never look
    /// settled faster than the backoff would pace it.
    fn restarts_settled(&mut self, now: u64) -> bool {
        let live_for = self.live_since.take().map(|t| now.saturating_sub(t));
        live_for.is_some_and(|ms| ms >= self.cfg.backoff.max_ms)
    }

    /// Rule 8 and rule 9 (invalid cursor): discard everything, restore from 0.
    fn restart_from_zero(&mut self, notice: Notice, now: u64) {
        if self.restarts_settled(now) {
            self.zero_restarts = 0;
            self.restart_backoff.reset();
        }
        self.notices.push_back(notice);
        self.abort_all();
        self.buffer.clear();
        self.known_head = 0;
        self.pos = Position::default();
        self.view = View::empty(self.cfg.target.is_session(), self.cfg.log_capacity);
        self.change = ViewChange {
            reset: true,
            ..ViewChange::default()
        };
        self.progress = self.change.clone();
        self.dirty = true;
        self.outbox_log_recreated();
        // Older pages are of the old log: the new one's newest page comes first.
        self.end_older(Ok(super::WriteOutcome::Older));
        self.zero_restarts += 1;
        self.start_restore(now);
    }

    pub(super) fn cursor_rejected(&mut self, err: CoreError, now: u64) {
        let cursor = self.pos.cursor;
        self.last_error = Some(err.info());
        let notice = Notice::CursorRejected {
            error: err.info(),
            cursor,
        };
        self.restart_from_zero(notice, now);
    }

    /// Which payloads are read into types: logs show them as text and never
    /// look inside (and the wasm then needs no payload encoder).
    fn payloads(&self) -> Payloads {
        if self.cfg.target.is_session() {
            Payloads::Typed
        } else {
            Payloads::Opaque
        }
    }

    /// Compares a server epoch with ours; adopts it when we have none.
    /// Returns false (after restarting from 0) when it changed.
    pub(super) fn check_epoch(&mut self, epoch: &str, now: u64) -> bool {
        match &self.pos.epoch {
            Some(e) if e != epoch => {
                let err = CoreError::EpochChanged {
                    previous: e.clone(),
                    current: epoch.to_owned(),
                };
                self.epoch_changed(err, now);
                false
            }
            Some(_) => true,
            None => {
                self.pos.epoch = Some(epoch.to_owned());
                self.dirty = true;
                true
            }
        }
    }

    pub(super) fn epoch_changed(&mut self, err: CoreError, now: u64) {
        self.last_error = Some(err.info());
        self.restart_from_zero(Notice::EpochChanged { error: err.info() }, now);
    }

    /// One dispatched SSE event.
    pub(super) fn on_sse_event(&mut self, ev: SseEventRef<'_>, now: u64) {
        // The client's own reader (small in the wasm); the parser already
        // validated UTF-8.
        // Read over the last envelope: its buffers are reused.
        let mut env = self.spare.take().unwrap_or_else(Envelope::blank);
        match json::read_over(ev.data, &mut env, self.payloads()) {
            Ok(()) => {}
            Err(e) => {
                // Nothing of a bad frame is applied; if it was durable (had an
                // id line) the hole is repaired from event pages.
                let error = CoreError::BadJson(e.to_string()).info();
                self.notices.push_back(Notice::FrameSkipped { error });
                if ev.id_field_seen && self.mode == Mode::Follow {
                    self.start_repair(now);
                }
                return;
            }
        }
        self.on_envelope(env, ev.data.len(), now);
    }

    /// One event of the stream, read (by the parser's caller, or by the
    /// share hub that routed it here); `size`: its `data` as sent.
    pub(super) fn on_envelope(&mut self, env: Envelope, size: usize, now: u64) {
        self.counters.events += 1;
        match (&env.event, env.seq) {
            (Event::Heartbeat(hb), _) => self.saw_head(hb.head),
            (_, Some(seq)) => self.saw_head(seq),
            _ => {}
        }
        match &env.event {
            Event::Hello(h) => {
                self.on_hello(h, now);
                self.spare = Some(env);
            }
            _ => {
                self.stream_proven();
                self.route(Frame::Event(env), size, now)
            }
        }
    }

    fn on_hello(&mut self, h: &Hello, now: u64) {
        let live_only = match self.stream.as_mut() {
            Some(s) => {
                s.hello_seen = true;
                s.live_only
            }
            None => return,
        };
        self.link_hello();
        self.refresh_unproven = false;
        if !self.check_epoch(&h.epoch, now) {
            return;
        }
        if self.restore.is_none() {
            self.went_live(now);
        }
        self.saw_head(h.head);
        let boot = h.boot_id.clone();
        self.with_view(true, |v, ch| v.set_boot(&boot, ch));
        if let Some((v, _)) = &mut self.shown {
            // Rule 7 holds for the live view of a failed restore too.
            v.set_boot(&boot, &mut self.change);
        }
        if live_only {
            // Durable events up to head will not come on this stream.
            self.route(Frame::LiveFrom(h.head), 0, now);
        }
    }

    /// Applies a frame (of `bytes` as sent), or holds it while a barrier is up.
    fn route(&mut self, mut frame: Frame, bytes: usize, now: u64) {
        if self.mode != Mode::Follow {
            let global = matches!(self.cfg.target, Target::Global);
            let commit = shown_commit(&self.shown, global, &frame)
                .filter(|c| self.writes.outbox.awaits(c.0))
                .map(|(m, t)| (m.clone(), t.clone()));
            show(&mut self.shown, global, &mut self.change, &mut frame);
            if let Some((m, t)) = commit {
                self.message_committed(&m, &t, true);
            }
            // A given-up restore holds nothing: the frame was only shown.
            if !matches!(self.mode, Mode::Unrestored) {
                self.hold(frame, bytes);
                return;
            }
        } else if let Step::Gap { requeue } = self.apply_frame(&mut frame, false) {
            if requeue {
                self.hold(frame, bytes);
                self.start_repair(now);
                return;
            }
            self.start_repair(now);
        }
        if let Frame::Event(env) = frame {
            self.spare = Some(env);
        }
    }

    /// The cursor value of a durable event: `seq`, or the row id on the
    /// global list (where `seq` is per scope and not a position).
    pub(super) fn durable_key(&self, env: &Envelope) -> Option<u64> {
        match self.cfg.target {
            Target::Global => env.id,
            Target::Scoped { .. } => env.seq,
        }
    }

    /// Rules 3–6 for one frame. `lenient` (right after a repair) applies a
    /// transient whose `after_seq` is still ahead instead of repairing again.
    /// An applied durable event is spent (its strings moved into the view);
    /// a frame that reports a gap is left whole, to be held again.
    fn apply_frame(&mut self, frame: &mut Frame, lenient: bool) -> Step {
        let env = match frame {
            Frame::LiveFrom(head) if *head > self.pos.cursor => {
                return Step::Gap { requeue: false }
            }
            Frame::LiveFrom(_) => return Step::Done,
            Frame::Event(env) => env,
        };
        if let Some(key) = self.durable_key(env) {
            return self.apply_durable(env, key);
        }
        match &env.event {
            Event::Heartbeat(hb) if hb.head > self.pos.cursor => Step::Gap { requeue: false },
            Event::Heartbeat(_) => Step::Done,
            _ => {
                // A transient is held until the cursor reaches its after_seq;
                // on the global list after_seq is per scope, not comparable.
                let ahead = env.after_seq.is_some_and(|a| a > self.pos.cursor);
                if ahead && self.scoped() && !lenient {
                    return Step::Gap { requeue: true };
                }
                // Deltas and progress are not worth a whole-state write each:
                // they ride along with the next durable or snapshot change.
                let persist = matches!(
                    env.event,
                    Event::TasksSnapshot(_) | Event::LiveTurnSnapshot(_)
                );
                self.with_view(persist, |v, ch| v.apply_transient(env, ch));
                Step::Done
            }
        }
    }

    /// Rule 3: apply only `key == cursor + 1` (any `key > cursor` on the
    /// global list), drop duplicates, report gaps. Applying spends `env`.
    fn apply_durable(&mut self, env: &mut Envelope, key: u64) -> Step {
        if key <= self.pos.cursor {
            self.counters.duplicates_dropped += 1;
            return Step::Done;
        }
        if self.scoped() && Some(key) != self.pos.cursor.checked_add(1) {
            return Step::Gap { requeue: true };
        }
        // Before the fold spends the event; the name's buffer is reused.
        let type_name = env.event.type_name();
        match &mut self.pos.last {
            Some(last) => {
                last.seq = key;
                last.id = env.id;
                if last.type_name != type_name {
                    last.type_name.clear();
                    last.type_name.push_str(type_name);
                }
            }
            None => {
                self.pos.last = Some(LastApplied {
                    seq: key,
                    id: env.id,
                    type_name: type_name.to_owned(),
                })
            }
        }
        // Before the fold spends the event: the outbox's message it commits.
        let commit = match &env.event {
            Event::MessageCommitted(m) if self.writes.outbox.awaits(&m.message_id) => {
                Some((m.message_id.clone(), m.turn_id.clone()))
            }
            _ => None,
        };
        self.with_view(true, |v, ch| v.apply_durable(env, ch));
        if let Some((m, t)) = commit {
            // Left in the same view change that adds the item, when that
            // change is painted.
            let painted = self.shown.is_none() && self.restore.is_none();
            self.message_committed(&m, &t, painted);
        }
        self.pos.cursor = key;
        self.dirty = true;
        Step::Done
    }

    /// Applies a page's durable events in order; stops at a hole.
    fn apply_page(&mut self, events: &mut [Envelope]) {
        self.counters.events += events.len() as u64;
        for env in events {
            let Some(key) = self.durable_key(env) else {
                continue;
            };
            if let Step::Gap { .. } = self.apply_durable(env, key) {
                break;
            }
        }
    }

    /// A replay or event page arrived.
    pub(super) fn on_page(&mut self, id: super::RequestId, kind: FetchKind, body: &[u8], now: u64) {
        if self.fetch_kind(id).is_some() {
            self.link_page_answered(now);
        }
        if self.is_older(id) {
            return self.on_older_page(body, now);
        }
        if self.keep_prefetched(id, kind, body) {
            return;
        }
        match self.fetch.as_mut() {
            // Its request is over: nothing to abort when the slot moves on.
            Some(f) if f.id == Some(id) && f.kind == kind => f.id = None,
            _ => return,
        }
        self.read_page(kind, body, now);
        self.before_waiting_page(now);
    }

    /// A promoted prefetch may already hold its page: it is read by the next
    /// input (`handle_waiting_page`), after the request for the page after
    /// it, queued here, went out.
    fn before_waiting_page(&mut self, now: u64) {
        if self.fetch.as_ref().is_some_and(|f| f.body.is_some()) {
            self.maybe_prefetch(now);
        }
    }

    pub(super) fn on_waiting_page(&mut self, now: u64) {
        let Some(f) = self.fetch.as_mut() else { return };
        let Some(body) = f.body.take() else { return };
        // Its request is over: nothing to abort when the slot moves on.
        f.id = None;
        let kind = f.kind;
        self.read_page(kind, &body, now);
        self.before_waiting_page(now);
    }

    fn read_page(&mut self, kind: FetchKind, body: &[u8], now: u64) {
        // Where the page was asked from: it must move the cursor past that,
        // with at most `limit` events.
        let (asked, limit) = self
            .fetch
            .as_ref()
            .map_or((self.pos.cursor, u32::MAX), |f| (f.after, f.limit));
        // Each page is read over the last one of its kind (kept until the
        // backlog is read: `end_fetch`).
        match kind {
            FetchKind::Replay => {
                let mut page = self.spare_replay.take().unwrap_or_default();
                match json::utf8(body).and_then(|t| json::read_over(t, &mut page, Payloads::Typed))
                {
                    Ok(()) if over(page.history.len(), limit) => {
                        self.page_over_limit(page.history.len(), limit, now)
                    }
                    Ok(()) if self.over_budget(page.history.len(), body.len()) => {}
                    Ok(()) => self.on_replay_page(&mut page, asked, now),
                    Err(e) => self.page_unreadable(e, now),
                }
                if self.fetch.is_some() {
                    self.spare_replay = Some(page);
                }
            }
            FetchKind::Events => {
                let mut page = self.spare_events.take().unwrap_or_default();
                let payloads = self.payloads();
                match json::utf8(body).and_then(|t| json::read_over(t, &mut page, payloads)) {
                    Ok(()) if over(page.events.len(), limit) => {
                        self.page_over_limit(page.events.len(), limit, now)
                    }
                    Ok(()) if self.over_budget(page.events.len(), body.len()) => {}
                    Ok(()) => self.on_event_page(&mut page, asked, now),
                    Err(e) => self.page_unreadable(e, now),
                }
                if self.fetch.is_some() {
                    self.spare_events = Some(page);
                }
            }
        }
    }

    /// A page that says more is to come but would be asked for again from
    /// the same place (a broken proxy or cache, an empty page, a page that
    /// starts past a hole) is an error, retried with backoff instead of at
    /// once, forever. True when that is the case.
    fn not_advancing(&mut self, asked: u64, now: u64) -> bool {
        if self.pos.cursor != asked {
            return false;
        }
        self.drop_prefetch();
        self.fetch_retry(CoreError::PageNotAdvancing { cursor: asked }, None, now);
        true
    }

    /// Counts a page against the backlog's budget; past it, stops for good
    /// (true).
    fn over_budget(&mut self, events: usize, bytes: usize) -> bool {
        match self.backlog.add(events, bytes, &self.cfg) {
            Some(err) => {
                self.fail(err);
                true
            }
            None => false,
        }
    }

    /// A page whose last event lies more than a page (`replay_page_limit`)
    /// past the head the page itself announced stops for good (true): the
    /// reference server reads both in one snapshot (the event is at most
    /// the head); the slack is for one that reads its head first. Without
    /// it, a server could page new events for ever under a head that never
    /// moves, and every one of them would be kept.
    fn past_head(&mut self, events: &[Envelope], head: u64) -> bool {
        let Some(cursor) = events.iter().rev().find_map(|e| self.durable_key(e)) else {
            return false;
        };
        if cursor <= head.saturating_add(u64::from(self.cfg.replay_page_limit)) {
            return false;
        }
        self.fail(CoreError::HistoryPastHead { cursor, head });
        true
    }

    /// A page with more events than its `limit` is not applied at all but
    /// retried with backoff, as one that does not advance.
    fn page_over_limit(&mut self, len: usize, limit: u32, now: u64) {
        self.drop_prefetch();
        self.fetch_retry(CoreError::PageOverLimit { limit, len }, None, now);
    }

    fn page_unreadable(&mut self, e: JsonError, now: u64) {
        let err = CoreError::BadJson(e.to_string());
        self.notices
            .push_back(Notice::FrameSkipped { error: err.info() });
        self.fetch_retry(err, None, now);
    }

    /// The page after the cursor: the prefetch if it asked for exactly
    /// that, else a fresh request.
    fn next_page(&mut self, kind: FetchKind, now: u64) {
        if !self.promote_prefetch(kind) {
            self.issue_fetch(kind, self.pos.cursor, false, 0, now);
        }
    }

    /// The slot's request (and any prefetch) is over: the backlog is read.
    fn end_fetch(&mut self) {
        self.fetch = None;
        self.asking_tail = false;
        self.drop_prefetch();
        self.drop_spare_pages();
    }

    /// No backlog is being read: its last pages' buffers are freed.
    pub(super) fn drop_spare_pages(&mut self) {
        self.spare_replay = None;
        self.spare_events = None;
    }

    fn on_replay_page(&mut self, page: &mut ReplayPage, asked: u64, now: u64) {
        self.refresh_unproven = false;
        if !self.check_epoch(&page.epoch, now) {
            return;
        }
        self.saw_head(page.head);
        if self.past_head(&page.history, page.head) {
            return;
        }
        if std::mem::take(&mut self.asking_tail) && self.pos.cursor == 0 {
            // The newest page starts after a turn boundary: the cursor
            // jumps there (none from a runtime without the extension).
            if let Some(start) = page.older_cursor.filter(|&s| s > 0) {
                self.pos.cursor = start;
                self.pos.older = start;
                // What this restore loads starts there (its notice says so).
                self.restore = Some(start);
            }
        }
        self.apply_page(&mut page.history);
        if page.has_more && self.not_advancing(asked, now) {
            return;
        }
        self.fetch_backoff.reset();
        if page.has_more {
            self.next_page(FetchKind::Replay, now);
            return;
        }
        self.with_view(true, |v, ch| {
            v.apply_replay_tail(
                &page.boot_id,
                page.live_turn.as_ref(),
                page.tasks.as_ref(),
                ch,
            )
        });
        self.end_fetch();
        self.mode = Mode::Follow;
        self.drain(false, now);
    }

    fn on_event_page(&mut self, page: &mut EventPage, asked: u64, now: u64) {
        self.refresh_unproven = false;
        if !self.check_epoch(&page.epoch, now) {
            return;
        }
        self.saw_head(page.head);
        if self.past_head(&page.events, page.head) {
            return;
        }
        let verify = match &mut self.mode {
            Mode::Restore { verify } | Mode::Repair { verify, .. } => std::mem::take(verify),
            // A poll (`transport.rs`): the page after the cursor, as the
            // stream would have carried it.
            Mode::Follow => false,
            Mode::Unrestored => return,
        };
        let mut skip = 0;
        if verify {
            // The first event must be the one we applied last (rule 4).
            let last = self.pos.last.clone().unwrap_or_default();
            let same = page.events.first().is_some_and(|e| {
                e.seq == Some(self.pos.cursor)
                    && e.event.type_name() == last.type_name
                    && (e.id.is_none() || last.id.is_none() || e.id == last.id)
            });
            if !same {
                let err = CoreError::HistoryMismatch {
                    cursor: self.pos.cursor,
                };
                self.epoch_changed(err, now);
                return;
            }
            skip = 1;
        }
        self.apply_page(&mut page.events[skip..]);
        if page.has_more && self.not_advancing(asked, now) {
            return;
        }
        self.fetch_backoff.reset();
        if page.has_more {
            self.next_page(FetchKind::Events, now);
            return;
        }
        self.end_fetch();
        let lenient = if let Mode::Repair { from_cursor, .. } = self.mode {
            self.counters.gaps_repaired += 1;
            self.notices.push_back(Notice::GapRepaired {
                from_cursor,
                to_cursor: self.pos.cursor,
            });
            if self.pos.cursor == from_cursor {
                self.idle_repairs += 1;
            } else {
                self.idle_repairs = 0;
            }
            true
        } else {
            false
        };
        self.mode = Mode::Follow;
        self.drain(lenient, now);
    }

    /// Applies the held frames in order, dropping overlap; a new gap starts
    /// another repair. When all are applied a pending restore is painted.
    fn drain(&mut self, lenient: bool, now: u64) {
        while let Some((mut frame, bytes)) = self.buffer.pop_front() {
            if let Step::Gap { requeue } = self.apply_frame(&mut frame, lenient) {
                if requeue {
                    self.buffer.push_front(frame, bytes);
                }
                self.start_repair(now);
                return;
            }
        }
        if let Some(from_cursor) = self.restore.take() {
            // Painted with the items of this restore.
            self.painted_commits();
            if self.stream.as_ref().is_some_and(|s| s.hello_seen) {
                self.went_live(now);
            }
            // A new session's backlog is its `session.created`: its title is
            // reported as a change of its own, not as a restore.
            let (status, session) = (self.change.status, self.change.session);
            (self.change.status, self.change.session) = (false, false);
            let unchanged = self.change.is_empty();
            (self.change.status, self.change.session) = (status, session);
            if self.shown.take().is_some() {
                // The live view is replaced: painted and staged anew.
                self.change.reset = true;
                self.progress.reset = true;
            } else if from_cursor == 0 && unchanged {
                // From nothing to nothing to show (a new session): no
                // repaint, no notice (seed 001).
                self.progress.reset = false;
                return;
            }
            self.change.restore_completed = true;
            self.notices.push_back(Notice::Restored {
                from_cursor,
                to_cursor: self.pos.cursor,
            });
        }
    }
}
