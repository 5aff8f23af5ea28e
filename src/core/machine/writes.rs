//! The application's writes (PROTOCOL.md §4.4) as machine work: a write
//! enters as [`Machine::handle_write`], leaves as [`Action::Post`] requests,
//! and ends as one [`WriteDone`] from [`Machine::poll_write_done`].
//!
//! Every write carries what makes a repeat harmless (rule 11): a message its
//! client-chosen `message_id`, an answer its question, a cancel the turn it
//! stops. Messages and answers go through the outbox (`outbox.rs`: stored,
//! sent until the runtime takes them). A cancel is never stored: it is sent
//! at once, and transport failures, timeouts, 408/429/5xx are retried with
//! the writes' own backoff only while its turn has not ended in the view (a
//! later retry could only find it over); a cancel that names no turn (none
//! was live) is sent once. A 401/403 refreshes the credentials once.

use super::backoff::Backoff;
use super::classify::{classify, HttpClass};
use super::error::CoreError;
use super::outbox::Outbox;
use super::types::{Action, RequestId, Write, WriteDone, WriteId, WriteOutcome};
use super::{paths, Machine};
use crate::json;
use crate::protocol::{CancelAccepted, CancelTurn};

/// One cancel between its first request and its outcome.
#[derive(Debug)]
pub(super) struct PendingWrite {
    id: WriteId,
    /// The turn it stops (`None`: whichever runs; then never retried).
    turn_id: Option<String>,
    path: String,
    body: String,
    /// The attempt in flight; `None` while waiting for `retry_at`.
    request: Option<RequestId>,
    issued_at: u64,
    retry_at: Option<u64>,
    backoff: Backoff,
    refreshed: bool,
}

/// The machine's writes in flight.
#[derive(Debug, Default)]
pub(super) struct Writes {
    pending: Vec<PendingWrite>,
    pub(super) done: std::collections::VecDeque<WriteDone>,
    next_id: u64,
    /// The messages (`Write::Send`) until their commit: `outbox.rs`.
    pub(super) outbox: Outbox,
}

impl Writes {
    pub(super) fn next_write_id(&mut self) -> WriteId {
        self.next_id += 1;
        WriteId(self.next_id)
    }

    /// The earliest time a write needs the timer (retry or attempt timeout).
    pub(super) fn deadline(&self, timeout_ms: u64) -> Option<u64> {
        self.pending
            .iter()
            .map(|w| match w.request {
                Some(_) => w.issued_at.saturating_add(timeout_ms),
                None => w.retry_at.unwrap_or(0),
            })
            .min()
    }

    /// No cancel is pending.
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    fn position(&self, request: RequestId) -> Option<usize> {
        self.pending.iter().position(|w| w.request == Some(request))
    }

    /// True when `request` is an attempt of a pending write.
    pub(super) fn owns(&self, request: RequestId) -> bool {
        self.position(request).is_some() || self.outbox.owns(request)
    }
}

/// What an answer means for a write.
enum Verdict {
    Done(Result<WriteOutcome, CoreError>),
    Retry {
        error: CoreError,
        hint: Option<u64>,
    },
    Refresh,
    /// Refused with credentials a refresh has since replaced: sent again.
    Resend,
}

