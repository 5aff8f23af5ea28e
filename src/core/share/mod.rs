//! One connection per browser (PROTOCOL.md §4.6, §6 rule 12), sans-IO.
//!
//! Every followed scope keeps its own [`machine::Machine`](crate::machine::Machine).
//! A machine's `OpenStream`/`Abort` for a scoped target go to the [`Share`]
//! hub instead of the network; the hub answers with a virtual stream under
//! the same [`RequestId`]: [`Output::Deliver`] of [`Delivery`] values that
//! the executor feeds to that machine (`Opened` → `handle_stream_opened`,
//! `Bytes` → `handle_stream_bytes`, `End` → `handle_stream_end`, `Failed` →
//! `handle_request_failed`, `HttpError` → `handle_http_error`). Each `Bytes` holds whole SSE events of
//! that scope only, so the machine's parser, dedupe, gap repair, watchdog and
//! rules 1–12 apply unchanged.
//!
//! Roles: [`Role::Solo`] opens its own multiplexed stream for its own
//! scopes; [`Role::Leader`] opens it for the union of the group's scopes and
//! broadcasts their events on the channel; [`Role::Follower`] announces its
//! scopes on the channel and routes what the leader broadcasts. The hub
//! remembers per scope the last `hello` and the highest head, and greets a
//! machine that subscribes to a scope already flowing with a synthesised
//! `hello` + `heartbeat` at that head: a live-only machine (restoring)
//! treats it as the restore marker, one with an older cursor repairs its gap
//! by its own fetch at once. Durable events at or below what was passed on
//! are dropped (a new connection resumes from there).
//!
//! Like the machine: inputs `handle_*` with `now` (ms), outputs drained with
//! [`poll_output`](Share::poll_output), one timer at
//! [`poll_timeout`](Share::poll_timeout).

mod mux;
mod route;
mod subs;
pub mod wire;

pub use leader::has_no_multiplexed_stream;
pub use mux::{path as mux_path, MAX_SUBS};
pub use route::MAX_TRACKS;
use subs::min_some;
pub use subs::Subs;

use std::collections::VecDeque;

use crate::json;
use crate::machine::{
    parse_retry_after, Action, Backoff, BackoffConfig, CoreError, RequestId, SplitMix64, Target,
};
use crate::protocol::Envelope;
use crate::sse::{SseEvent, SseItem};
use mux::Mux;
use route::{target_key, Router};
use wire::Body;

/// A set change waits this long, so a burst of subscriptions (a page
/// opening five scopes, followers re-announcing) makes one new connection.
pub const SET_DEBOUNCE_MS: u64 = 25;
/// A scope nobody follows any more stays on the connection this long: a
/// machine that drops and reopens its stream does not cost a reconnect.
pub const LINGER_MS: u64 = 2_000;
/// A follower re-announces its scopes this often.
pub const SUB_REFRESH_MS: u64 = 10_000;
/// A follower not heard of for this long is forgotten (it crashed).
pub const SUB_EXPIRY_MS: u64 = 35_000;
/// Channel messages above this size are neither sent nor read.
pub const MAX_MESSAGE_BYTES: usize = 2 << 20;
/// Virtual streams one context may hold.
pub const MAX_LOCAL_STREAMS: usize = 256;
/// Other contexts of a group the leader keeps subscriptions of.
pub const MAX_CONTEXTS: usize = 64;

/// Who holds the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// No sharing: this context's own multiplexed stream (`share: "off"`).
    Solo,
    /// Holds the group's stream and broadcasts it.
    Leader,
    /// Receives the leader's broadcast.
    Follower,
}

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

/// What happened on a stream, in the terms of the machine's stream inputs:
/// what a machine's virtual stream receives from the hub, and what the
/// executor reports of a real one (a machine's own, or the hub's
/// connection: [`Share::handle_mux`]).
#[derive(Debug, PartialEq)]
pub enum Delivery {
    /// `handle_stream_opened(id, status, content_type, retry_after, now)`
    /// (a virtual stream: 200, `text/event-stream`).
    Opened {
        /// The status (2xx).
        status: u16,
        /// `Content-Type`.
        content_type: Option<String>,
        /// `Retry-After`.
        retry_after: Option<String>,
    },
    /// `handle_stream_bytes(id, bytes, now)`: body bytes (from the hub,
    /// whole SSE events).
    Bytes(Vec<u8>),
    /// `handle_stream_end(id, now)`.
    End,
    /// `handle_request_failed(id, error, now)`.
    Failed(CoreError),
    /// `handle_http_error(id, status, retry_after, body, now)`.
    HttpError {
        /// The status.
        status: u16,
        /// `Retry-After`.
        retry_after: Option<String>,
        /// The body.
        body: Vec<u8>,
    },
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
    /// Post these bytes on the group's channel.
    Broadcast(Vec<u8>),
    /// Feed this to the machine's stream `stream` (see [`Delivery`]).
    Deliver {
        /// The executor's key of the machine.
        machine: u64,
        /// The machine's stream request.
        stream: RequestId,
        /// What happened.
        what: Delivery,
    },
}

