//! One connection per browser (PROTOCOL.md §4.6, §6 rule 12), sans-IO.
//!
//! Every followed scope keeps its own [`machine::Machine`](crate::machine::Machine).
//! A machine's `OpenStream`/`Abort` for a scoped target go to the [`Share`]
//! hub instead of the network; the hub answers with a virtual stream under
//! the same [`RequestId`]: [`Output::Deliver`] of the [`Response`] facts
//! that the executor feeds to that machine as it would a real answer's
//! (`Machine::handle_response`). Its events come as `Response::Events`, each
//! read once here (a session's payload typed, as the machine reads it) and
//! of that scope only, so the machine's dedupe, gap repair, watchdog and
//! rules 1–12 apply unchanged.
//!
//! The hub holds one multiplexed stream for the scopes of its machines
//! (`connection.rs`: which scopes it carries, switching sets, reconnecting).
//! It remembers per scope the last `hello` and the highest head, and greets
//! a machine that subscribes to a scope already flowing with a synthesised
//! `hello` + `heartbeat` at that head: a live-only machine (restoring)
//! treats it as the restore marker, one with an older cursor repairs its gap
//! by its own fetch at once. Durable events at or below what was passed on
//! are dropped (a new connection resumes from there).
//!
//! Like the machine: inputs `handle_*` with `now` (ms), outputs drained with
//! [`poll_output`](Share::poll_output), one timer at
//! [`poll_timeout`](Share::poll_timeout).

mod connection;
mod mux;
mod route;
mod subs;

pub use connection::has_no_multiplexed_stream;
pub use mux::{path as mux_path, MAX_SUBS};
pub use route::MAX_TRACKS;
use subs::{min_some, Subs};

use std::collections::VecDeque;

use crate::machine::{
    parse_retry_after, Action, Backoff, BackoffConfig, CoreError, RequestId, Response, SplitMix64,
    Target,
};
use crate::sse::SseItem;
use mux::Mux;
use route::{target_key, Router};

/// A set change waits this long, so a burst of subscriptions (a page
/// opening five scopes) makes one new connection.
pub const SET_DEBOUNCE_MS: u64 = 25;
/// A scope nobody follows any more stays on the connection this long: a
/// machine that drops and reopens its stream does not cost a reconnect.
pub const LINGER_MS: u64 = 2_000;
/// Virtual streams one hub may serve.
pub const MAX_LOCAL_STREAMS: usize = 256;

/// How the hub's machines get their live streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// One multiplexed stream (PROTOCOL.md §4.6) carries every scope.
    #[default]
    Multiplexed,
    /// The runtime has no multiplexed stream (`GET /v1/stream` answered
    /// 404, 405 or 501): each machine opens its own scoped stream (§4.3),
    /// for as long as the hub lives.
    Scoped,
}

/// What the executor must do next.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// `GET base + path_and_query`, `Accept: text/event-stream`; feed the
    /// answer to the `handle_mux_*` inputs.
    OpenMux {
        /// Carried back by every input about it.
        id: RequestId,
        /// E.g. `/v1/stream?sub=session:ses_1:17`.
        path_and_query: String,
    },
    /// Abort that connection.
    AbortMux {
        /// The connection.
        id: RequestId,
    },
    /// Feed this to the machine's stream `stream`
    /// ([`Machine::handle_response`](crate::machine::Machine::handle_response)).
    Deliver {
        /// The executor's key of the machine.
        machine: u64,
        /// The machine's stream request.
        stream: RequestId,
        /// What happened.
        what: Response,
    },
}

/// The hub's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareConfig {
    /// Reconnect pacing of the multiplexed stream.
    pub backoff: BackoffConfig,
    /// The connection is declared stalled after this long without an event
    /// (every scope gets a heartbeat at least every 15 s; comments do not
    /// count).
    pub stall_ms: u64,
    /// SSE events above this size are skipped (their machines repair).
    pub max_event_size: usize,
    /// Seed of the jitter.
    pub seed: u64,
}

