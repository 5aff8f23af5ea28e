//! The machine's vocabulary: configuration, inputs, outputs, status.

use serde::{Deserialize, Serialize};

use super::error::{CoreError, ErrorInfo};
use super::pace::Notify;
use crate::protocol::Scope;

/// What one machine follows: a scoped log, or the global list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// One scope's log (`seq` cursor, dense).
    Scoped {
        /// Which kind of logbook.
        scope: Scope,
        /// Which one, e.g. `ses_7f3a` (ignored for `system`).
        scope_id: String,
    },
    /// `GET /v1/events`: every scope, cursor = row id (not dense).
    Global,
}

impl Target {
    /// A session.
    pub fn session(id: impl Into<String>) -> Self {
        Target::Scoped {
            scope: Scope::Session,
            scope_id: id.into(),
        }
    }

    /// True for the session scope (the only one with a replay endpoint).
    pub fn is_session(&self) -> bool {
        matches!(
            self,
            Target::Scoped {
                scope: Scope::Session,
                ..
            }
        )
    }

    /// A short stable key, e.g. `session:ses_1`, `system:runtime` or
    /// `global`; stored with the persisted value so a value of another
    /// target is never used, and the name the shared host routes a scope's
    /// events by. The one target rule: the JS halves are pinned to it by
    /// `tests/fixtures/targets.json`.
    pub fn key(&self) -> String {
        match self {
            Target::Scoped { scope, scope_id } => Self::scoped_key(*scope, scope_id),
            Target::Global => "global".to_owned(),
        }
    }

    /// Where a client of this target at `base_url` (without a trailing
    /// `/`) keeps its persisted value: tabs following the same log of the
    /// same runtime share it. The wasm's storage and `prefetch` (browser.js,
    /// which looks for it before the wasm) are pinned to it by
    /// `tests/fixtures/first_page.json`.
    pub fn storage_key(&self, base_url: &str) -> String {
        "replay-client:".to_owned() + base_url + "|" + &self.key()
    }

    /// The key of log `scope_id` of `scope` (see [`Target::key`]).
    pub fn scoped_key(scope: Scope, scope_id: &str) -> String {
        format!("{}:{}", scope.as_str(), scope_id)
    }
}

/// Exponential backoff with full jitter: attempt `n` waits a uniformly random
/// time in `[0, min(max_ms, initial_ms * multiplier^n)]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackoffConfig {
    /// Upper bound of the first retry's wait.
    pub initial_ms: u64,
    /// Upper bound of any wait.
    pub max_ms: u64,
    /// Growth per attempt.
    pub multiplier: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial_ms: 1_000,
            max_ms: 30_000,
            multiplier: 2.0,
        }
    }
}

