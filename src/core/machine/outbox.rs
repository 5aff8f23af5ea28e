//! The outbox: the user's messages from `send` until their
//! `message.committed` is in the view (docs/protocol.md §6, rule 14).
//!
//! A message enters the view at once (`pending`, in send order) and the
//! persisted value (with the scope's state, in one write) before any
//! request for it goes out, so a reload, a closed tab or a browser restart
//! loses nothing: whichever client next restores the scope sends what is
//! queued. Its `message_id` makes a repeat start nothing at the runtime, so
//! what is queued is sent until the runtime accepts it: transport failures,
//! timeouts, 408/429/5xx and `offline` keep it queued (backoff without an
//! attempt limit, sent again at once on `online`, on visibility and when the
//! scope is live again); 401/403 refresh the credentials once; any other
//! 4xx, or an age past [`Config::outbox_max_age_ms`](super::Config), makes
//! it `failed` until the application retries or discards it. One message
//! of a scope is in flight at a time, the oldest queued first: sends go out
//! in order and never twice at once.
//!
//! Tabs that follow one scope share its stored value: a save merges this
//! outbox into the stored one (`persist::merge_stored`), and the ids of the
//! messages that left it (committed, discarded) go with it (`gone`), so
//! that no tab's save drops another's message or brings back one that
//! left. A message is sent under a claim named after it (a Web Lock in a
//! browser) that its client holds from its first attempt until it leaves
//! the outbox: two clients that restored the same message never send it
//! at once, and the one that did not claim it waits for its commit.

use serde::Serialize;

use super::backoff::Backoff;
use super::classify::{classify, HttpClass};
use super::error::{CoreError, ErrorInfo};
use super::types::{Action, RequestId, WriteDone, WriteId, WriteOutcome};
use super::{paths, persist, Machine};
use crate::json;
use crate::protocol::{AnswerQuestion, MessageAccepted, PostMessage};

/// Where a pending message stands, as the view shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingState {
    /// Waiting to be sent (offline, backing off, behind an older message).
    Queued,
    /// A request for it is in flight, or the runtime accepted it and its
    /// `message.committed` has not reached the view yet.
    Sending,
    /// Retrying will not change the answer (a 4xx, or `expired`): it waits
    /// for [`Machine::retry_pending`] or [`Machine::discard_pending`].
    Failed,
}

/// A message of the outbox, as the view shows it (`view.pending`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingMessage {
    /// Its idempotency key.
    pub message_id: String,
    /// The user's text.
    pub text: String,
    /// When it was sent, ms of the wall clock.
    pub at: u64,
    /// Where it stands.
    pub state: PendingState,
    /// Why it failed (`expired`, or the server's code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// An answer of the outbox, as the view shows it on its question
/// (`pendingPrompts[i].answer`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingAnswer {
    /// The answer.
    pub text: String,
    /// When it was given, ms of the wall clock.
    pub at: u64,
    /// Where it stands.
    pub state: PendingState,
    /// Why it failed (`expired`, or the server's code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// A message's (an answer's) persisted form: what it takes to send it
/// after a reload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(super) struct StoredMessage {
    /// Its key: a message's id, an answer's question id.
    pub(super) message_id: String,
    /// An answer to the question `message_id`, not a message.
    #[serde(skip_serializing_if = "is_false")]
    pub(super) answer: bool,
    text: String,
    /// When it was sent: the merged outbox of two tabs is in this order.
    pub(super) at: u64,
    /// Why it failed: a failed message stays failed after a reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<StoredFailure>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
struct StoredFailure {
    code: String,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u64>,
}

fn is_false(b: &bool) -> bool {
    !b
}

crate::json_struct!(StoredMessage {
    message_id: req,
    answer: def,
    text: req,
    at: req,
    failed: def
});
crate::json_struct!(StoredFailure {
    code: req,
    message: def,
    status: def
});