/// The hub's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareConfig {
    /// This context's id (random, distinct per context).
    pub context: u64,
    /// The group: base URL + share key.
    pub group: String,
    /// Share with other contexts (`share: "auto"`); off = [`Role::Solo`].
    /// Without the crate's `group` feature a hub is solo whatever this says.
    pub shared: bool,
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
    /// Defaults for a context of a group.
    pub fn new(context: u64, group: impl Into<String>, shared: bool) -> Self {
        ShareConfig {
            context,
            group: group.into(),
            shared,
            backoff: BackoffConfig::default(),
            stall_ms: 37_500,
            max_event_size: 1 << 20,
            seed: context,
        }
    }
}

/// Running totals and the current shape, for `diagnostics()` (its JSON is
/// the `share` of the JS `Diagnostics`, camelCase).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareDiagnostics {
    /// `solo`, `leader` or `follower`.
    pub role: Option<Role>,
    /// `multiplexed` until the runtime showed it has no multiplexed stream,
    /// then `scoped`.
    pub transport: Transport,
    /// Scopes the group follows (as far as this context knows).
    pub group_scopes: usize,
    /// Virtual streams served in this context.
    pub local_streams: usize,
    /// Leaders seen taking over (this context included).
    pub leader_changes: u64,
    /// Multiplexed connections opened.
    pub connections_opened: u64,
    /// Events posted on the channel.
    pub frames_broadcast: u64,
    /// Events received from the channel.
    pub frames_received: u64,
    /// Channel messages ignored (malformed, foreign, too large, stale).
    pub messages_ignored: u64,
    /// Durable events dropped as already passed on.
    pub duplicates_dropped: u64,
}

/// Another context's subscriptions.
#[derive(Debug)]
struct Remote {
    context: u64,
    subs: Subs,
    seen_at: u64,
}

/// The hub of one context. See the module docs.
#[derive(Debug)]
pub struct Share {
    cfg: ShareConfig,
    role: Role,
    router: Router,
    /// The connection in use (leader and solo).
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
    /// The other contexts of the group (at most [`MAX_CONTEXTS`]).
    remotes: Vec<Remote>,
    leader: Option<u64>,
    sub_refresh_at: Option<u64>,
    out: VecDeque<Output>,
    diag: ShareDiagnostics,
    transport: Transport,
    closed: bool,
}

mod group;
mod leader;

impl Share {
    /// A hub; shared ones start as followers until
    /// [`handle_became_leader`](Self::handle_became_leader).
    pub fn new(cfg: ShareConfig, now: u64) -> Self {
        let role = if cfg.shared && cfg!(feature = "group") {
            Role::Follower
        } else {
            Role::Solo
        };
        let mut s = Share {
            rng: SplitMix64::new(cfg.seed),
            cfg,
            role,
            router: Router::default(),
            mux: None,
            old: None,
            next_id: 0,
            backoff: Backoff::default(),
            mux_retry_at: None,
            sse_retry: None,
            set_check_at: None,
            idle: Subs::default(),
            remotes: Vec::new(),
            leader: None,
            sub_refresh_at: None,
            out: VecDeque::new(),
            diag: ShareDiagnostics::default(),
            transport: Transport::Multiplexed,
            closed: false,
        };
        if role == Role::Follower {
            // Tells a leader we exist (it answers `leader`).
            s.announce(now);
        }
        s
    }

    /// The current role.
    pub fn role(&self) -> Role {
        self.acting()
    }

    /// The role the code acts on: without the `group` feature always
    /// [`Role::Solo`], so the leader's and follower's paths compile away.
    fn acting(&self) -> Role {
        if cfg!(feature = "group") {
            self.role
        } else {
            Role::Solo
        }
    }