/// Everything a machine needs to know up front.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// What to follow.
    pub target: Target,
    /// SSE events above this many bytes are skipped (with a notice).
    pub max_event_size: usize,
    /// `limit` of replay and event page requests.
    pub replay_page_limit: u32,
    /// `limit` of the first page of a restore or repair (capped at
    /// `replay_page_limit`): a small first page is answered and decoded
    /// sooner, while the full-size pages after it are already requested.
    pub first_page_limit: u32,
    /// A first visit (no stored state) of a session reads its newest page
    /// first: at least this many events, from a turn boundary
    /// (docs/protocol.md §4.1), older pages on `load_older`
    /// ([`DEFAULT_TAIL`](Self::DEFAULT_TAIL) by default); 0 reads the
    /// whole history forward. A runtime without the extension is read
    /// forward either way.
    pub tail: u32,
    /// Speculative page requests kept in flight behind the page being
    /// fetched while a backlog is read (pipelined paging; 0 turns it off).
    /// Each takes one of the browser's ~6 connections per origin.
    pub prefetch_depth: u8,
    /// Reconnect and retry pacing.
    pub backoff: BackoffConfig,
    /// The stream is declared stalled after `stall_factor * heartbeat_ms`
    /// without an event (a heartbeat or any other; SSE comments do not
    /// count, PROTOCOL.md §4.3).
    pub stall_factor: f64,
    /// The server's heartbeat interval (PROTOCOL.md §4.3: at most 15 s).
    pub heartbeat_ms: u64,
    /// At most one `Persist` per this many ms (flushed at once on pagehide
    /// and close).
    pub persist_throttle_ms: u64,
    /// Emit `Action::Persist` at all. Off when nothing keeps the value
    /// (memory storage): encoding a 10 000-item view took a few ms of
    /// every restore for nothing.
    pub persist: bool,
    /// A fetch without an answer for this long is aborted and retried.
    pub fetch_timeout_ms: u64,
    /// A request without its first answer for this long (its head; a
    /// stream: its first body byte) is aborted and fails with `timeout`,
    /// then is retried as its kind is.
    pub connect_timeout_ms: u64,
    /// Most bytes of a body read whole (a page, a write's answer, an error
    /// body): past it the request is aborted and fails with
    /// `body_too_large` (a page is retried with the fetch backoff). The
    /// reference server's pages stop at 1 MiB of events plus one event.
    /// It also bounds a stream's bytes between two events (comments, an
    /// event over `max_event_size` being skipped): such an event is then
    /// repaired from a page, which may be this large, while a stream ended
    /// inside it would reconnect into it again. It costs no memory: the
    /// parser drops what it skips.
    pub max_body_bytes: usize,
    /// Most bytes of the live stream the body reader holds for a frame
    /// ([`Pace::HoldChunks`](super::Pace::HoldChunks)) before it delivers
    /// them anyway: what it delivers is copied into the machine's memory
    /// at once, and a frame's worth of a stream is whatever the server
    /// sends (a gzip bomb: tens of MiB, which the wasm memory would keep
    /// for good). A frame of a live answer is a few KB; 1 MiB, one event
    /// of the default `max_event_size`, is never a second delivery for it.
    pub max_held_bytes: usize,
    /// Most events one restore or repair may read (all its pages): past
    /// it the client stops with `history_too_large` (a server that pages
    /// for ever would otherwise fill the tab's memory).
    pub restore_max_events: u64,
    /// Most bytes of page bodies one restore or repair may read: past it,
    /// `history_too_large`.
    pub restore_max_bytes: u64,
    /// A stored value not read within this long is given up: the client
    /// starts without it and keeps its state in memory.
    pub storage_timeout_ms: u64,
    /// Attempts of one write (send, answer, cancel) before its error is
    /// returned.
    pub write_attempts: u32,
    /// Pacing of write retries.
    pub write_backoff: BackoffConfig,
    /// A queued message not accepted this long after it was sent (wall
    /// clock) becomes `failed` with `expired` instead of being sent.
    pub outbox_max_age_ms: u64,
    /// Frames held by a barrier (restore or repair) above which droppable
    /// events are dropped and the others are summarised, newest per kind
    /// (durable ones as a gap; see `docs/architecture.md`).
    pub buffer_limit: usize,
    /// Bytes (frames' `data` as sent) held by a barrier above which frames
    /// are summarised as beyond `buffer_limit`: 10 000 frames of up to
    /// `max_event_size` each would otherwise be 10 GiB.
    pub buffer_bytes_limit: usize,
    /// How many events the generic log view of non-session scopes keeps.
    pub log_capacity: usize,
    /// Seed of the jitter RNG (deterministic tests, distinct per tab).
    pub seed: u64,
    /// When subscribers are told of changes (see [`Notify`]).
    pub notify: Notify,
}

/// What an application chooses of a client's [`Config`] (the JS
/// `ConnectOptions` and the Rust `Options` carry these); everything else
/// is the core's default. [`Config::from_settings`] is the one place they
/// become a configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// What is followed.
    pub target: Target,
    /// A request's first-byte deadline, also the storage read's.
    pub connect_timeout_ms: u64,
    /// Speculative pages in flight ahead of the one awaited.
    pub prefetch_depth: u8,
    /// Seed of the jitter RNG (random per client unless a test fixes it).
    pub seed: u64,
    /// Whether anything keeps the persisted value (memory storage does not).
    pub persist: bool,
    /// Events of the newest page a first visit reads first (`Config::tail`).
    pub tail: u32,
    /// When subscribers are told of changes.
    pub notify: Notify,
    /// A queued message older than this is `failed` `expired`.
    pub outbox_max_age_ms: u64,
}