/// One message between `send` and its commit, or one answer between
/// `answer` and its question's end.
#[derive(Debug)]
struct Entry {
    /// A message's `message_id`; an answer's question id.
    key: String,
    /// An answer (`POST .../questions/{key}/answer`), not a message.
    answer: bool,
    text: String,
    at: u64,
    failed: Option<ErrorInfo>,
    /// The attempt in flight.
    request: Option<RequestId>,
    issued_at: u64,
    /// No attempt before this time.
    retry_at: u64,
    backoff: Backoff,
    refreshed: bool,
    /// The runtime accepted it: nothing more is sent.
    accepted: bool,
    /// An attempt asked the IO for its claim: released when it leaves.
    claimed: bool,
    /// Its last attempt found the claim held by another client: not asked
    /// for again before this view caught up with the runtime.
    held_elsewhere: bool,
    /// Its `message.committed` was folded into a view not painted yet (a
    /// restore's): it leaves `pending` when that view is painted.
    committed: bool,
    /// The writes waiting for its outcome (`send`, `retry`).
    waiters: Vec<WriteId>,
    /// An attempt got no answer: the runtime may have applied it (an
    /// answer's `409 question_closed` then means it was).
    maybe_applied: bool,
}

impl Entry {
    fn new(key: String, answer: bool, text: String, at: u64, failed: Option<ErrorInfo>) -> Self {
        Entry {
            key,
            answer,
            text,
            at,
            failed,
            request: None,
            issued_at: 0,
            retry_at: 0,
            backoff: Backoff::default(),
            refreshed: false,
            accepted: false,
            claimed: false,
            held_elsewhere: false,
            committed: false,
            waiters: Vec::new(),
            maybe_applied: false,
        }
    }

    /// Still to be sent.
    fn queued(&self) -> bool {
        self.failed.is_none() && !self.accepted && !self.committed
    }

    fn state(&self) -> PendingState {
        if self.failed.is_some() {
            PendingState::Failed
        } else if self.request.is_some() || self.accepted || self.committed {
            PendingState::Sending
        } else {
            PendingState::Queued
        }
    }

    fn shown(&self) -> PendingMessage {
        PendingMessage {
            message_id: self.key.clone(),
            text: self.text.clone(),
            at: self.at,
            state: self.state(),
            error: self.failed.clone(),
        }
    }

    fn stored(&self) -> StoredMessage {
        StoredMessage {
            message_id: self.key.clone(),
            answer: self.answer,
            text: self.text.clone(),
            at: self.at,
            failed: self.failed.as_ref().map(|e| StoredFailure {
                code: e.code.clone(),
                message: e.message.clone(),
                status: e.status.map(u64::from),
            }),
        }
    }
}

/// The messages of one scope between `send` and their commit, in send order.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    entries: Vec<Entry>,
    /// An entry changed since the last `Persist`: written before any send.
    unsaved: bool,
    /// The ids of messages that left it (committed, discarded), newest
    /// last, at most `GONE_KEPT`: stored, so that another tab's save does
    /// not bring them back.
    gone: Vec<String>,
    /// The claims of messages that left, let go once the save that lists
    /// them in `gone` is issued: a client that gets one next and restores
    /// the stored value does not find its message there.
    leaving: Vec<String>,
}

impl Outbox {
    /// True when `request` is an attempt of an outbox message.
    pub(super) fn owns(&self, request: RequestId) -> bool {
        self.position(request).is_some()
    }

    fn position(&self, request: RequestId) -> Option<usize> {
        self.entries.iter().position(|e| e.request == Some(request))
    }

    /// The message (`answer`: the answer to the question) `key`.
    fn find(&self, answer: bool, key: &str) -> Option<usize> {
        (self.entries.iter()).position(|e| e.answer == answer && e.key == key)
    }

    /// The entry `retry` and `discard` name by `key`: the message of that
    /// `message_id`, else the answer to the question of that id.
    fn named(&self, key: &str) -> Option<usize> {
        self.find(false, key).or_else(|| self.find(true, key))
    }

    /// The persisted form of the outbox.
    pub(super) fn stored(&self) -> Vec<StoredMessage> {
        self.entries.iter().map(Entry::stored).collect()
    }

    /// The ids of the messages that left it, stored beside it.
    pub(super) fn gone(&self) -> &[String] {
        &self.gone
    }

    /// `key` left the outbox for good.
    fn forget(&mut self, key: &str) {
        self.gone.retain(|g| g != key);
        self.gone.push(key.to_owned());
        self.gone
            .drain(..self.gone.len().saturating_sub(persist::GONE_KEPT));
        self.unsaved = true;
    }

    /// Whether `message_id` is pending (an empty outbox answers at once:
    /// a restore folds thousands of commits).
    pub(super) fn awaits(&self, message_id: &str) -> bool {
        !self.entries.is_empty() && self.find(false, message_id).is_some()
    }