    /// How the machines get their live streams now.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Counters and shape.
    pub fn diagnostics(&self) -> ShareDiagnostics {
        let mut d = self.diag.clone();
        d.role = Some(self.acting());
        d.transport = self.transport;
        d.local_streams = self.router.len();
        d.duplicates_dropped = self.router.duplicates();
        d.group_scopes = self.group_keys().len();
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
                id, last_event_id, ..
            } => self.handle_open_stream(machine, target, *id, last_event_id.as_deref(), now),
            Action::Abort { id } => self.handle_abort(machine, *id, now),
            _ => false,
        }
    }

    /// A machine asks for its live stream (`last_event_id` = its cursor, or
    /// `None` for live only). False for the global target (not shared), and
    /// for every target once the transport is [`Transport::Scoped`]: the
    /// executor opens the machine's own stream.
    pub fn handle_open_stream(
        &mut self,
        machine: u64,
        target: &Target,
        id: RequestId,
        last_event_id: Option<&str>,
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
                what: Delivery::Failed(CoreError::Network("too many shared streams".into())),
            });
            return true;
        }
        let after = last_event_id.and_then(|v| v.parse::<u64>().ok());
        self.idle.remove(&key);
        self.router
            .subscribe(machine, id, key, after, &mut self.out);
        self.subscriptions_changed(now);
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
        self.subscriptions_changed(now);
        true
    }

    /// What happened on connection `id`, as a [`Delivery`] (the
    /// `handle_mux_*` input it names).
    pub fn handle_mux(&mut self, id: RequestId, what: Delivery, now: u64) {
        match what {
            Delivery::Opened {
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
            Delivery::Bytes(b) => self.handle_mux_bytes(id, &b, now),
            Delivery::End => self.handle_mux_end(id, now),
            Delivery::Failed(e) => self.handle_mux_failed(id, e, now),
            Delivery::HttpError {
                status,
                retry_after,
                body,
            } => self.handle_mux_http_error(id, status, retry_after.as_deref(), &body, now),
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
            self.subscriptions_changed(now);
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
        at = min_some(at, self.sub_refresh_at);
        if let Some(m) = &self.mux {
            at = min_some(at, Some(m.last_byte_at.saturating_add(self.cfg.stall_ms)));
        }
        for (_, since) in self.idle.iter() {
            at = min_some(at, since.map(|t| t.saturating_add(LINGER_MS)));
        }
        if self.acting() == Role::Leader {
            for r in &self.remotes {
                at = min_some(at, Some(r.seen_at.saturating_add(SUB_EXPIRY_MS)));
            }
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
        if self.sub_refresh_at.is_some_and(|t| now >= t) {
            self.announce(now);
        }
        if self.acting() == Role::Leader {
            self.expire_remotes(now);
        }
        self.mux_timers(now);
    }

    /// Stops: aborts the connections, tells the group, serves nothing more.
    pub fn close(&mut self, now: u64) {
        if self.closed {
            return;
        }
        if self.acting() == Role::Leader {
            self.resign(now);
        }
        if self.acting() != Role::Solo {
            self.broadcast(&Body::Bye);
        }
        self.abort_muxes();
        self.closed = true;
    }

    /// Local subscriptions changed: a follower tells the leader, a leader or
    /// solo hub checks its set.
    fn subscriptions_changed(&mut self, now: u64) {
        match self.acting() {
            Role::Follower => self.announce(now),
            Role::Leader | Role::Solo => self.set_changed(now),
        }
    }

    /// Posts a message (counted when an event; dropped when too large).
    fn broadcast(&mut self, body: &Body<'_>) {
        if self.acting() == Role::Solo {
            return;
        }
        let bytes = wire::encode(&self.cfg.group, self.cfg.context, body);
        if bytes.len() > MAX_MESSAGE_BYTES {
            // The followers' machines find the hole and repair it.
            self.diag.messages_ignored += 1;
            return;
        }
        if matches!(body, Body::Event(_)) {
            self.diag.frames_broadcast += 1;
        }
        self.out.push_back(Output::Broadcast(bytes));
    }

    /// Every scope this context knows the group follows.
    fn group_keys(&self) -> Subs {
        let mut m = self.router.subscriptions();
        for r in &self.remotes {
            m.add_all(&r.subs);
        }
        m
    }

    /// `key` is followed by nobody here since `now` (see [`LINGER_MS`]).
    fn idle_since(&mut self, key: &str, now: u64) {
        self.idle.remove(key);
        self.idle.add(key, Some(now));
    }

    /// Whether another context follows `key`.
    fn remote_follows(&self, key: &str) -> bool {
        self.remotes.iter().any(|r| r.subs.has(key))
    }

    fn alloc_id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    /// Parses an envelope of the shared stream (payloads kept opaque).
    fn read_envelope(text: &str) -> Option<Envelope> {
        json::from_str_opaque::<Envelope>(text).ok()
    }

    /// Feeds one SSE event of a connection through the router; returns
    /// whether it was passed on (to broadcast).
    fn route_event(&mut self, ev: &SseEvent, env: &Envelope, start: Option<Option<u64>>) -> bool {
        let kept = self.router.event(&ev.data, env, start, &mut self.out);
        let key = route::key_of(env.scope, &env.scope_id);
        if kept && self.acting() == Role::Leader && self.remote_follows(&key) {
            self.broadcast(&Body::Event(ev.data.as_str().into()));
        }
        kept
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
