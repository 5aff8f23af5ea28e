//! Requests and their fate: opening the stream, fetching pages, retrying with
//! backoff, acting on HTTP error classes (rule 9, [`classify`]), the stall
//! watchdog, lifecycle.

use super::answers::StreamEvent;
use super::classify::{classify, HttpClass};
use super::error::CoreError;
use super::types::{Action, FetchKind, Lifecycle, Notice, RequestId};
use super::{paths, FetchSlot, Machine, Mode, StreamConn};
use crate::sse::{SseItem, SseParser};

/// How the runtime looks from the request that gates progress (the page
/// fetch behind a barrier, else the stream), for the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// Nothing failed since the last answer, or the runtime answered since.
    Answering,
    /// The request failed and waits for its retry timer.
    Waiting,
    /// Its retry is in flight, and nothing has answered since it failed.
    Retrying,
}

/// Which request an answer is about.
enum Req {
    Stream,
    Fetch,
    /// A speculative page: its failures are dropped, never retried.
    Prefetch,
}

impl Machine {
    /// The page a fetch or a prefetch in flight under `id` asks for.
    pub(super) fn fetch_kind(&self, id: RequestId) -> Option<FetchKind> {
        if self.is_older(id) {
            return Some(FetchKind::Replay);
        }
        match self.fetch.as_ref() {
            Some(f) if f.id == Some(id) => Some(f.kind),
            _ => self.prefetch.iter().find(|p| p.id == id).map(|p| p.kind),
        }
    }

    /// Whether `id` was sent after the last credentials refresh (see
    /// `credentials_since`).
    pub(super) fn sent_with_current_credentials(&self, id: RequestId) -> bool {
        id.0 >= self.credentials_since
    }

    /// Asks the application for new credentials; requests made from now on
    /// carry them.
    pub(super) fn refresh_credentials(&mut self) {
        self.credentials_since = self.next_id.saturating_add(1);
        self.refresh_unproven = true;
        self.actions.push_back(Action::RefreshCredentials);
    }

    pub(super) fn alloc_id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    /// See [`Reach`]: during a restore or repair the page fetch gates
    /// progress, so its failures show as `backoff` even behind a barrier
    /// (after a reload that painted from storage, a person sees that the
    /// runtime is being retried, not "restoring" for as long as it is down).
    pub(super) fn reach(&self) -> Reach {
        let stream_answered = self.stream.as_ref().is_some_and(|s| s.hello_seen);
        match &self.fetch {
            Some(f) if self.mode != Mode::Follow => {
                if f.id.is_none() && f.retry_at.is_some() {
                    Reach::Waiting
                } else if f.id.is_some() && self.fetch_backoff.attempts() > 0 && !stream_answered {
                    Reach::Retrying
                } else {
                    Reach::Answering
                }
            }
            _ => {
                if self.stream.is_none() && self.stream_retry_at.is_some() {
                    Reach::Waiting
                } else if self.stream.is_some()
                    && self.stream_backoff.attempts() > 0
                    && !stream_answered
                {
                    Reach::Retrying
                } else {
                    Reach::Answering
                }
            }
        }
    }