    /// Whether anything is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What an answer means for the message in flight.
enum Verdict {
    Accepted(String),
    Failed(CoreError),
    Retry(Option<u64>),
    /// Another client holds its claim: it waits, without the claim.
    Claimed,
    Refresh,
    Resend,
}

/// The name of the claim a message (an answer) is sent under: one per
/// message (question) across the clients of a browser profile.
fn claim_name(e: &Entry) -> String {
    let kind = if e.answer { "answer:" } else { "message:" };
    "replay-client:".to_owned() + kind + &e.key
}

/// What a waiting write resolves to once its entry is accepted.
fn outcome(answer: bool, turn_id: &str) -> WriteOutcome {
    if answer {
        WriteOutcome::Answered
    } else {
        WriteOutcome::Sent {
            turn_id: turn_id.to_owned(),
        }
    }
}

impl Machine {
    /// `view.pending`: the outbox in send order.
    pub fn pending_messages(&self) -> Vec<PendingMessage> {
        let entries = self.writes.outbox.entries.iter();
        entries.filter(|e| !e.answer).map(Entry::shown).collect()
    }

    /// The answer of the outbox to `question_id` (a prompt's `answer`).
    pub fn pending_answer(&self, question_id: &str) -> Option<PendingAnswer> {
        let e = &self.writes.outbox.entries[self.writes.outbox.find(true, question_id)?];
        Some(PendingAnswer {
            text: e.text.clone(),
            at: e.at,
            state: e.state(),
            error: e.failed.clone(),
        })
    }

    /// Puts a message in the outbox (or, when its `message_id` is there
    /// already, waits for that one): shown at once, persisted before its
    /// first request.
    pub(super) fn enqueue_message(
        &mut self,
        id: WriteId,
        message_id: String,
        text: String,
        now: u64,
    ) {
        match self.writes.outbox.find(false, &message_id) {
            // A send of a message already pending waits for it (a failed
            // one is retried).
            Some(i) => self.retry_entry(i, id, now),
            None => self.push_entry(id, message_id, false, text, now),
        }
    }

    fn push_entry(&mut self, id: WriteId, key: String, answer: bool, text: String, now: u64) {
        self.writes.outbox.gone.retain(|g| *g != key);
        let mut e = Entry::new(key, answer, text, self.wall_now(now), None);
        e.waiters.push(id);
        self.writes.outbox.entries.push(e);
        self.writes.outbox.unsaved = true;
        self.change.pending = true;
    }

    /// Puts an answer in the outbox, keyed by its question: shown on the
    /// prompt at once, persisted before its first request, sent in order
    /// with the messages. The same answer again waits for the first; a
    /// different one replaces a `failed` one and is refused
    /// (`answer_pending`) while another is queued or sent.
    pub(super) fn enqueue_answer(
        &mut self,
        id: WriteId,
        question_id: String,
        answer: String,
        now: u64,
    ) {
        let Some(i) = self.writes.outbox.find(true, &question_id) else {
            return self.push_entry(id, question_id, true, answer, now);
        };
        let e = &mut self.writes.outbox.entries[i];
        if e.text != answer && e.failed.is_none() {
            let result = Err(CoreError::AnswerPending);
            return self.writes.done.push_back(WriteDone { id, result });
        }
        e.text = answer;
        self.retry_entry(i, id, now);
    }

    /// `retry(id)`: a failed message (`id`: its `message_id`) or answer
    /// (`id`: its question's id) is queued again (its age runs anew: the
    /// user asked for it now). `None` when it is not pending.
    pub fn retry_pending(&mut self, id: &str, now: u64) -> Option<WriteId> {
        let i = self.writes.outbox.named(id)?;
        let id = self.writes.next_write_id();
        self.retry_entry(i, id, now);
        self.after_input(now);
        Some(id)
    }

    fn retry_entry(&mut self, i: usize, id: WriteId, now: u64) {
        let wall = self.wall_now(now);
        let e = &mut self.writes.outbox.entries[i];
        e.waiters.push(id);
        if e.failed.take().is_some() {
            e.at = wall;
            e.backoff.reset();
            e.refreshed = false;
            e.retry_at = now;
            self.writes.outbox.unsaved = true;
            self.change.pending = true;
        }
    }