impl Config {
    /// The configuration of a client as an application set it up.
    pub fn from_settings(s: Settings) -> Self {
        Config {
            connect_timeout_ms: s.connect_timeout_ms,
            storage_timeout_ms: s.connect_timeout_ms,
            prefetch_depth: s.prefetch_depth,
            seed: s.seed,
            persist: s.persist,
            tail: s.tail,
            notify: s.notify,
            outbox_max_age_ms: s.outbox_max_age_ms,
            ..Config::new(s.target)
        }
    }

    /// The default [`connect_timeout_ms`](Self::connect_timeout_ms), also the
    /// JS option `connectTimeoutMs`'s.
    pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;

    /// The default [`prefetch_depth`](Self::prefetch_depth), also the JS
    /// option `prefetchDepth`'s.
    pub const DEFAULT_PREFETCH_DEPTH: u8 = 2;

    /// The default [`outbox_max_age_ms`](Self::outbox_max_age_ms): a day.
    pub const DEFAULT_OUTBOX_MAX_AGE_MS: u64 = 24 * 60 * 60 * 1000;

    /// The default [`tail`](Self::tail), also the JS option `tail`'s (the
    /// page halves read it as `TAIL` in `pkg-template/messages.js`, kept
    /// equal by `tests/defaults_once.rs`): one page that fills a screen
    /// (a turn is a handful of events: its message, tool calls, answer and
    /// end) and is one round trip of a few KB. The answer starts at a turn
    /// boundary, so it may hold more.
    pub const DEFAULT_TAIL: u32 = 40;

    /// Defaults for a target.
    pub fn new(target: Target) -> Self {
        Config {
            target,
            max_event_size: 1 << 20,
            replay_page_limit: 2_000,
            first_page_limit: 500,
            tail: Config::DEFAULT_TAIL,
            prefetch_depth: Config::DEFAULT_PREFETCH_DEPTH,
            backoff: BackoffConfig::default(),
            stall_factor: 2.5,
            heartbeat_ms: 15_000,
            persist_throttle_ms: 1_000,
            persist: true,
            fetch_timeout_ms: 30_000,
            connect_timeout_ms: Config::DEFAULT_CONNECT_TIMEOUT_MS,
            max_body_bytes: 16 << 20,
            max_held_bytes: 1 << 20,
            restore_max_events: 500_000,
            restore_max_bytes: 512 << 20,
            storage_timeout_ms: 10_000,
            write_attempts: 5,
            write_backoff: BackoffConfig {
                initial_ms: 250,
                max_ms: 4_000,
                multiplier: 2.0,
            },
            outbox_max_age_ms: Config::DEFAULT_OUTBOX_MAX_AGE_MS,
            buffer_limit: 10_000,
            buffer_bytes_limit: 16 << 20,
            log_capacity: 1_000,
            seed: 0x5eed,
            notify: Notify::Frame,
        }
    }

    /// Defaults for following one session.
    pub fn session(id: impl Into<String>) -> Self {
        Config::new(Target::session(id))
    }
}

/// Identifies one request the machine asked for; answers carry it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// Which JSON endpoint a [`Action::Fetch`] reads; the body goes back through
/// `handle_replay_page` or `handle_event_page` accordingly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchKind {
    /// `GET /v1/sessions/{id}/replay` (PROTOCOL.md §4.1).
    Replay,
    /// `GET /v1/{scope_path}/events` as JSON (PROTOCOL.md §4.2).
    Events,
}

