//! The client state machine (PROTOCOL.md §6, rules 1–11), sans-IO.
//!
//! One [`Machine`] follows one [`Target`]. It never touches the network or a
//! clock: the IO layer feeds it inputs (`handle_*`, each with `now` in ms of
//! the caller's monotonic clock, which never steps back; the wall clock only
//! through [`handle_wall_clock`](Machine::handle_wall_clock), to read HTTP
//! dates), then drains its outputs in this order:
//! [`poll_action`](Machine::poll_action) until `None`,
//! [`poll_notice`](Machine::poll_notice), [`poll_view_change`](Machine::poll_view_change),
//! [`poll_pace`](Machine::poll_pace) until `None` (when to call subscribers,
//! animation frames and held chunks: `pace.rs`), and finally arms one timer
//! at [`poll_timeout`](Machine::poll_timeout) that calls
//! [`handle_timeout`](Machine::handle_timeout).
//!
//! Every request the machine wants is an [`Action`] with a fresh
//! [`RequestId`]; answers for ids it no longer cares about (an aborted stream,
//! a superseded page) are ignored, so a late byte of an old connection can
//! never be applied.

mod answers;
mod backoff;
pub(crate) mod classify;
mod error;
mod feed;
mod held;
mod io;
mod older;
mod outbox;
mod pace;
mod page_update;
pub(crate) mod paths;
mod persist;
mod prefetch;
mod sync;
mod transport;
mod types;
mod viewers;
mod writes;

pub use answers::{Response, StreamEvent};
pub use backoff::{parse_retry_after, Backoff, SplitMix64, MAX_RETRY_HINT_MS};
pub use error::{CoreError, ErrorInfo};
pub use feed::{ClientNotice, NOTICE_CAPACITY};
pub use outbox::{PendingAnswer, PendingMessage, PendingState};
pub use pace::{Frames, Notify, Pace, FRAME_WAIT_MS};
pub use page_update::{PageUpdate, COUNTERS_EVERY_MS, PAGE_PARTS};
pub use persist::{merge_stored, supersedes, LastApplied, Position, StoredHead, STORAGE_VERSION};
pub use transport::{
    poll_interval, HIDDEN_FACTOR, MUTED_TRIES, POLL_BUSY_MS, POLL_IDLE_MAX_MS, REPROBE_MS,
};
pub use types::{
    Action, BackoffConfig, Config, Counters, FetchKind, Lifecycle, Notice, RequestId, Settings,
    State, Status, Target, Write, WriteDone, WriteId, WriteOutcome,
};
pub use viewers::MAX_VIEWERS;

use std::collections::VecDeque;

use crate::fold::{View, ViewChange};
use crate::protocol::{Envelope, EventPage, ReplayPage, Transcript};
use crate::sse::SseParser;

/// What the cursor logic is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    /// Applying live frames directly.
    Follow,
    /// Reading the backlog behind the restore barrier; live frames are held.
    /// `verify`: the first event page must start with the last applied event.
    Restore { verify: bool },
    /// Fetching missing events behind the barrier; live frames are held.
    Repair { from_cursor: u64, verify: bool },
    /// A 4xx gave the restore up: live frames go to `shown` only, the
    /// durable state stays as it was (the next start restores from it).
    Unrestored,
}

/// A frame held by the barrier.
#[derive(Clone, Debug, PartialEq)]
// Nearly every held frame is an event; boxing would allocate once more each.
#[allow(clippy::large_enum_variant)]
enum Frame {
    /// A decoded event.
    Event(Envelope),
    /// Events up to this cursor will not arrive on the stream (a live-only
    /// stream's `hello.head`, or durable frames dropped by the buffer bound).
    LiveFrom(u64),
}

/// The open (or opening) live stream.
#[derive(Clone, Debug)]
struct StreamConn {
    id: RequestId,
    live_only: bool,
    opened: bool,
    hello_seen: bool,
    /// It dispatched an event after its `hello`: only then does it count as
    /// a connection that worked (one that ends right after its `hello`
    /// is a failed one for the backoff).
    proven: bool,
    /// When it was opened or last dispatched an event (the stall watchdog's
    /// start): bytes that make no event, comments included, do not count.
    last_byte_at: u64,
    /// Bytes read since its last event: past `Config::max_body_bytes` the
    /// stream is ended (`body_too_large`).
    eventless_bytes: usize,
}

