//! A hand-driven client for rule-by-rule tests.

#![allow(dead_code)]

use replay_client::core::fold::ViewChange;
use replay_client::core::machine::{Action, Config, FetchKind, Machine, Notice, RequestId};
use replay_client::core::protocol::*;

use super::events::*;

pub const EPOCH: &str = "e1";
pub const BOOT: &str = "b1";

pub struct Rig {
    pub c: Machine,
    pub now: u64,
    pub stream: Option<RequestId>,
    /// The oldest fetch in flight: the page the machine is waiting for.
    pub fetch: Option<(RequestId, FetchKind, String)>,
    /// Every fetch in flight, oldest first (`fetch` and any prefetch).
    pub fetches: Vec<(RequestId, FetchKind, String)>,
    pub log: Vec<Action>,
    pub notices: Vec<Notice>,
}

impl Rig {
    pub fn with(cfg: Config, stored: Option<&[u8]>) -> Self {
        let c = Machine::new(cfg, stored, 0);
        let mut r = Rig {
            c,
            now: 0,
            stream: None,
            fetch: None,
            fetches: Vec::new(),
            log: Vec::new(),
            notices: Vec::new(),
        };
        r.pump();
        r
    }

    /// A session rig whose first visit reads the history forward.
    pub fn new() -> Self {
        Rig::with(forward(), None)
    }

    /// Drains actions (remembering the current stream and fetch) and notices.
    pub fn pump(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.c.poll_action() {
            match &a {
                Action::OpenStream { id, .. } => self.stream = Some(*id),
                Action::Fetch {
                    id,
                    kind,
                    path_and_query,
                } => {
                    let f = (*id, *kind, path_and_query.clone());
                    self.fetches.push(f.clone());
                    self.fetch.get_or_insert(f);
                }
                Action::Abort { id } => {
                    if self.stream == Some(*id) {
                        self.stream = None;
                    }
                    self.forget_fetch(*id);
                }
                _ => {}
            }
            out.push(a.clone());
            self.log.push(a);
        }
        while let Some(n) = self.c.poll_notice() {
            self.notices.push(n);
        }
        out
    }

    /// Runs timers until a page is requested again (a retry after backoff).
    pub fn until_fetch(&mut self) {
        for _ in 0..100 {
            if self.fetch.is_some() {
                return;
            }
            let t = self.c.poll_timeout().expect("a timer is armed");
            self.now = self.now.max(t);
            self.c.handle_timeout(self.now);
            self.pump();
        }
        panic!("no page was requested again");
    }

    /// Pumps, then reads pages that arrived early, as the driver does
    /// (after performing the actions each time).
    pub fn pump_waiting_pages(&mut self) {
        self.pump();
        while self.c.has_waiting_page() {
            self.c.handle_waiting_page(self.now);
            self.pump();
        }
    }

    /// The fetch `id` is over (answered or aborted).
    pub fn forget_fetch(&mut self, id: RequestId) {
        self.fetches.retain(|f| f.0 != id);
        if self.fetch.as_ref().is_some_and(|f| f.0 == id) {
            self.fetch = self.fetches.first().cloned();
        }
    }

    /// Paths of the fetches in flight, oldest first.
    pub fn fetch_paths(&self) -> Vec<String> {
        self.fetches.iter().map(|f| f.2.clone()).collect()
    }

    /// Answers the fetch in flight whose path is `path`.
    pub fn answer_path(&mut self, path: &str, body: &[u8]) {
        let (id, kind, _) = self
            .fetches
            .iter()
            .find(|f| f.2 == path)
            .cloned()
            .unwrap_or_else(|| panic!("no fetch of {path} in {:?}", self.fetch_paths()));
        self.forget_fetch(id);
        match kind {
            FetchKind::Replay => self.c.handle_replay_page(id, body, self.now),
            FetchKind::Events => self.c.handle_event_page(id, body, self.now),
        }
        self.pump_waiting_pages();
    }