    /// The earliest retry timer of the stream or the page fetch.
    pub(super) fn next_retry_at(&self) -> Option<u64> {
        let fetch = self
            .fetch
            .as_ref()
            .filter(|f| f.id.is_none())
            .and_then(|f| f.retry_at);
        match (self.stream_retry_at, fetch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether `id` is the live stream's request.
    pub(super) fn is_stream(&self, id: RequestId) -> bool {
        self.stream.as_ref().is_some_and(|s| s.id == id)
    }

    fn which(&self, id: RequestId) -> Option<Req> {
        if self.is_stream(id) {
            Some(Req::Stream)
        } else if self.fetch.as_ref().is_some_and(|f| f.id == Some(id)) {
            Some(Req::Fetch)
        } else if self.prefetch.iter().any(|p| p.id == id) {
            Some(Req::Prefetch)
        } else {
            None
        }
    }

    /// Opens the live stream (replacing any): live only behind a barrier
    /// (rule 2), from the cursor otherwise (rule 9).
    pub(super) fn open_stream(&mut self, now: u64) {
        if let Some(old) = self.stream.take() {
            self.actions.push_back(Action::Abort { id: old.id });
        }
        self.stream_retry_at = None;
        if self.halted() {
            return;
        }
        let live_only = self.mode != Mode::Follow;
        let after = (!live_only).then_some(self.pos.cursor);
        let probe = self.link_probe();
        if probe {
            self.link_probe_opened(now);
        }
        let id = self.alloc_id();
        self.parser.reset();
        if self.streams_opened > 0 {
            self.counters.reconnects += 1;
        }
        self.streams_opened += 1;
        self.stream = Some(StreamConn {
            id,
            live_only,
            opened: false,
            hello_seen: false,
            proven: false,
            last_byte_at: now,
            eventless_bytes: 0,
        });
        self.actions.push_back(Action::OpenStream {
            id,
            path_and_query: paths::stream(&self.cfg.target, after),
            last_event_id: after.map(|c| c.to_string()),
            probe,
        });
    }

    /// Stream reconnect after `delay` (0 = now).
    pub(super) fn open_stream_after(&mut self, delay: u64, now: u64) {
        if delay == 0 {
            self.open_stream(now);
        } else {
            if let Some(old) = self.stream.take() {
                self.actions.push_back(Action::Abort { id: old.id });
            }
            self.stream_retry_at = Some(now.saturating_add(delay));
        }
    }

    /// The `limit` of the page after the current one: double the current
    /// page's, up to `replay_page_limit` (a restore ramps up from a small
    /// first page, so decoding starts early and never waits long).
    pub(super) fn next_limit(&self) -> u32 {
        self.fetch
            .as_ref()
            .map_or(self.cfg.replay_page_limit, |f| self.limit_after(f.limit))
    }

    /// The limit of the page after one of `limit`: twice as large, up to
    /// `replay_page_limit`.
    pub(super) fn limit_after(&self, limit: u32) -> u32 {
        limit.saturating_mul(2).min(self.cfg.replay_page_limit)
    }

    /// Replaces the fetch with the page after `after`; `first` pages (of a
    /// restore or repair) use [`Config::first_page_limit`](super::Config).
    /// Any prefetch is dropped; the page is sent after `delay` (0 = now).
    pub(super) fn issue_fetch(
        &mut self,
        kind: FetchKind,
        after: u64,
        first: bool,
        delay: u64,
        now: u64,
    ) {
        let limit = if first {
            // A new read of the backlog: earlier failures say nothing of it.
            self.unspeculated = None;
            self.cfg.first_page_limit.min(self.cfg.replay_page_limit)
        } else {
            self.next_limit()
        };
        self.drop_prefetch();
        if let Some(FetchSlot { id: Some(id), .. }) = self.fetch.take() {
            self.actions.push_back(Action::Abort { id });
        }
        self.fetch = Some(FetchSlot {
            id: None,
            kind,
            path: self.page_path(kind, after, limit),
            after,
            limit,
            issued_at: now,
            retry_at: Some(now.saturating_add(delay)),
            body: None,
        });
        if delay == 0 {
            self.send_fetch(now);
        }
    }

    fn send_fetch(&mut self, now: u64) {
        if self.halted() {
            return;
        }
        let id = self.alloc_id();
        if let Some(f) = self.fetch.as_mut() {
            f.id = Some(id);
            f.issued_at = now;
            f.retry_at = None;
            self.actions.push_back(Action::Fetch {
                id,
                path_and_query: f.path.clone(),
                kind: f.kind,
            });
        }
    }

    /// Aborts every request in flight (their answers will be ignored).
    pub(super) fn abort_all(&mut self) {
        if let Some(s) = self.stream.take() {
            self.actions.push_back(Action::Abort { id: s.id });
        }
        self.stream_retry_at = None;
        if let Some(FetchSlot { id: Some(id), .. }) = self.fetch.take() {
            self.actions.push_back(Action::Abort { id });
        }
        self.drop_prefetch();
        self.drop_spare_pages();
    }

    /// Pauses IO but remembers the pending fetch, to resume later (a
    /// prefetch is not worth remembering: it is issued again if still useful).
    fn suspend_io(&mut self) {
        if let Some(s) = self.stream.take() {
            self.actions.push_back(Action::Abort { id: s.id });
        }
        self.stream_retry_at = None;
        self.drop_prefetch();
        if let Some(f) = self.fetch.as_mut() {
            if let Some(id) = f.id.take() {
                self.actions.push_back(Action::Abort { id });
            }
            f.retry_at = None;
        }
    }

    fn resume_io(&mut self, now: u64) {
        if self.halted() {
            return;
        }
        self.stream_backoff.reset();
        self.fetch_backoff.reset();
        self.link_probe_next();
        self.open_stream(now);
        if self.fetch.as_ref().is_some_and(|f| f.id.is_none()) {
            self.send_fetch(now);
        }
    }

    fn retrying(&mut self, err: Option<CoreError>, at: u64) {
        if let Some(e) = err {
            let info = e.info();
            self.last_error = Some(info.clone());
            self.notices.push_back(Notice::Retrying {
                error: info,
                retry_at: at,
            });
        }
    }

    /// The stream carried an event after its `hello`: it worked, and its
    /// failures so far are forgotten (not at the `hello`: a stream that
    /// ends right after it would reconnect at the first backoff, for ever).
    pub(super) fn stream_proven(&mut self) {
        if let Some(s) = self.stream.as_mut() {
            if s.hello_seen && !s.proven {
                s.proven = true;
                self.stream_backoff.reset();
            }
        }
    }

    /// Drops the stream and reconnects after backoff, never earlier than the
    /// server's hint (`Retry-After`, else the stream's `retry:`, at least
    /// the backoff's first ceiling: `retry: 0` would be no floor at all).
    fn stream_retry(&mut self, err: Option<CoreError>, hint: Option<u64>, now: u64) {
        let reprobe = self.link_stream_ended(err.as_ref());
        self.stream = None;
        if let Some(wait) = reprobe {
            // Polling, and the probe was muted again: the next try is the
            // next probe, and a muted probe is no retry to report.
            self.stream_retry_at = Some(now.saturating_add(wait.max(hint.unwrap_or(0))));
            return;
        }
        let sse_retry = self.sse_retry.map(|ms| ms.max(self.cfg.backoff.initial_ms));
        let floor = hint.or(sse_retry).unwrap_or(0);
        let delay = self
            .stream_backoff
            .next_delay(&self.cfg.backoff, &mut self.rng, floor);
        let at = now.saturating_add(delay);
        self.stream_retry_at = Some(at);
        // A probe that failed otherwise is tried again with backoff; the
        // polls show the runtime's state, not the probe.
        if !self.polling() {
            self.retrying(err, at);
        }
    }

    pub(super) fn fetch_retry(&mut self, err: CoreError, hint: Option<u64>, now: u64) {
        self.restore_failed(&err, false);
        self.link_page_failed();
        let delay =
            self.fetch_backoff
                .next_delay(&self.cfg.backoff, &mut self.rng, hint.unwrap_or(0));
        let at = now.saturating_add(delay);
        if let Some(f) = self.fetch.as_mut() {
            f.id = None;
            f.retry_at = Some(at);
        }
        self.retrying(Some(err), at);
    }

    /// Stops for good (rule 9: other 4xx, second 401/403).
    pub(super) fn fail(&mut self, err: CoreError) {
        self.abort_all();
        self.end_older(Err(err.clone()));
        self.buffer.clear();
        self.failed = true;
        let info = err.info();
        self.last_error = Some(info.clone());
        self.notices.push_back(Notice::Failed { error: info });
    }

    pub(super) fn on_stream_opened(
        &mut self,
        id: RequestId,
        status: u16,
        content_type: Option<&str>,
        retry_after: Option<&str>,
        now: u64,
    ) {
        if !matches!(self.which(id), Some(Req::Stream)) {
            return;
        }
        if !(200..300).contains(&status) {
            self.on_http_error(id, status, retry_after, b"", now);
            return;
        }
        let ct = content_type.unwrap_or("");
        if !crate::sse::is_event_stream(ct) {
            self.actions.push_back(Action::Abort { id });
            self.stream_retry(Some(CoreError::WrongContentType(ct.to_owned())), None, now);
            return;
        }
        if let Some(s) = self.stream.as_mut() {
            s.opened = true;
            s.last_byte_at = now;
        }
    }

    pub(super) fn on_stream_bytes(&mut self, id: RequestId, bytes: &[u8], now: u64) {
        if !self.is_stream(id) {
            return;
        }
        self.counters.bytes += bytes.len() as u64;
        if let Some(s) = self.stream.as_mut() {
            s.eventless_bytes = s.eventless_bytes.saturating_add(bytes.len());
        }
        // Each event is handled as it is dispatched, lent from the parser's
        // buffers (no copy): the parser is moved out meanwhile, and a stand-in
        // takes whatever the handling does to it (a reset, when a frame
        // replaces the connection).
        let mut parser = std::mem::replace(&mut self.parser, SseParser::with_max_event_size(0));
        parser.push_borrowed(bytes, &mut |item| {
            // A frame may have replaced the connection (epoch change, 409…):
            // the rest of this chunk belongs to a dead stream.
            if !self.is_stream(id) || self.halted() {
                return;
            }
            // Only an event (a heartbeat or any other) proves the stream
            // alive; comments and `retry:` do not (PROTOCOL.md §4.3).
            if let (SseItem::Event(_) | SseItem::Error(_), Some(s)) = (&item, self.stream.as_mut())
            {
                s.last_byte_at = now;
                if matches!(item, SseItem::Event(_)) {
                    s.eventless_bytes = 0;
                }
            }
            match item {
                SseItem::Event(ev) => self.on_sse_event(ev, now),
                SseItem::Retry(ms) => self.sse_retry = Some(ms),
                SseItem::Error(crate::sse::SseError::EventTooLarge { limit, size }) => {
                    // A skipped durable event shows up as a gap and is repaired.
                    let error = CoreError::EventTooLarge { limit, size }.info();
                    self.last_error = Some(error.clone());
                    self.notices.push_back(Notice::FrameSkipped { error });
                }
            }
        });
        if !self.is_stream(id) {
            parser.reset();
        }
        self.parser = parser;
        // Bytes that make no event (comments, an oversized event being
        // skipped, a decompressed bomb) are bounded as a body read whole is.
        let limit = self.cfg.max_body_bytes;
        if self
            .stream
            .as_ref()
            .is_some_and(|s| s.eventless_bytes > limit)
        {
            self.actions.push_back(Action::Abort { id });
            let error = CoreError::BodyTooLarge {
                limit: limit as u64,
            };
            self.stream_retry(Some(error), None, now);
        }
    }

    pub(super) fn on_stream_events(&mut self, id: RequestId, events: Vec<StreamEvent>, now: u64) {
        for e in events {
            // As in `on_stream_bytes`: an event may have replaced the
            // connection, and every event proves the stream alive.
            if !self.is_stream(id) || self.halted() {
                return;
            }
            self.counters.bytes += e.size as u64;
            if let Some(s) = self.stream.as_mut() {
                s.last_byte_at = now;
            }
            self.on_envelope(e.envelope, e.size, now);
        }
    }

    pub(super) fn on_stream_end(&mut self, id: RequestId, err: Option<CoreError>, now: u64) {
        if !matches!(self.which(id), Some(Req::Stream)) {
            return;
        }
        // A partial trailing frame is discarded: the cursor never moves on it.
        self.parser.finish();
        // A clean end before the stream carried anything after its `hello`
        // is a failed connection (its backoff was not reset), said as such.
        let early = self.stream.as_ref().is_some_and(|s| !s.proven);
        let err = err.or(early.then_some(CoreError::StreamEndedEarly));
        self.stream_retry(err, None, now);
    }

    pub(super) fn on_request_failed(&mut self, id: RequestId, err: CoreError, now: u64) {
        if self.is_older(id) {
            return self.older_failed(err);
        }
        match self.which(id) {
            Some(Req::Stream) => self.on_stream_end(id, Some(err), now),
            Some(Req::Fetch) => self.fetch_retry(err, None, now),
            Some(Req::Prefetch) => self.prefetch_failed(id),
            None => {}
        }
    }

    pub(super) fn on_http_error(
        &mut self,
        id: RequestId,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
        now: u64,
    ) {
        if self.is_older(id) {
            return match classify(status, retry_after, body, self.wall_now(now)) {
                HttpClass::CursorRejected { error } => self.cursor_rejected(error, now),
                HttpClass::RefreshCredentials { error }
                | HttpClass::Retry { error, .. }
                | HttpClass::Fail(error) => self.older_failed(error),
            };
        }
        let Some(req) = self.which(id) else { return };
        // The request is over; nothing to abort.
        match req {
            Req::Stream => self.stream = None,
            Req::Fetch => {
                if let Some(f) = self.fetch.as_mut() {
                    f.id = None;
                }
            }
            // The page is fetched again, normally, if it is still needed:
            // its errors (409, 401, 5xx…) are the normal request's to handle.
            Req::Prefetch => {
                self.prefetch_failed(id);
                return;
            }
        }
        match classify(status, retry_after, body, self.wall_now(now)) {
            HttpClass::RefreshCredentials { error } => {
                if self.sent_with_current_credentials(id) {
                    // Refused with the refreshed credentials: twice.
                    if self.refresh_unproven {
                        return self.fail(error);
                    }
                    // Refresh once, then try again at once (rule 9).
                    self.refresh_credentials();
                }
                match req {
                    Req::Stream => self.open_stream(now),
                    Req::Fetch | Req::Prefetch => self.send_fetch(now),
                }
            }
            HttpClass::CursorRejected { error } => self.cursor_rejected(error, now),
            HttpClass::Retry { after, error } => match req {
                Req::Stream => self.stream_retry(Some(error), after, now),
                Req::Fetch | Req::Prefetch => self.fetch_retry(error, after, now),
            },
            HttpClass::Fail(error) if matches!(req, Req::Fetch) && self.restore.is_some() => {
                self.give_up_restore(&error)
            }
            HttpClass::Fail(error) => self.fail(error),
        }
    }

    pub(super) fn on_timeout(&mut self, now: u64) {
        if self.halted() {
            return;
        }
        if let Some(s) = &self.stream {
            let idle = now.saturating_sub(s.last_byte_at);
            if idle >= self.stall_ms() {
                // Half-open or silently queued connection: drop and reconnect.
                let id = s.id;
                self.actions.push_back(Action::Abort { id });
                self.stream_retry(Some(CoreError::Stalled { idle_ms: idle }), None, now);
            }
        }
        if self.stream_retry_at.is_some_and(|t| now >= t) {
            self.open_stream(now);
        }
        let mut timed_out = None;
        if let Some(f) = &self.fetch {
            if let Some(id) = f.id {
                let waited = now.saturating_sub(f.issued_at);
                if waited >= self.cfg.fetch_timeout_ms {
                    timed_out = Some((id, waited));
                }
            }
        }
        if let Some((id, waited)) = timed_out {
            self.actions.push_back(Action::Abort { id });
            self.fetch_retry(CoreError::Timeout { after_ms: waited }, None, now);
        }
        self.expire_prefetch(now);
        if self
            .fetch
            .as_ref()
            .is_some_and(|f| f.id.is_none() && f.retry_at.is_some_and(|t| now >= t))
        {
            self.send_fetch(now);
        }
    }

    pub(super) fn on_lifecycle(&mut self, event: Lifecycle, now: u64) {
        match event {
            Lifecycle::Online => {
                if self.offline {
                    self.offline = false;
                    self.resume_io(now);
                } else {
                    // The network may have changed (another route, a
                    // proxy gone) without ever being lost.
                    self.link_probe_now(now);
                }
            }
            Lifecycle::Offline => {
                if !self.offline {
                    self.offline = true;
                    self.suspend_io();
                }
            }
            Lifecycle::Visible | Lifecycle::Resume => {
                self.link_hidden(false, now);
                if self.halted() {
                    return;
                }
                // Timers may have been throttled or frozen: verify now.
                let stale = match &self.stream {
                    Some(s) => now.saturating_sub(s.last_byte_at) > self.cfg.heartbeat_ms,
                    None => true,
                };
                if stale {
                    self.stream_backoff.reset();
                    self.link_probe_next();
                    self.open_stream(now);
                }
                if self.fetch.as_ref().is_some_and(|f| f.id.is_none()) {
                    self.send_fetch(now);
                }
            }
            Lifecycle::Hidden => self.link_hidden(true, now),
            Lifecycle::Freeze => {}
            Lifecycle::PageHide => {
                if !self.suspended {
                    self.suspended = true;
                    self.suspend_io();
                }
                self.flush_persist(now);
            }
            Lifecycle::PageShow { persisted } => {
                if persisted && self.suspended {
                    self.suspended = false;
                    self.resume_io(now);
                }
            }
        }
    }
}