/// The one JSON request the machine needs at a time (replay or event page).
#[derive(Clone, Debug)]
struct FetchSlot {
    /// In flight under this id; `None` while waiting to (re)send.
    id: Option<RequestId>,
    kind: FetchKind,
    path: String,
    /// The page's cursor parameter (`after_cursor`, `after_seq` or `after_id`).
    after: u64,
    /// The page's `limit`.
    limit: u32,
    issued_at: u64,
    /// When to (re)send, if waiting.
    retry_at: Option<u64>,
    /// The answer, when it arrived while this was still a prefetch.
    body: Option<Vec<u8>>,
}

/// A speculative request for a page after the one in flight (pipelined
/// paging): promoted to the [`FetchSlot`] if the cursor lands on `after`.
#[derive(Clone, Debug)]
struct Prefetch {
    id: RequestId,
    kind: FetchKind,
    path: String,
    after: u64,
    limit: u32,
    issued_at: u64,
    /// Kept until promotion when it arrives early.
    body: Option<Vec<u8>>,
}

/// The client state machine for one target. See the module docs.
#[derive(Debug)]
pub struct Machine {
    cfg: Config,
    pos: Position,
    view: View,
    mode: Mode,
    buffer: held::Held,
    /// `Some(from_cursor)` while a restore is not yet painted.
    restore: Option<u64>,
    /// What is shown while the backlog of a restore cannot be read: a copy
    /// of the view with the live frames on top, and the last durable key
    /// applied to it (rule 2; `sync.rs`, `restore_failed`).
    shown: Option<(View, u64)>,
    /// A stored view was read and not yet reported: a restore from it
    /// reports it at once (`poll_view_change`), before the network answers.
    stored_unpainted: bool,
    /// Restarts from 0 in a row (see `restarts_settled`), and their pacing.
    zero_restarts: u32,
    restart_backoff: Backoff,
    /// Since when the scope has been live (restored, `hello` agreeing):
    /// restarts from 0 count as in a row until it has been for a while.
    live_since: Option<u64>,
    /// The restore's first page asks for the newest page (`older.rs`).
    asking_tail: bool,
    /// An older page being read (`older.rs`).
    older: Option<older::OlderRead>,
    /// What the current restore or repair has read (its budget).
    backlog: sync::BacklogRead,
    /// Repairs in a row that did not move the cursor (paces loops).
    idle_repairs: u32,
    next_id: u64,
    stream: Option<StreamConn>,
    stream_retry_at: Option<u64>,
    stream_backoff: Backoff,
    fetch: Option<FetchSlot>,
    /// Speculative page requests behind `fetch`, in page order.
    prefetch: VecDeque<Prefetch>,
    /// The `after` of a page whose prefetch failed or timed out: never
    /// speculated again (the normal path fetches it, with its backoff).
    unspeculated: Option<u64>,
    /// Highest durable head the server has shown in this epoch (hello,
    /// heartbeat, page, durable frame): how far speculative paging may go.
    known_head: u64,
    fetch_backoff: Backoff,
    rng: SplitMix64,
    sse_retry: Option<u64>,
    parser: SseParser,
    /// The last stream envelope, once handled, kept to read the next one
    /// over (its strings' buffers reused: a delta allocates nothing).
    spare: Option<Envelope>,
    /// The last backlog pages read, kept while the backlog is read to read
    /// the next page of their kind over (their envelopes' buffers reused).
    spare_replay: Option<ReplayPage>,
    spare_events: Option<EventPage>,
    streams_opened: u64,
    /// The wall clock minus the machine's clock, as last reported
    /// ([`handle_wall_clock`](Self::handle_wall_clock)): HTTP dates are read
    /// on the wall clock, every deadline on the machine's own.
    wall_offset: i64,
    /// The first request id made after the last credentials refresh. A
    /// refusal of an older request was of the credentials that refresh
    /// replaced and proves nothing about the new ones: it is sent again, and
    /// asks for no second refresh (requests run side by side, and one may be
    /// refused after another already succeeded with the new credentials).
    credentials_since: u64,
    /// A refresh was asked for and no request has succeeded since: a newer
    /// request refused again fails the client (rule 9: refresh once).
    refresh_unproven: bool,
    closed: bool,
    failed: bool,
    offline: bool,
    suspended: bool,
    actions: VecDeque<Action>,
    notices: VecDeque<Notice>,
    change: ViewChange,
    /// The view changes of the restore in progress since the last
    /// `poll_view_progress` (see there).
    progress: ViewChange,
    state: State,
    since: u64,
    last_error: Option<ErrorInfo>,
    counters: Counters,
    dirty: bool,
    last_persist: Option<u64>,
    /// While the stored value is being read: give up at this time.
    loading: Option<u64>,
    /// The storage failed: nothing is persisted any more.
    storage_failed: bool,
    /// Notices at the back of `notices` already recorded in `feed`.
    notices_recorded: usize,
    feed: feed::Feed,
    pacer: pace::Pacer,
    writes: writes::Writes,
    /// Answers in progress: first-byte deadlines, bodies read whole.
    answers: answers::Answers,
    /// Stream or polling (`transport.rs`).
    link: transport::Link,
    /// Pages showing this view from another context (`viewers.rs`).
    viewers: viewers::Viewers,
    /// What the pages showing this view from another context were last
    /// posted (`page_update.rs`).
    pages: page_update::Pages,
}