    pub fn changes(&mut self) -> Vec<ViewChange> {
        let mut v = Vec::new();
        while let Some(c) = self.c.poll_view_change() {
            v.push(c);
        }
        v
    }

    pub fn stream_id(&self) -> RequestId {
        self.stream.expect("a stream is open")
    }

    pub fn fetch_path(&self) -> String {
        self.fetch.as_ref().expect("a fetch is pending").2.clone()
    }

    pub fn open_ok(&mut self) {
        let id = self.stream_id();
        self.c
            .handle_stream_opened(id, 200, Some("text/event-stream"), None, self.now);
        self.pump();
    }

    pub fn send(&mut self, envs: &[Envelope]) {
        let id = self.stream_id();
        self.c
            .handle_stream_bytes(id, frames(envs).as_bytes(), self.now);
        self.pump();
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let id = self.stream_id();
        self.c.handle_stream_bytes(id, bytes, self.now);
        self.pump();
    }

    pub fn answer(&mut self, body: &[u8]) {
        let (id, kind, _) = self.fetch.clone().expect("a fetch is pending");
        self.forget_fetch(id);
        match kind {
            FetchKind::Replay => self.c.handle_replay_page(id, body, self.now),
            FetchKind::Events => self.c.handle_event_page(id, body, self.now),
        }
        self.pump_waiting_pages();
    }

    pub fn http_error(
        &mut self,
        stream: bool,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
    ) {
        let id = if stream {
            self.stream_id()
        } else {
            let id = self.fetch.as_ref().expect("fetch").0;
            self.forget_fetch(id);
            id
        };
        self.c
            .handle_http_error(id, status, retry_after, body, self.now);
        self.pump();
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
        self.c.handle_timeout(self.now);
        self.pump();
    }

    /// Runs timers until `done` holds (at most 1 000 of them).
    pub fn run_timers_until(&mut self, done: impl Fn(&Rig) -> bool) {
        for _ in 0..1_000 {
            if done(self) {
                return;
            }
            let t = self.c.poll_timeout().expect("a timer is armed");
            self.now = self.now.max(t);
            self.c.handle_timeout(self.now);
            self.pump();
        }
        panic!("still waiting after 1 000 timers");
    }

    /// Runs timers until a new stream is requested; returns its path.
    pub fn until_reconnect(&mut self) -> String {
        for _ in 0..100 {
            let t = self.c.poll_timeout().expect("a timer is armed");
            self.now = self.now.max(t);
            self.c.handle_timeout(self.now);
            for a in self.pump() {
                if let Action::OpenStream { path_and_query, .. } = a {
                    return path_and_query;
                }
            }
        }
        panic!("no reconnect");
    }

    /// A fresh session client brought live at `events` (replay with them,
    /// stream hello at their head).
    pub fn live_with(events: &[Envelope]) -> Self {
        let mut r = Rig::new();
        r.open_ok();
        let head = events.len() as u64;
        r.send(&[hello(EPOCH, head, BOOT)]);
        r.answer(&replay_page(
            EPOCH, BOOT, 0, events, head, false, None, None,
        ));
        // Let the persist throttle pass so the latest state is stored.
        r.advance(1_000);
        r.changes();
        r.notices.clear();
        r
    }
}

/// A log of `n` simple events: session.created then user messages.
pub fn simple_log(n: u64) -> Vec<Envelope> {
    (1..=n)
        .map(|s| user_msg(s, &format!("u{s}"), &format!("text {s}")))
        .collect()
}

/// The session's default configuration with `tail: 0`: a first visit
/// reads the whole history forward from cursor 0, which is what the rules'
/// tests (restore, paging, repair) are about. The newest page first, the
/// default, has its own tests (`machine_newest_first.rs`).
pub fn forward() -> Config {
    Config {
        tail: 0,
        ..Config::session(SES)
    }
}