impl Machine {
    /// Starts a write; its outcome comes from [`poll_write_done`](Self::poll_write_done).
    /// Writes need a session target; after [`close`](Self::close) they fail
    /// with `closed`. A `Cancel` without a turn names the turn the view shows
    /// live, so that a retried cancel can never stop the turn after it.
    pub fn handle_write(&mut self, write: Write, now: u64) -> WriteId {
        let id = self.writes.next_write_id();
        let session = match &self.cfg.target {
            super::Target::Scoped { scope_id, .. } if self.cfg.target.is_session() => {
                Some(scope_id.clone())
            }
            _ => None,
        };
        let Some(session) = session.filter(|_| !self.closed) else {
            let error = if self.closed {
                CoreError::Closed
            } else {
                CoreError::NotASession
            };
            self.writes.done.push_back(WriteDone {
                id,
                result: Err(error),
            });
            return id;
        };
        let turn_id = match write {
            Write::Send { message_id, text } => {
                self.enqueue_message(id, message_id, text, now);
                self.after_input(now);
                return id;
            }
            Write::Answer {
                question_id,
                answer,
            } => {
                self.enqueue_answer(id, question_id, answer, now);
                self.after_input(now);
                return id;
            }
            Write::Cancel { turn_id } => {
                let live = self
                    .view
                    .as_session()
                    .and_then(|s| s.overlay())
                    .map(|o| o.turn_id.clone());
                turn_id.or(live)
            }
        };
        // A plain struct of strings: encoding cannot fail.
        let body = json::to_string(&CancelTurn {
            turn_id: turn_id.clone(),
        });
        self.writes.pending.push(PendingWrite {
            id,
            turn_id,
            path: paths::cancel(&session),
            body: body.unwrap_or_default(),
            request: None,
            issued_at: now,
            retry_at: Some(now),
            backoff: Backoff::default(),
            refreshed: false,
        });
        self.send_write(id, now);
        self.after_input(now);
        id
    }

    /// The 2xx answer to an [`Action::Post`], with its body.
    pub fn handle_post_answer(&mut self, id: RequestId, body: &[u8], now: u64) {
        self.answers.answered(id);
        if self.writes.outbox.owns(id) {
            self.outbox_accepted(id, body, now);
            self.after_input(now);
        } else if let Some(i) = self.writes.position(id) {
            let reply: CancelAccepted = json::from_slice(body).unwrap_or_default();
            let outcome = WriteOutcome::Cancelled {
                turn_id: reply.turn_id,
            };
            self.settle_write(i, Verdict::Done(Ok(outcome)), now);
            self.after_input(now);
        }
    }

    /// The next write that ended.
    #[must_use]
    pub fn poll_write_done(&mut self) -> Option<WriteDone> {
        self.writes.done.pop_front()
    }

    /// Writes not yet ended.
    pub fn writes_pending(&self) -> usize {
        self.writes.pending.len()
    }

    fn send_write(&mut self, id: WriteId, now: u64) {
        let request = self.alloc_id();
        let Some(w) = self.writes.pending.iter_mut().find(|w| w.id == id) else {
            return;
        };
        w.request = Some(request);
        w.issued_at = now;
        w.retry_at = None;
        self.actions.push_back(Action::Post {
            id: request,
            path_and_query: w.path.clone(),
            body: w.body.clone(),
            claim: None,
        });
    }

    /// A transport failure or timeout of a write attempt.
    pub(super) fn write_failed(&mut self, id: RequestId, error: CoreError, now: u64) -> bool {
        if self.writes.outbox.owns(id) {
            self.outbox_failed(id, error, now);
            return true;
        }
        let Some(i) = self.writes.position(id) else {
            return false;
        };
        // No answer: the server may have applied it. Retrying is safe (the
        // cancel names its turn) and tells us.
        let verdict = match error {
            CoreError::Credentials(_) => Verdict::Done(Err(error)),
            error => Verdict::Retry { error, hint: None },
        };
        self.settle_write(i, verdict, now);
        true
    }

    /// A non-2xx answer to a write attempt (rule 9, as for reads).
    pub(super) fn write_http_error(
        &mut self,
        id: RequestId,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
        now: u64,
    ) -> bool {
        if self.writes.outbox.owns(id) {
            self.outbox_http_error(id, status, retry_after, body, now);
            return true;
        }
        let Some(i) = self.writes.position(id) else {
            return false;
        };
        let w = &self.writes.pending[i];
        // The one classifier of reads and writes (rule 9).
        let verdict = match classify(status, retry_after, body, self.wall_now(now)) {
            HttpClass::RefreshCredentials { .. } if !self.sent_with_current_credentials(id) => {
                Verdict::Resend
            }
            HttpClass::RefreshCredentials { .. } if !w.refreshed => Verdict::Refresh,
            HttpClass::Retry { after, error } => Verdict::Retry { error, hint: after },
            HttpClass::RefreshCredentials { error }
            | HttpClass::CursorRejected { error }
            | HttpClass::Fail(error) => Verdict::Done(Err(error)),
        };
        self.settle_write(i, verdict, now);
        true
    }