impl ShareConfig {
    /// Defaults, with the jitter seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        ShareConfig {
            backoff: BackoffConfig::default(),
            stall_ms: 37_500,
            max_event_size: 1 << 20,
            seed,
        }
    }
}

/// Running totals and the current shape, for `diagnostics()` (its JSON is
/// the `share` of the JS `Diagnostics`, camelCase).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareDiagnostics {
    /// `multiplexed` until the runtime showed it has no multiplexed stream,
    /// then `scoped`.
    pub transport: Transport,
    /// Scopes the machines follow.
    pub scopes: usize,
    /// Virtual streams served.
    pub local_streams: usize,
    /// Multiplexed connections opened.
    pub connections_opened: u64,
    /// Durable events dropped as already passed on.
    pub duplicates_dropped: u64,
}

/// The hub. See the module docs.
#[derive(Debug)]
pub struct Share {
    cfg: ShareConfig,
    router: Router,
    /// The connection in use.
    mux: Option<Mux>,
    /// The connection being replaced, until the new one said every hello.
    old: Option<Mux>,
    next_id: u64,
    backoff: Backoff,
    rng: SplitMix64,
    mux_retry_at: Option<u64>,
    sse_retry: Option<u64>,
    set_check_at: Option<u64>,
    /// Scopes nobody here follows any more, each with since when (in the
    /// cursor's place): they stay wanted for [`LINGER_MS`].
    idle: Subs,
    out: VecDeque<Output>,
    diag: ShareDiagnostics,
    transport: Transport,
    closed: bool,
}

impl Share {
    /// A hub serving no stream yet.
    pub fn new(cfg: ShareConfig) -> Self {
        Share {
            rng: SplitMix64::new(cfg.seed),
            cfg,
            router: Router::default(),
            mux: None,
            old: None,
            next_id: 0,
            backoff: Backoff::default(),
            mux_retry_at: None,
            sse_retry: None,
            set_check_at: None,
            idle: Subs::default(),
            out: VecDeque::new(),
            diag: ShareDiagnostics::default(),
            transport: Transport::Multiplexed,
            closed: false,
        }
    }

    /// How the machines get their live streams now.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Counters and shape.
    pub fn diagnostics(&self) -> ShareDiagnostics {
        let mut d = self.diag.clone();
        d.transport = self.transport;
        d.local_streams = self.router.len();
        d.duplicates_dropped = self.router.duplicates();
        d.scopes = self.router.subscriptions().len();
        d
    }

    /// Takes a machine's action if it is the hub's: `OpenStream` of a scoped
    /// target, or `Abort` of a virtual stream. Returns false for anything
    /// the executor must do itself.
    pub fn handle_machine_action(
        &mut self,
        machine: u64,
        target: &Target,
        action: &Action,
        now: u64,
    ) -> bool {
        match action {
            Action::OpenStream {
                id,
                last_event_id,
                probe,
                ..
            } => {
                self.handle_open_stream(machine, target, *id, last_event_id.as_deref(), *probe, now)
            }
            Action::Abort { id } => self.handle_abort(machine, *id, now),
            _ => false,
        }
    }

    /// A machine asks for its live stream (`last_event_id` = its cursor, or
    /// `None` for live only; `probe`: the machine waits out no backoff for
    /// it, and neither does the connection). False for the global target
    /// (not shared), and for every target once the transport is
    /// [`Transport::Scoped`]: the executor opens the machine's own stream.
    pub fn handle_open_stream(
        &mut self,
        machine: u64,
        target: &Target,
        id: RequestId,
        last_event_id: Option<&str>,
        probe: bool,
        now: u64,
    ) -> bool {
        let Some(key) = target_key(target) else {
            return false;
        };
        if self.transport == Transport::Scoped {
            return false;
        }
        if self.closed {
            return true;
        }
        if self.router.len() >= MAX_LOCAL_STREAMS {
            self.out.push_back(Output::Deliver {
                machine,
                stream: id,
                what: Response::Failed(CoreError::Network("too many shared streams".into())),
            });
            return true;
        }
        let after = last_event_id.and_then(|v| v.parse::<u64>().ok());
        if probe {
            // A probe has its connect deadline running: a connection
            // waiting out a backoff earned by muted or failed tries would
            // make it fail for sure.
            self.mux_retry_at = None;
            self.drop_unheard_mux();
        }
        self.idle.remove(&key);
        self.router
            .subscribe(machine, id, key, after, &mut self.out);
        self.set_changed(now);
        true
    }