    /// `discard(id)`: the message (`id`: its `message_id`) or answer (`id`:
    /// its question's id) leaves the outbox and is never sent again; a
    /// request in flight is aborted (it may still have reached the
    /// runtime). False when it is not pending or the runtime already
    /// accepted it.
    pub fn discard_pending(&mut self, id: &str, now: u64) -> bool {
        let Some(i) = self.writes.outbox.named(id) else {
            return false;
        };
        let e = &self.writes.outbox.entries[i];
        if e.accepted || e.committed {
            return false;
        }
        let e = self.writes.outbox.entries.remove(i);
        self.left(&e);
        self.change.pending = true;
        self.dirty = true;
        for w in e.waiters {
            self.writes.done.push_back(WriteDone {
                id: w,
                result: Err(CoreError::Discarded),
            });
        }
        self.after_input(now);
        true
    }

    /// The messages of a stored value: those not committed in its state
    /// are pending again, before any sent since (their first requests wait
    /// for the stored value: `Machine::load`).
    pub(super) fn restore_outbox(&mut self, stored: Vec<StoredMessage>, gone: Vec<String>) {
        let outbox = &mut self.writes.outbox;
        for id in gone.into_iter().rev() {
            if !outbox.gone.contains(&id) {
                outbox.gone.insert(0, id);
            }
        }
        let left = outbox.gone.len().saturating_sub(persist::GONE_KEPT);
        outbox.gone.drain(..left);
        let outbox = &self.writes.outbox;
        let session = self.view.as_session();
        let done = |m: &StoredMessage| {
            session.is_some_and(|s| match m.answer {
                true => s.question_resolved(&m.message_id),
                false => s.has_message(&m.message_id),
            })
        };
        let mut entries: Vec<Entry> = stored
            .into_iter()
            .filter(|m| !done(m) && !outbox.gone.contains(&m.message_id))
            .map(|m| {
                let failed = m.failed.map(|f| ErrorInfo {
                    code: f.code,
                    message: f.message,
                    status: f.status.and_then(|s| u16::try_from(s).ok()),
                });
                Entry::new(m.message_id, m.answer, m.text, m.at, failed)
            })
            .collect();
        let newer = std::mem::take(&mut self.writes.outbox.entries);
        for e in newer {
            match (entries.iter_mut()).find(|s| s.answer == e.answer && s.key == e.key) {
                Some(s) => s.waiters.extend(e.waiters),
                None => {
                    self.writes.outbox.unsaved = true;
                    entries.push(e);
                }
            }
        }
        if !entries.is_empty() {
            self.change.pending = true;
        }
        self.writes.outbox.entries = entries;
    }

    /// A `message.committed` for `message_id` was folded: its message is
    /// sent; it leaves `pending` in this view change when that view is
    /// painted (`painted`), else when the restore that folded it is.
    pub(super) fn message_committed(&mut self, message_id: &str, turn_id: &str, painted: bool) {
        let Some(i) = self.writes.outbox.find(false, message_id) else {
            return;
        };
        if painted {
            let e = self.writes.outbox.entries.remove(i);
            self.left(&e);
            self.settle_waiters(e.waiters, Ok(outcome(false, turn_id)));
            self.change.pending = true;
        } else {
            let e = &mut self.writes.outbox.entries[i];
            e.committed = true;
            if let Some(id) = e.request.take() {
                self.actions.push_back(Action::Abort { id });
            }
            let waiters = std::mem::take(&mut e.waiters);
            self.settle_waiters(waiters, Ok(outcome(false, turn_id)));
        }
        // Stored with the state that holds its commit.
        self.writes.outbox.unsaved = true;
    }

    /// The state was discarded (another epoch, a rejected cursor): a
    /// message accepted whose commit is not in the new state is sent again
    /// (a log recreated may not have it; if it has, the repeat starts
    /// nothing and its commit comes with the restore).
    pub(super) fn outbox_log_recreated(&mut self) {
        for e in &mut self.writes.outbox.entries {
            e.accepted = false;
        }
    }

    /// A restore was painted: what it committed leaves `pending` with it.
    pub(super) fn painted_commits(&mut self) {
        let mut i = 0;
        while let Some(e) = self.writes.outbox.entries.get(i) {
            if e.committed {
                let e = self.writes.outbox.entries.remove(i);
                self.left(&e);
                self.change.pending = true;
            } else {
                i += 1;
            }
        }
    }