impl Machine {
    /// Starts following `config.target`. `stored` is the last value of an
    /// [`Action::Persist`]; a corrupt or foreign one is discarded with a
    /// [`Notice::StorageDiscarded`] and the scope is restored from 0. The
    /// first actions (stream + backlog) are queued at once (rule 2).
    pub fn new(config: Config, stored: Option<&[u8]>, now: u64) -> Self {
        let mut c = Machine::idle(config, now);
        c.begin(stored, now);
        // Its view is there before any consumer reads one: nothing to report.
        c.stored_unpainted = false;
        c.after_input(now);
        c
    }

    /// Like [`new`](Self::new) for a stored value that must be read first:
    /// the first action is [`Action::LoadStored`]; answer it with
    /// [`handle_stored`](Self::handle_stored) or
    /// [`handle_storage_failed`](Self::handle_storage_failed). Nothing else
    /// happens until then, or until `Config::storage_timeout_ms` passed (the
    /// client then starts without it, keeping its state in memory, with a
    /// [`Notice::StorageFallback`]). Lifecycle inputs meanwhile are kept.
    pub fn load(config: Config, now: u64) -> Self {
        let mut c = Machine::idle(config, now);
        c.loading = Some(now.saturating_add(c.cfg.storage_timeout_ms));
        c.actions.push_back(Action::LoadStored);
        c.after_input(now);
        c
    }

    /// The stored value asked for by [`Action::LoadStored`] (`None`: none).
    /// Read asynchronously, it may come after a view was built without it:
    /// it is reported at once (`poll_view_change`), before any answer.
    pub fn handle_stored(&mut self, stored: Option<&[u8]>, now: u64) {
        self.stored(stored, true, now);
    }

    /// [`handle_stored`](Self::handle_stored) for a value read before
    /// [`Action::LoadStored`] was taken (a synchronous storage): nothing
    /// can have shown the view without it, so, as with [`new`](Self::new),
    /// its view is not reported apart.
    pub fn handle_stored_at_once(&mut self, stored: Option<&[u8]>, now: u64) {
        self.stored(stored, false, now);
    }

    fn stored(&mut self, stored: Option<&[u8]>, late: bool, now: u64) {
        if !self.closed && self.loading.take().is_some() {
            self.begin(stored, now);
            self.stored_unpainted &= late;
            self.after_input(now);
        }
    }