    fn settle_write(&mut self, i: usize, verdict: Verdict, now: u64) {
        let w = &mut self.writes.pending[i];
        w.request = None;
        let id = w.id;
        let result = match verdict {
            Verdict::Done(result) => result,
            Verdict::Refresh => {
                w.refreshed = true;
                self.refresh_credentials();
                self.send_write(id, now);
                return;
            }
            Verdict::Resend => {
                self.send_write(id, now);
                return;
            }
            Verdict::Retry { error, hint } => {
                let last = w.backoff.attempts() + 1 >= self.cfg.write_attempts;
                if last || w.turn_id.is_none() {
                    Err(error)
                } else {
                    let delay = w.backoff.next_delay(
                        &self.cfg.write_backoff,
                        &mut self.rng,
                        hint.unwrap_or(0),
                    );
                    w.retry_at = Some(now.saturating_add(delay));
                    return;
                }
            }
        };
        self.writes.pending.remove(i);
        self.writes.done.push_back(WriteDone { id, result });
    }

    /// Timer work of writes: attempts past the timeout are aborted and
    /// retried, due retries are sent.
    pub(super) fn write_timers(&mut self, now: u64) {
        let timeout = self.cfg.fetch_timeout_ms;
        let late: Vec<(RequestId, u64)> = self
            .writes
            .pending
            .iter()
            .filter_map(|w| {
                let waited = now.saturating_sub(w.issued_at);
                w.request.filter(|_| waited >= timeout).map(|r| (r, waited))
            })
            .collect();
        for (request, waited) in late {
            self.actions.push_back(Action::Abort { id: request });
            self.write_failed(request, CoreError::Timeout { after_ms: waited }, now);
        }
        let due: Vec<WriteId> = self
            .writes
            .pending
            .iter()
            .filter(|w| w.request.is_none() && w.retry_at.is_some_and(|t| now >= t))
            .map(|w| w.id)
            .collect();
        for id in due {
            self.send_write(id, now);
        }
        self.outbox_timers(now);
    }

    /// A cancel waiting to be retried whose turn the view shows ended is
    /// not sent again: it resolves to that turn when the turn ended
    /// cancelled (by it or by anyone), to `None` when it ended otherwise.
    pub(super) fn drop_ended_cancels(&mut self) {
        let Some(s) = self.view.as_session() else {
            return;
        };
        let ended = self.writes.pending.iter().position(|w| {
            w.request.is_none()
                && w.turn_id
                    .as_deref()
                    .is_some_and(|t| s.turn_outcome(t).is_some())
        });
        if let Some(i) = ended {
            let w = self.writes.pending.remove(i);
            let t = w.turn_id.filter(|t| s.turn_outcome(t) == Some("cancelled"));
            let result = Ok(WriteOutcome::Cancelled { turn_id: t });
            self.writes.done.push_back(WriteDone { id: w.id, result });
            self.drop_ended_cancels();
        }
    }

    /// `close()`: every pending write ends with `closed`, its request
    /// aborted; the outbox's messages stay stored for the next client.
    pub(super) fn close_writes(&mut self) {
        self.close_outbox();
        for w in std::mem::take(&mut self.writes.pending) {
            if let Some(id) = w.request {
                self.actions.push_back(Action::Abort { id });
            }
            self.writes.done.push_back(WriteDone {
                id: w.id,
                result: Err(CoreError::Closed),
            });
        }
    }
}