    /// `e` left the outbox (committed, discarded): its request in flight is
    /// aborted, its id kept in `gone`, its claim released after the save
    /// that lists it there (`save_outbox`).
    fn left(&mut self, e: &Entry) {
        if let Some(id) = e.request {
            self.actions.push_back(Action::Abort { id });
        }
        if e.claimed {
            self.writes.outbox.leaving.push(claim_name(e));
        }
        self.writes.outbox.forget(&e.key);
    }

    /// Writes what changed in the outbox, forced past the throttle (a new
    /// message is stored before it is sent, in the same value as the
    /// state), then lets go of the claims of the messages that left.
    fn save_outbox(&mut self, now: u64) {
        if self.writes.outbox.unsaved {
            self.writes.outbox.unsaved = false;
            self.dirty = true;
            self.flush_persist(now);
        }
        for claim in std::mem::take(&mut self.writes.outbox.leaving) {
            self.actions.push_back(Action::Release { claim });
        }
    }

    /// This view holds every durable event the runtime had when it last
    /// said its head: the scope is live and its cursor there. A commit
    /// another client made before then is in it.
    fn caught_up(&self) -> bool {
        self.derive_state() == super::State::Live && self.pos.cursor >= self.known_head
    }

    /// A queued entry whose claim another client held waits until this
    /// view caught up: if that client committed it, the commit reaches
    /// this view first and it leaves unsent.
    fn waits_for_view(&self, e: &Entry) -> bool {
        e.held_elsewhere && !self.caught_up()
    }

    /// Ends the waiting `send`s, `answer`s and `retry`s: with the turn the
    /// message started (an answer: `Answered`), or the error that failed it.
    fn settle_waiters(&mut self, waiters: Vec<WriteId>, result: Result<WriteOutcome, &CoreError>) {
        for id in waiters {
            let result = result.clone().map_err(CoreError::clone);
            self.writes.done.push_back(WriteDone { id, result });
        }
    }

    /// The answers whose question the painted view shows ended (answered
    /// here or elsewhere, declined, ended with its turn) leave the outbox:
    /// nothing is sent for a closed question. One in flight waits for its
    /// reply (the runtime writes the end before it replies); one that may
    /// have reached the runtime resolves; one that did not fails with
    /// `question_closed`.
    fn drop_closed_answers(&mut self) {
        let Some(s) = self.view.as_session() else {
            return;
        };
        let closed = (self.writes.outbox.entries.iter())
            .position(|e| e.answer && e.request.is_none() && s.question_resolved(&e.key));
        if let Some(i) = closed {
            let e = self.writes.outbox.entries.remove(i);
            self.left(&e);
            self.change.pending = true;
            let result = match e.accepted || e.maybe_applied {
                true => Ok(WriteOutcome::Answered),
                false => Err(&CoreError::QuestionClosed),
            };
            self.settle_waiters(e.waiters, result);
            // The next one, if any, at the next input: answers are few.
            self.drop_closed_answers();
        }
    }

    /// After every input: expiry, the write that makes a new message
    /// durable, then the next send.
    pub(super) fn pump_outbox(&mut self, now: u64) {
        if self.closed || self.loading.is_some() {
            return;
        }
        if self.writes.outbox.is_empty() {
            // The last one left: its save and its claim.
            return self.save_outbox(now);
        }
        if !self.withheld() {
            // Left in the view change that shows its question ended.
            self.drop_closed_answers();
        }
        let wall = self.wall_now(now);
        let max_age = self.cfg.outbox_max_age_ms;
        let expired: Vec<usize> = (self.writes.outbox.entries.iter().enumerate())
            .filter(|(_, e)| {
                e.queued() && e.request.is_none() && wall.saturating_sub(e.at) >= max_age
            })
            .map(|(i, _)| i)
            .collect();
        for i in expired {
            self.fail_entry(
                i,
                CoreError::Expired {
                    max_age_ms: max_age,
                },
            );
        }
        self.save_outbox(now);
        if self.outbox_held() {
            return;
        }
        let outbox = &self.writes.outbox;
        let Some(i) = outbox.entries.iter().position(Entry::queued) else {
            return;
        };
        let e = &outbox.entries[i];
        if e.request.is_some() || now < e.retry_at || self.waits_for_view(e) {
            return;
        }
        // Every message before it was accepted or failed.
        self.send_entry(i, now);
    }