    /// Reading or writing the storage failed (`why`): state is kept in
    /// memory from now on; a pending load starts without a stored value.
    pub fn handle_storage_failed(&mut self, why: &str, now: u64) {
        if !self.closed {
            self.storage_fell_back(why);
            if self.loading.take().is_some() {
                self.begin(None, now);
            }
            self.after_input(now);
        }
    }

    /// True while the stored value is being read ([`Machine::load`]).
    pub fn is_loading(&self) -> bool {
        self.loading.is_some()
    }

    /// True once the storage failed and state is kept in memory only.
    pub fn storage_fell_back_to_memory(&self) -> bool {
        self.storage_failed
    }

    fn storage_fell_back(&mut self, why: &str) {
        if !self.storage_failed {
            self.storage_failed = true;
            self.cfg.persist = false;
            let error = CoreError::StorageUnavailable(why.to_owned()).info();
            self.notices.push_back(Notice::StorageFallback { error });
        }
    }

    /// Decodes the stored value (a corrupt one is removed) and starts the
    /// restore (rule 2).
    fn begin(&mut self, stored: Option<&[u8]>, now: u64) {
        if let Some(b) = stored {
            match persist::decode(b, &self.cfg.target) {
                Ok(d) => {
                    self.pos = d.pos;
                    self.view = d.view;
                    self.stored_unpainted = true;
                    self.restore_outbox(d.outbox, d.gone);
                }
                Err(e) => {
                    self.notices
                        .push_back(Notice::StorageDiscarded { error: e.info() });
                    self.actions.push_back(Action::RemoveStored);
                }
            }
        }
        self.start_restore(now);
    }

    /// A machine with nothing loaded and nothing asked for yet.
    fn idle(config: Config, now: u64) -> Self {
        let view = View::empty(config.target.is_session(), config.log_capacity);
        let pacer = pace::Pacer::new(config.notify, config.max_held_bytes);
        Machine {
            parser: SseParser::with_max_event_size(config.max_event_size),
            spare: None,
            spare_replay: None,
            spare_events: None,
            rng: SplitMix64::new(config.seed),
            cfg: config,
            pos: Position::default(),
            view,
            mode: Mode::Follow,
            buffer: held::Held::default(),
            restore: None,
            shown: None,
            stored_unpainted: false,
            zero_restarts: 0,
            restart_backoff: Backoff::default(),
            live_since: None,
            asking_tail: false,
            older: None,
            backlog: sync::BacklogRead::default(),
            idle_repairs: 0,
            next_id: 0,
            stream: None,
            stream_retry_at: None,
            stream_backoff: Backoff::default(),
            fetch: None,
            prefetch: VecDeque::new(),
            unspeculated: None,
            known_head: 0,
            fetch_backoff: Backoff::default(),
            sse_retry: None,
            streams_opened: 0,
            credentials_since: 0,
            refresh_unproven: false,
            closed: false,
            failed: false,
            offline: false,
            suspended: false,
            actions: VecDeque::new(),
            notices: VecDeque::new(),
            change: ViewChange::default(),
            progress: ViewChange::default(),
            state: State::Connecting,
            since: now,
            wall_offset: 0,
            last_error: None,
            counters: Counters::default(),
            dirty: false,
            // The throttle runs from the start: a restore does not serialise its
            // first page's state on the way (it is written within the throttle).
            last_persist: Some(now),
            loading: None,
            storage_failed: false,
            notices_recorded: 0,
            feed: feed::Feed::default(),
            pacer,
            writes: writes::Writes::default(),
            answers: answers::Answers::default(),
            link: transport::Link::default(),
            viewers: viewers::Viewers::default(),
            pages: page_update::Pages::default(),
        }
    }

    /// The wall clock (ms since the Unix epoch, e.g. `Date.now()`) reads
    /// `wall_ms` at the machine's `now`. The machine runs on a monotonic
    /// clock; the wall clock is needed only to read an HTTP date
    /// (`Retry-After: Sun, 06 Nov 1994 08:49:37 GMT`), so report it before
    /// an answer that carries one. Until then the two clocks are taken to
    /// agree. A wall clock that steps moves no deadline.
    pub fn handle_wall_clock(&mut self, wall_ms: u64, now: u64) {
        let offset = i128::from(wall_ms) - i128::from(now);
        self.wall_offset = offset.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    }