/// What the IO layer must do next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum Action {
    /// `GET base + path_and_query` with `Accept: text/event-stream`; feed the
    /// answer to `handle_stream_opened`/`handle_stream_bytes`/`handle_stream_end`.
    OpenStream {
        /// Carried back by every input about this stream.
        id: RequestId,
        /// E.g. `/v1/sessions/ses_1/events?after_seq=5`.
        path_and_query: String,
        /// Value for the `Last-Event-ID` header, if any.
        last_event_id: Option<String>,
        /// This try waits out no backoff: a polling machine's probe of the
        /// stream, or the first try after `online`, the page becoming
        /// visible or shown again (docs/protocol.md §6, rule 13). A shared
        /// connection waiting out its own backoff opens at once for it.
        probe: bool,
    },
    /// `GET base + path_and_query` with `Accept: application/json`.
    Fetch {
        /// Carried back by the answer.
        id: RequestId,
        /// E.g. `/v1/sessions/ses_1/replay?after_cursor=0&limit=2000`.
        path_and_query: String,
        /// Which handler takes the body.
        kind: FetchKind,
    },
    /// Abort that request; any later input about it is ignored anyway.
    Abort {
        /// The request.
        id: RequestId,
    },
    /// Store these bytes (one value: epoch, cursor and state together),
    /// replacing the previous value; pass them back to `Machine::new`.
    Persist(Vec<u8>),
    /// Obtain fresh credentials before performing the actions after this one.
    RefreshCredentials,
    /// `POST base + path_and_query` with this JSON body (`Content-Type:
    /// application/json`); the deadline covers the whole answer. Report a
    /// 2xx body with `handle_post_answer`, others as for any request.
    Post {
        /// Carried back by the answer.
        id: RequestId,
        /// E.g. `/v1/sessions/ses_1/messages`.
        path_and_query: String,
        /// The JSON body.
        body: String,
        /// Send only while holding this claim, across the clients of one
        /// browser profile (a Web Lock of this name, asked for without
        /// waiting): once got, it is held until [`Action::Release`]; held
        /// by another client, the request fails at once with
        /// `CoreError::Claimed`. An IO with no such lock sends anyway.
        claim: Option<String>,
    },
    /// Let go of a claim a `Post` took (a no-op when it is not held).
    Release {
        /// The claim's name.
        claim: String,
    },
    /// Read the stored value; answer with `handle_stored` or
    /// `handle_storage_failed` (see [`Machine::load`](super::Machine::load)).
    LoadStored,
    /// Delete the stored value (it was unusable).
    RemoveStored,
}

/// Page lifecycle and connectivity events of the browser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Lifecycle {
    /// `online`.
    Online,
    /// `offline`: abort and wait for `Online`.
    Offline,
    /// `visibilitychange` to visible: verify a stale-looking stream.
    Visible,
    /// `visibilitychange` to hidden.
    Hidden,
    /// Page Lifecycle `freeze`.
    Freeze,
    /// Page Lifecycle `resume`: like `Visible`.
    Resume,
    /// `pagehide`: abort and flush the persisted state.
    PageHide,
    /// `pageshow`; `persisted: true` means restored from the bfcache.
    PageShow {
        /// `PageTransitionEvent.persisted`.
        persisted: bool,
    },
}

/// Something the application should be told (not a repaint).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Notice {
    /// A restore (start, or restart from 0) finished and was painted.
    Restored {
        /// Cursor before the restore.
        from_cursor: u64,
        /// Cursor after it.
        to_cursor: u64,
    },
    /// The backlog of a restore could not be read (non-fatal): the live
    /// stream is shown meanwhile, `Status::history_incomplete` set. Said on
    /// the first failure of a restore (retries follow with backoff) and when
    /// a 4xx gives the restore up (no retry; the live stream goes on).
    RestoreFailed {
        /// Why.
        error: ErrorInfo,
    },
    /// Missing durable events were fetched and applied.
    GapRepaired {
        /// Cursor before the repair.
        from_cursor: u64,
        /// Cursor after it.
        to_cursor: u64,
    },
    /// The log was recreated; local state was discarded, restoring from 0.
    EpochChanged {
        /// Why (an `epoch_changed` or `history_mismatch` error).
        error: ErrorInfo,
    },
    /// The server rejected the cursor; restoring from 0.
    CursorRejected {
        /// The rejection.
        error: ErrorInfo,
        /// The rejected cursor.
        cursor: u64,
    },
    /// The stored value was unusable and was discarded.
    StorageDiscarded {
        /// Why.
        error: ErrorInfo,
    },
    /// The storage failed or did not answer in time: nothing is persisted
    /// from now on (the state is kept in memory).
    StorageFallback {
        /// Why.
        error: ErrorInfo,
    },
    /// A frame was skipped (bad JSON, too large); durable ones are repaired.
    FrameSkipped {
        /// Why.
        error: ErrorInfo,
    },
    /// A live turn ended with its worker (honest boundary, rule 7).
    TurnInterrupted {
        /// The turn.
        turn_id: String,
        /// `worker_restart` or `boot_changed`.
        reason: String,
    },
    /// The live stream was muted (no event within the connect deadline
    /// on `tries` tries in a row, while the runtime's JSON answers came):
    /// following by polling until a stream shows its `hello` again.
    StreamMuted {
        /// Muted tries in a row.
        tries: u32,
        /// Each try's deadline, in ms.
        waited_ms: u64,
    },
    /// A transient failure; retrying at `retry_at`.
    Retrying {
        /// What failed.
        error: ErrorInfo,
        /// When the retry happens (ms, the caller's clock).
        retry_at: u64,
    },
    /// Stopped for good.
    Failed {
        /// Why.
        error: ErrorInfo,
    },
}