    fn send_entry(&mut self, i: usize, now: u64) {
        let request = self.alloc_id();
        let Some(session) = self.session_id() else {
            return;
        };
        let e = &mut self.writes.outbox.entries[i];
        e.request = Some(request);
        e.issued_at = now;
        e.claimed = true;
        let (path_and_query, body) = if e.answer {
            let answer = e.text.clone();
            let body = json::to_string(&AnswerQuestion { answer });
            (paths::answer(&session, &e.key), body)
        } else {
            let body = json::to_string(&PostMessage {
                message_id: e.key.clone(),
                text: e.text.clone(),
            });
            (paths::post_message(&session), body)
        };
        self.change.pending = true;
        self.actions.push_back(Action::Post {
            id: request,
            path_and_query,
            body: body.unwrap_or_default(),
            claim: Some(claim_name(e)),
        });
    }

    fn fail_entry(&mut self, i: usize, error: CoreError) {
        // Another client that holds it may try it: it fails there too, or
        // the runtime now takes it.
        let e = &mut self.writes.outbox.entries[i];
        if e.claimed {
            self.actions.push_back(Action::Release {
                claim: claim_name(e),
            });
        }
        e.claimed = false;
        e.request = None;
        e.failed = Some(error.info());
        let waiters = std::mem::take(&mut e.waiters);
        self.writes.outbox.unsaved = true;
        self.change.pending = true;
        self.settle_waiters(waiters, Err(&error));
    }

    /// The earliest time the outbox needs the timer: a retry, an attempt's
    /// timeout, a queued message's expiry.
    pub(super) fn outbox_deadline(&self) -> Option<u64> {
        let outbox = &self.writes.outbox;
        let mut next = None::<u64>;
        let mut at = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        let head = outbox.entries.iter().find(|e| e.queued());
        if let Some(e) = head {
            match e.request {
                Some(_) => at(e.issued_at.saturating_add(self.cfg.fetch_timeout_ms)),
                None if !self.outbox_held() && !self.waits_for_view(e) => at(e.retry_at),
                None => {}
            }
        }
        for e in outbox.entries.iter().filter(|e| e.queued()) {
            // The wall clock's expiry, on the machine's clock.
            let wall_due = e.at.saturating_add(self.cfg.outbox_max_age_ms);
            at(wall_due.saturating_add_signed(self.wall_offset.saturating_neg()));
        }
        next
    }

    /// Timer work: an attempt past the timeout is aborted and retried.
    pub(super) fn outbox_timers(&mut self, now: u64) {
        let timeout = self.cfg.fetch_timeout_ms;
        let late = self.writes.outbox.entries.iter().find_map(|e| {
            let waited = now.saturating_sub(e.issued_at);
            e.request.filter(|_| waited >= timeout).map(|r| (r, waited))
        });
        if let Some((request, waited)) = late {
            self.actions.push_back(Action::Abort { id: request });
            self.outbox_failed(request, CoreError::Timeout { after_ms: waited }, now);
        }
    }

    /// The scope is reachable again (`online`, visible, live): a queued
    /// message waiting for its backoff is sent now.
    pub(super) fn outbox_kick(&mut self, now: u64) {
        if let Some(e) = self.writes.outbox.entries.iter_mut().find(|e| e.queued()) {
            if e.request.is_none() {
                e.retry_at = now;
                e.backoff.reset();
            }
        }
    }

    /// A transport failure or timeout of an attempt: queued again.
    pub(super) fn outbox_failed(&mut self, request: RequestId, error: CoreError, now: u64) {
        if let Some(i) = self.writes.outbox.position(request) {
            self.writes.outbox.entries[i].maybe_applied = true;
        }
        let verdict = match error {
            CoreError::Credentials(_) => Verdict::Failed(error),
            CoreError::Claimed => Verdict::Claimed,
            _ => Verdict::Retry(None),
        };
        self.settle_entry(request, verdict, now);
    }