    /// The wall clock at the machine's `now` (saturating).
    fn wall_now(&self, now: u64) -> u64 {
        now.saturating_add_signed(self.wall_offset)
    }

    /// The stream answered with `status` (call this for 2xx; for other
    /// statuses prefer [`handle_http_error`](Self::handle_http_error) with the body).
    pub fn handle_stream_opened(
        &mut self,
        id: RequestId,
        status: u16,
        content_type: Option<&str>,
        retry_after: Option<&str>,
        now: u64,
    ) {
        if !self.closed {
            self.on_stream_opened(id, status, content_type, retry_after, now);
            self.after_input(now);
        }
    }

    /// Bytes of the stream body, in order, any chunking.
    pub fn handle_stream_bytes(&mut self, id: RequestId, bytes: &[u8], now: u64) {
        if !self.closed {
            self.answers.answered(id);
            self.on_stream_bytes(id, bytes, now);
            self.after_input(now);
        }
    }

    /// Events of the stream read by the share hub (its virtual streams,
    /// PROTOCOL.md §4.6), in order: each as if its bytes had come.
    pub fn handle_stream_events(&mut self, id: RequestId, events: Vec<StreamEvent>, now: u64) {
        if !self.closed {
            self.answers.answered(id);
            self.on_stream_events(id, events, now);
            self.after_input(now);
        }
    }

    /// The stream body ended cleanly (EOF).
    pub fn handle_stream_end(&mut self, id: RequestId, now: u64) {
        if !self.closed {
            self.answers.answered(id);
            self.on_stream_end(id, None, now);
            self.after_input(now);
        }
    }

    /// A request (stream or fetch) failed at the transport level.
    pub fn handle_network_error(&mut self, id: RequestId, message: &str, now: u64) {
        self.handle_request_failed(id, CoreError::Network(message.to_owned()), now);
    }

    /// A request (stream or fetch) failed before any answer, for a reason the
    /// IO layer knows better than "network": its connect deadline passed
    /// ([`CoreError::Timeout`]) or the credentials could not be obtained
    /// ([`CoreError::Credentials`]). Retried like a network error; the error
    /// becomes `Status::last_error`.
    pub fn handle_request_failed(&mut self, id: RequestId, error: CoreError, now: u64) {
        if !self.closed {
            self.answers.answered(id);
            if self.writes.owns(id) {
                self.write_failed(id, error, now);
            } else {
                self.on_request_failed(id, error, now);
            }
            self.after_input(now);
        }
    }

    /// The body of a [`FetchKind::Replay`] fetch (HTTP 2xx).
    pub fn handle_replay_page(&mut self, id: RequestId, body: &[u8], now: u64) {
        if !self.closed {
            self.answers.answered(id);
            self.on_page(id, FetchKind::Replay, body, now);
            self.after_input(now);
        }
    }

    /// The body of a [`FetchKind::Events`] fetch (HTTP 2xx).
    pub fn handle_event_page(&mut self, id: RequestId, body: &[u8], now: u64) {
        if !self.closed {
            self.answers.answered(id);
            self.on_page(id, FetchKind::Events, body, now);
            self.after_input(now);
        }
    }

    /// Whether a page that arrived early (pipelined paging) waits to be
    /// read: perform the queued actions (they include the request for the
    /// page after it), then call [`handle_waiting_page`](Self::handle_waiting_page).
    /// Split in two so that request is on the network while this page is
    /// being decoded.
    pub fn has_waiting_page(&self) -> bool {
        !self.closed && self.fetch.as_ref().is_some_and(|f| f.body.is_some())
    }

    /// Reads the page [`has_waiting_page`](Self::has_waiting_page) reported.
    pub fn handle_waiting_page(&mut self, now: u64) {
        if !self.closed {
            self.on_waiting_page(now);
            self.after_input(now);
        }
    }