/// Coarse connection state for the UI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Opening the stream; also a restore from nothing until its first
    /// page (a new session's empty backlog goes from here to `Live`).
    Connecting,
    /// Reading the backlog behind the restore barrier, with a state to
    /// bring up to date (a stored one, or the backlog's first page).
    Restoring,
    /// Following the live stream.
    Live,
    /// Fetching missing events behind the barrier.
    Repairing,
    /// Waiting before a retry.
    Backoff,
    /// The browser is offline; waiting for `online`.
    Offline,
    /// Closed by the application, or the page was hidden (pagehide).
    Stopped,
    /// Stopped on an error that retrying cannot fix.
    Failed,
}

/// Connection status for the UI.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Current state.
    pub state: State,
    /// When it was entered (ms, the caller's clock).
    pub since: u64,
    /// When the next retry happens, in `Backoff`.
    pub next_retry_at: Option<u64>,
    /// The last error seen, cleared when live again.
    pub last_error: Option<ErrorInfo>,
    /// The view shows live events over a history whose backlog could not
    /// be read ([`Notice::RestoreFailed`]): events between the two may be
    /// missing. Cleared when the backlog is folded in.
    pub history_incomplete: bool,
}

/// Running totals since construction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Streams reopened after the first.
    pub reconnects: u64,
    /// Gap repairs completed.
    pub gaps_repaired: u64,
    /// Durable events received again and dropped.
    pub duplicates_dropped: u64,
    /// `critical: false` events dropped under load (and critical transients
    /// of unknown types beyond the barrier's bound).
    pub droppable_dropped: u64,
    /// Stream bytes received.
    pub bytes: u64,
    /// Events decoded (stream frames and page entries).
    pub events: u64,
    /// Restores started (the first one included).
    pub restores: u64,
}

/// A write the application asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// `POST /v1/sessions/{id}/messages`: starts a turn once per
    /// `message_id`; goes through the outbox (`outbox.rs`).
    Send {
        /// Client-chosen idempotency key, kept across retries.
        message_id: String,
        /// The user's text.
        text: String,
    },
    /// `POST /v1/sessions/{id}/questions/{question_id}/answer`.
    Answer {
        /// The pending question.
        question_id: String,
        /// The answer.
        answer: String,
    },
    /// `POST /v1/sessions/{id}/cancel`: stops `turn_id`, or, when `None`, the
    /// turn the view shows as live (see [`Machine::handle_write`](super::Machine::handle_write)).
    Cancel {
        /// The turn to stop.
        turn_id: Option<String>,
    },
}

/// How a successful write ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The message was accepted (once, however often it was sent).
    Sent {
        /// The turn it started.
        turn_id: String,
    },
    /// The answer was committed.
    Answered,
    /// `load_older`: the page before the oldest item is shown (or nothing
    /// was older).
    Older,
    /// The cancel was accepted; `turn_id` is the turn it stopped, `None` when
    /// that turn was no longer running.
    Cancelled {
        /// The stopped turn.
        turn_id: Option<String>,
    },
}

/// Identifies one write across its retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriteId(pub u64);

/// A write that ended, for good or not.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteDone {
    /// The write, as [`Machine::handle_write`](super::Machine::handle_write) returned it.
    pub id: WriteId,
    /// Its outcome, or the error that ended it.
    pub result: Result<WriteOutcome, CoreError>,
}