    /// A non-2xx answer to an attempt (rule 9's classifier).
    pub(super) fn outbox_http_error(
        &mut self,
        request: RequestId,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
        now: u64,
    ) {
        let Some(i) = self.writes.outbox.position(request) else {
            return;
        };
        let e = &self.writes.outbox.entries[i];
        let (refreshed, replied_lost) = (e.refreshed, e.answer && e.maybe_applied);
        let verdict = match classify(status, retry_after, body, self.wall_now(now)) {
            HttpClass::RefreshCredentials { .. }
                if !self.sent_with_current_credentials(request) =>
            {
                Verdict::Resend
            }
            HttpClass::RefreshCredentials { .. } if !refreshed => Verdict::Refresh,
            HttpClass::Retry { after, .. } => Verdict::Retry(after),
            // An answer's first try was applied, its reply lost.
            HttpClass::Fail(CoreError::HttpStatus {
                status: 409, code, ..
            }) if replied_lost && code == "question_closed" => Verdict::Accepted(String::new()),
            HttpClass::RefreshCredentials { error }
            | HttpClass::CursorRejected { error }
            | HttpClass::Fail(error) => Verdict::Failed(error),
        };
        self.settle_entry(request, verdict, now);
    }

    /// The 2xx answer to an attempt: accepted, once however often sent.
    pub(super) fn outbox_accepted(&mut self, request: RequestId, body: &[u8], now: u64) {
        // An answer that cannot be read is asked for again: the message is
        // idempotent, and the next answer names its turn.
        let answer = (self.writes.outbox.position(request))
            .is_some_and(|i| self.writes.outbox.entries[i].answer);
        let verdict = match json::from_slice::<MessageAccepted>(body) {
            _ if answer => Verdict::Accepted(String::new()),
            Ok(a) => Verdict::Accepted(a.turn_id),
            Err(_) => Verdict::Retry(None),
        };
        self.settle_entry(request, verdict, now);
    }

    fn settle_entry(&mut self, request: RequestId, verdict: Verdict, now: u64) {
        let Some(i) = self.writes.outbox.position(request) else {
            return;
        };
        self.change.pending = true;
        let e = &mut self.writes.outbox.entries[i];
        e.request = None;
        e.held_elsewhere = matches!(verdict, Verdict::Claimed);
        match verdict {
            Verdict::Accepted(turn_id) => {
                e.accepted = true;
                let (answer, waiters) = (e.answer, std::mem::take(&mut e.waiters));
                self.settle_waiters(waiters, Ok(outcome(answer, &turn_id)));
                // A repeat of a message whose commit is shown already: no
                // second commit will come for it (an answer: its question's
                // end drops it, `drop_closed_answers`).
                let e = &self.writes.outbox.entries[i];
                if !e.answer
                    && self
                        .view()
                        .as_session()
                        .is_some_and(|s| s.has_message(&e.key))
                {
                    let e = self.writes.outbox.entries.remove(i);
                    self.left(&e);
                }
            }
            Verdict::Failed(error) => self.fail_entry(i, error),
            Verdict::Refresh => {
                e.refreshed = true;
                self.refresh_credentials();
                self.send_entry(i, now);
            }
            Verdict::Resend => self.send_entry(i, now),
            Verdict::Claimed => {
                // Not held here: nothing to release.
                e.claimed = false;
                let delay = e.backoff.next_delay(&self.cfg.backoff, &mut self.rng, 0);
                e.retry_at = now.saturating_add(delay);
            }
            Verdict::Retry(hint) => {
                let delay =
                    e.backoff
                        .next_delay(&self.cfg.backoff, &mut self.rng, hint.unwrap_or(0));
                e.retry_at = now.saturating_add(delay);
            }
        }
    }

    /// `close()`: the waiting writes end with `closed`, a request in flight
    /// is aborted; the messages stay stored, for the next client of the
    /// scope to send.
    pub(super) fn close_outbox(&mut self) {
        let mut waiters = Vec::new();
        for e in &mut self.writes.outbox.entries {
            if let Some(id) = e.request.take() {
                self.actions.push_back(Action::Abort { id });
            }
            waiters.append(&mut e.waiters);
        }
        self.settle_waiters(waiters, Err(&CoreError::Closed));
    }

    /// Nothing is sent: offline, the page hidden for good (`pagehide`),
    /// closed or the stored value still being read. A client that failed
    /// still sends: the runtime's answer settles the message.
    fn outbox_held(&self) -> bool {
        self.closed || self.offline || self.suspended || self.loading.is_some()
    }

    /// The session a message goes to.
    fn session_id(&self) -> Option<String> {
        match &self.cfg.target {
            super::Target::Scoped { scope_id, .. } if self.cfg.target.is_session() => {
                Some(scope_id.clone())
            }
            _ => None,
        }
    }
}