    /// A non-2xx answer to any request, with its `Retry-After` header and body
    /// (an [`ErrorBody`](crate::protocol::ErrorBody) when JSON).
    pub fn handle_http_error(
        &mut self,
        id: RequestId,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
        now: u64,
    ) {
        if !self.closed {
            self.answers.answered(id);
            if self.writes.owns(id) {
                self.write_http_error(id, status, retry_after, body, now);
            } else {
                self.on_http_error(id, status, retry_after, body, now);
            }
            self.after_input(now);
        }
    }

    /// The timer armed at [`poll_timeout`](Self::poll_timeout) fired (late is fine).
    pub fn handle_timeout(&mut self, now: u64) {
        if !self.closed {
            if self.loading.is_some_and(|t| now >= t) {
                let waited = self.cfg.storage_timeout_ms;
                let why = "no answer after ".to_owned() + &waited.to_string() + " ms";
                self.handle_storage_failed(&why, now);
            }
            self.write_timers(now);
            self.answer_timeouts(now);
            self.pace_timeout(now);
            self.on_timeout(now);
            self.link_timeout(now);
            self.after_input(now);
        }
    }

    /// A page lifecycle or connectivity event.
    pub fn handle_lifecycle(&mut self, event: Lifecycle, now: u64) {
        if !self.closed {
            self.on_lifecycle(event, now);
            if matches!(
                event,
                Lifecycle::Online
                    | Lifecycle::Visible
                    | Lifecycle::Resume
                    | Lifecycle::PageShow { .. }
            ) {
                self.outbox_kick(now);
            }
            self.after_input(now);
        }
    }

    /// Stops everything. Queued outputs are discarded; what remains is one
    /// `Abort` per request in flight and a final `Persist` if the state
    /// changed since the last one. Later inputs are ignored.
    pub fn close(&mut self, now: u64) {
        if self.closed {
            return;
        }
        self.actions.clear();
        self.notices.clear();
        self.notices_recorded = 0;
        self.change = ViewChange::default();
        self.abort_all();
        self.end_older(Err(CoreError::Closed));
        self.answers.clear();
        self.pace_clear();
        self.close_writes();
        self.flush_persist(now);
        self.closed = true;
        self.restore = None;
        self.buffer.clear();
        self.state = State::Stopped;
        self.since = now;
        // A snapshot taken after close() shows `stopped`.
        self.record_for_feed(now);
    }