    /// A machine aborts a request; true if it was a virtual stream.
    pub fn handle_abort(&mut self, machine: u64, id: RequestId, now: u64) -> bool {
        let Some(key) = self.router.unsubscribe(machine, id) else {
            return false;
        };
        if !self.router.follows(&key) {
            self.idle_since(&key, now);
        }
        self.set_changed(now);
        true
    }

    /// One fact of connection `id`'s answer (the `handle_mux_*` input it
    /// names; a connection's answer has no `Events`).
    pub fn handle_mux(&mut self, id: RequestId, what: Response, now: u64) {
        match what {
            Response::Head {
                status,
                content_type,
                retry_after,
            } => self.handle_mux_opened(
                id,
                status,
                content_type.as_deref(),
                retry_after.as_deref(),
                now,
            ),
            Response::Body(b) => self.handle_mux_bytes(id, &b, now),
            Response::Events(_) => {}
            Response::End => self.handle_mux_end(id, now),
            Response::Failed(e) => self.handle_mux_failed(id, e, now),
        }
    }

    /// A machine went away (its client closed): its virtual streams are
    /// dropped, and a scope nobody else follows leaves the connection at
    /// the next set change, without lingering (it will not reopen).
    pub fn handle_machine_gone(&mut self, machine: u64, now: u64) {
        let mut changed = false;
        while let Some(id) = self.router.stream_of(machine) {
            if let Some(key) = self.router.unsubscribe(machine, id) {
                if !self.router.follows(&key) {
                    self.idle.remove(&key);
                }
                changed = true;
            }
        }
        if changed {
            self.set_changed(now);
        }
    }

    /// The next thing to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.closed {
            return None;
        }
        let mut at = min_some(self.set_check_at, self.mux_retry_at);
        if let Some(m) = &self.mux {
            at = min_some(at, Some(m.last_byte_at.saturating_add(self.cfg.stall_ms)));
        }
        for (_, since) in self.idle.iter() {
            at = min_some(at, since.map(|t| t.saturating_add(LINGER_MS)));
        }
        at
    }

    /// The timer fired (late is fine).
    pub fn handle_timeout(&mut self, now: u64) {
        if self.closed {
            return;
        }
        let lingered =
            |since: Option<u64>| since.is_some_and(|t| now >= t.saturating_add(LINGER_MS));
        if self.idle.drop_where(&lingered) {
            self.set_changed(now);
        }
        self.mux_timers(now);
    }

    /// Stops: aborts the connections, serves nothing more.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.abort_muxes();
        self.closed = true;
    }

    /// `key` is followed by nobody here since `now` (see [`LINGER_MS`]).
    fn idle_since(&mut self, key: &str, now: u64) {
        self.idle.remove(key);
        self.idle.add(key, Some(now));
    }

    fn alloc_id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    fn parse_items(mux: &mut Mux, bytes: &[u8]) -> Vec<SseItem> {
        let mut items = Vec::new();
        mux.parser.push(bytes, &mut |it| items.push(it));
        items
    }

    fn retry_hint(&self, retry_after: Option<&str>, now: u64) -> u64 {
        retry_after
            .and_then(|v| parse_retry_after(v, now))
            .or(self.sse_retry)
            .unwrap_or(0)
    }
}