    /// The next thing the IO layer must do.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.closed {
            return None;
        }
        let mut next: Option<u64> = None;
        let mut at = |t: Option<u64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if self.dirty {
            at(Some(self.persist_due()));
        }
        at(self.loading);
        at(self.writes.deadline(self.cfg.fetch_timeout_ms));
        at(self.outbox_deadline());
        at(self.answers.deadline());
        at(self.pace_deadline());
        if !self.halted() {
            at(self.stream_retry_at);
            at(self
                .stream
                .as_ref()
                .map(|s| s.last_byte_at.saturating_add(self.stall_ms())));
            if let Some(f) = &self.fetch {
                at(f.retry_at);
                at(f.id.map(|_| f.issued_at.saturating_add(self.cfg.fetch_timeout_ms)));
            }
            at(self.prefetch_deadline());
            at(self.link_deadline());
        }
        next
    }

    /// The next notice for the application.
    #[must_use]
    pub fn poll_notice(&mut self) -> Option<Notice> {
        let n = self.notices.pop_front()?;
        // Recorded ones sit at the back: fewer remain unpolled.
        self.notices_recorded = self.notices_recorded.min(self.notices.len());
        Some(n)
    }

    /// Moves whenever anything a UI shows changed: the painted view (see
    /// [`poll_view_change`](Self::poll_view_change)), the status or the
    /// notices. One counter for a UI's cache of the whole snapshot.
    pub fn revision(&self) -> u64 {
        self.feed.revision()
    }

    /// The application's notices, oldest first (the last
    /// [`NOTICE_CAPACITY`]); retries are shown by the status instead.
    pub fn recent_notices(&self) -> &VecDeque<ClientNotice> {
        self.feed.notices()
    }

    /// What changed in the view since the last call. A restore from a
    /// stored value first reports that value's view (`reset`); nothing else
    /// is reported while it is in progress; its completion is one change
    /// with `restore_completed` (rule 2: repaint once per restore), none
    /// when a restore from nothing found nothing to show. While its backlog cannot
    /// be read the live view is: a change with `reset`, then per input.
    #[must_use]
    pub fn poll_view_change(&mut self) -> Option<ViewChange> {
        let c = self.next_view_change()?;
        self.pages.changed(&c);
        Some(c)
    }

    fn next_view_change(&mut self) -> Option<ViewChange> {
        if std::mem::take(&mut self.stored_unpainted) && self.withheld() {
            // The stored view is what the page showed when it was stored: a
            // moment that was, painted before the restore's network answers
            // (a reload's paint needs no round trip). Its end is the one
            // repaint after it.
            let pending = std::mem::take(&mut self.change.pending);
            self.feed.view_change_taken();
            return Some(ViewChange {
                reset: true,
                pending,
                ..ViewChange::default()
            });
        }
        if self.withheld() && self.change.pending {
            // The outbox is shown at once, a restore or not: nothing leaves
            // it while one is withheld (`Machine::message_committed`).
            self.change.pending = false;
            self.feed.view_change_taken();
            return Some(ViewChange {
                pending: true,
                ..ViewChange::default()
            });
        }
        if self.withheld() || self.change.is_empty() {
            return None;
        }
        let mut c = std::mem::take(&mut self.change);
        c.normalise();
        self.feed.view_change_taken();
        Some(c)
    }

    /// The changes a restore withholds from [`Machine::poll_view_change`],
    /// since the last call: for preparing UI objects while the backlog is
    /// still arriving, so the one repaint at its end is cheap. Each restore
    /// starts with `reset` (stage from the whole view); the input that
    /// completes it is the last one reported; outside restores, nothing.
    #[must_use]
    pub fn poll_view_progress(&mut self) -> Option<ViewChange> {
        if self.progress.is_empty() {
            return None;
        }
        let mut c = std::mem::take(&mut self.progress);
        c.normalise();
        Some(c)
    }

    /// Whether a restore is in progress (its changes are withheld).
    pub fn is_restoring(&self) -> bool {
        self.restore.is_some()
    }

    /// Whether view changes wait for the restore's end (not while the live
    /// view of a failed backlog is shown): a view built meanwhile shows what
    /// was last painted.
    pub fn withheld(&self) -> bool {
        self.restore.is_some() && self.shown.is_none()
    }

    /// Connection status.
    pub fn status(&self) -> Status {
        Status {
            state: self.state,
            since: self.since,
            next_retry_at: self.shown_retry_at(),
            last_error: self.last_error.clone(),
            history_incomplete: self.shown.is_some(),
        }
    }

    /// Running totals.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The folded view. Between a restore's start and its completion it may
    /// hold a partly restored state; read it on view changes. While the
    /// backlog cannot be read ([`Status::history_incomplete`]) it is the
    /// durable state with the live events on top.
    pub fn view(&self) -> &View {
        self.shown.as_ref().map_or(&self.view, |s| &s.0)
    }

    /// Last applied `seq` (row id on the global list).
    pub fn cursor(&self) -> u64 {
        self.pos.cursor
    }

    /// The log's epoch, once known.
    pub fn epoch(&self) -> Option<&str> {
        self.pos.epoch.as_deref()
    }

    /// Position: epoch, cursor and the last applied event.
    pub fn position(&self) -> &Position {
        &self.pos
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The canonical transcript (session targets only), of the durable
    /// state (not of the live view of a failed restore).
    pub fn transcript(&self) -> Option<Transcript> {
        let s = self.view.as_session()?;
        Some(s.transcript(self.pos.epoch.as_deref().unwrap_or(""), self.pos.cursor))
    }

    /// The value a `Persist` would carry now.
    pub fn persisted_value(&self) -> Vec<u8> {
        let outbox = self.writes.outbox.stored();
        let gone = self.writes.outbox.gone();
        persist::encode(&self.cfg.target, &self.pos, &self.view, &outbox, gone)
    }

    fn halted(&self) -> bool {
        self.closed || self.failed || self.offline || self.suspended || self.loading.is_some()
    }

    fn stall_ms(&self) -> u64 {
        (self.cfg.heartbeat_ms as f64 * self.cfg.stall_factor.max(1.0)) as u64
    }

    fn persist_due(&self) -> u64 {
        self.last_persist
            .map_or(0, |t| t.saturating_add(self.cfg.persist_throttle_ms))
    }

    fn flush_persist(&mut self, now: u64) {
        if self.dirty {
            if self.cfg.persist {
                self.actions
                    .push_back(Action::Persist(self.persisted_value()));
            }
            self.dirty = false;
            self.last_persist = Some(now);
        }
    }

    /// Bookkeeping after every input: speculative page, throttled persist,
    /// status.
    fn after_input(&mut self, now: u64) {
        self.link_after_input(now);
        self.send_older();
        self.maybe_prefetch(now);
        self.pump_outbox(now);
        if !self.writes.is_idle() {
            self.drop_ended_cancels();
        }
        self.track_answers(now);
        if self.dirty && now >= self.persist_due() {
            self.flush_persist(now);
        }
        let state = self.derive_state();
        if state != self.state {
            self.state = state;
            self.since = now;
            self.change.status = true;
            if state == State::Live {
                self.last_error = None;
                // The runtime answers again: a message backing off goes now.
                self.outbox_kick(now);
                self.pump_outbox(now);
            }
        }
        self.record_for_feed(now);
    }

    /// Counts what a UI would show differently after this input.
    fn record_for_feed(&mut self, now: u64) {
        let unrecorded = self.notices.len() - self.notices_recorded;
        for n in self.notices.iter().skip(self.notices_recorded) {
            self.feed.notice(n, now);
        }
        self.notices_recorded += unrecorded;
        if (!self.withheld() && !self.change.is_empty())
            || self.change.pending
            || self.stored_unpainted
        {
            self.feed.view_changed();
        }
        // Every input (each stream chunk) passes here: compare by reference
        // and build (clone) the status only when it moved.
        let next = self.shown_retry_at();
        let err = self.last_error.as_ref();
        // `history_incomplete` is not compared: it changes only with a
        // notice or a repaint, which move the revision themselves.
        if !self
            .feed
            .status_unchanged(self.state, self.since, next, err)
        {
            self.feed.status(self.status());
        }
    }

    /// `Status::next_retry_at`: none while halted (nothing will be retried).
    fn shown_retry_at(&self) -> Option<u64> {
        if self.halted() {
            None
        } else {
            self.next_retry_at()
        }
    }

    fn derive_state(&self) -> State {
        if self.failed {
            return State::Failed;
        }
        if self.closed || self.suspended {
            return State::Stopped;
        }
        if self.offline {
            return State::Offline;
        }
        if let Some(state) = self.link_state() {
            return state;
        }
        // A failed request, waiting or being retried, shows as such even
        // behind a barrier (see `Machine::reach`).
        match self.reach() {
            io::Reach::Waiting => return State::Backoff,
            io::Reach::Retrying => return State::Connecting,
            io::Reach::Answering => {}
        }
        match (&self.mode, &self.stream) {
            // Nothing to bring up to date yet: a new session's empty backlog
            // goes from connecting to live.
            (Mode::Restore { .. }, _) if self.pos.cursor == 0 => State::Connecting,
            (Mode::Restore { .. }, _) => State::Restoring,
            (Mode::Repair { .. }, _) => State::Repairing,
            (_, Some(s)) if s.hello_seen => State::Live,
            (_, Some(_)) => State::Connecting,
            (_, None) if self.stream_retry_at.is_some() => State::Backoff,
            (_, None) => State::Connecting,
        }
    }
}
