//! A browser made of data for the share tests: contexts each with a `Share`
//! hub and real machines, and a fake runtime that serves the multiplexed
//! stream (PROTOCOL.md §4.6) and the JSON pages from per-scope logs.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashSet};

use replay_client::core::machine::{
    Action, Config, FetchKind, Machine, RequestId, Response, Target,
};
use replay_client::core::protocol::*;
use replay_client::core::share::{Output, Share, ShareConfig};
use serde_json::json;

pub const EPOCH: &str = "ep1";
pub const BOOT: &str = "boot1";

/// One committed user message of session `sid`.
pub fn message(sid: &str, seq: u64) -> Envelope {
    let data = json!({"message_id": format!("m{seq}"), "turn_id": "t", "role": "user",
                      "text": format!("{sid} says {seq}")});
    let event = Event::decode("message.committed", Some(&data.to_string())).unwrap();
    Envelope::durable(seq, Scope::Session, sid.into(), seq, String::new(), event)
}

/// A control event (`hello`, `heartbeat`, …) of session `sid`.
pub fn control(sid: &str, type_name: &str, data: serde_json::Value) -> Envelope {
    Envelope {
        id: None,
        scope: Scope::Session,
        scope_id: sid.into(),
        seq: None,
        after_seq: None,
        critical: true,
        ts: String::new(),
        event: Event::decode(type_name, Some(&data.to_string())).unwrap(),
    }
}

/// A frame of the multiplexed stream: no `id:` line (PROTOCOL.md §4.6).
pub fn frame(env: &Envelope) -> Vec<u8> {
    format!(
        "event: {}\ndata: {}\n\n",
        env.event.type_name(),
        env.to_json()
    )
    .into_bytes()
}

/// One multiplexed connection the server is writing.
pub struct Conn {
    pub ctx: usize,
    pub id: RequestId,
    pub subs: Vec<(String, Option<u64>)>,
    pub refused: HashSet<String>,
    pub out: Vec<u8>,
    pub opened: bool,
    /// Bytes are held back while paused (a slow connection).
    pub paused: bool,
    /// Opened while the proxy muted: its bytes never come, whatever the
    /// proxy does later (it chose with the answer's head).
    pub muted: bool,
}

/// The fake runtime: one log per session.
#[derive(Default)]
pub struct Server {
    pub logs: BTreeMap<String, Vec<Envelope>>,
    pub conns: Vec<Conn>,
    /// A proxy mutes every connection opened meanwhile: heads come, bytes
    /// are held back.
    pub muted: bool,
    /// Every path opened, in order.
    pub opened: Vec<(usize, String)>,
}

impl Server {
    pub fn add_session(&mut self, sid: &str, n: u64) {
        let log = (1..=n).map(|s| message(sid, s)).collect();
        self.logs.insert(sid.into(), log);
    }

    pub fn head(&self, sid: &str) -> u64 {
        self.logs[sid].len() as u64
    }

    /// A new durable event, written to every connection carrying its scope.
    pub fn append(&mut self, sid: &str) {
        let seq = self.head(sid) + 1;
        let env = message(sid, seq);
        self.logs.get_mut(sid).unwrap().push(env.clone());
        let key = format!("session:{sid}");
        for c in &mut self.conns {
            if c.subs.iter().any(|(k, _)| *k == key) && !c.refused.contains(&key) {
                c.out.extend(frame(&env));
            }
        }
    }

    /// A heartbeat for every scope of every connection.
    pub fn heartbeat(&mut self) {
        for i in 0..self.conns.len() {
            let subs = self.conns[i].subs.clone();
            for (key, _) in subs {
                if self.conns[i].refused.contains(&key) {
                    continue;
                }
                let sid = key.strip_prefix("session:").unwrap();
                let hb = control(sid, "heartbeat", json!({"head": self.head(sid)}));
                self.conns[i].out.extend(frame(&hb));
            }
        }
    }

    /// `GET /v1/stream?sub=…`: every scope's hello and backlog at once.
    pub fn open(&mut self, ctx: usize, id: RequestId, path: &str) {
        self.opened.push((ctx, path.to_owned()));
        let query = path
            .strip_prefix("/v1/stream?")
            .expect("a multiplexed path");
        let mut conn = Conn {
            ctx,
            id,
            subs: vec![],
            refused: HashSet::new(),
            out: vec![],
            opened: false,
            paused: false,
            muted: self.muted,
        };
        for sub in query.split('&') {
            let sub = sub.strip_prefix("sub=").unwrap();
            let mut parts = sub.splitn(3, ':');
            let (scope, sid, after) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            assert_eq!(scope, "session");
            let key = format!("session:{sid}");
            let after = (!after.is_empty()).then(|| after.parse::<u64>().unwrap());
            conn.subs.push((key.clone(), after));
            let Some(log) = self.logs.get(sid) else {
                let err = control(
                    sid,
                    "subscription.error",
                    json!({"error": "not_found", "message": "no such session"}),
                );
                conn.out.extend(frame(&err));
                conn.refused.insert(key);
                continue;
            };
            let head = log.len() as u64;
            if after.is_some_and(|a| a > head) {
                let err = control(
                    sid,
                    "subscription.error",
                    json!({"error": "cursor_ahead", "message": "ahead"}),
                );
                conn.out.extend(frame(&err));
                conn.refused.insert(key);
                continue;
            }
            let hello = control(
                sid,
                "hello",
                json!({"epoch": EPOCH, "head": head, "boot_id": BOOT}),
            );
            conn.out.extend(frame(&hello));
            for e in &log[after.unwrap_or(head) as usize..] {
                conn.out.extend(frame(e));
            }
        }
        self.conns.push(conn);
    }

    pub fn close(&mut self, ctx: usize, id: RequestId) {
        self.conns.retain(|c| !(c.ctx == ctx && c.id == id));
    }

    pub fn conn_mut(&mut self, ctx: usize, id: RequestId) -> Option<&mut Conn> {
        self.conns.iter_mut().find(|c| c.ctx == ctx && c.id == id)
    }

    /// A JSON page for a machine's fetch.
    pub fn page(&self, path: &str, kind: FetchKind) -> Result<Vec<u8>, (u16, Vec<u8>)> {
        let rest = path.strip_prefix("/v1/sessions/").unwrap();
        let (sid, rest) = rest.split_once('/').unwrap();
        let (_, query) = rest.split_once('?').unwrap();
        let mut after = 0;
        let mut limit = 0;
        for kv in query.split('&') {
            let (k, v) = kv.split_once('=').unwrap();
            match k {
                "after_cursor" | "after_seq" => after = v.parse::<u64>().unwrap(),
                "limit" => limit = v.parse::<u64>().unwrap(),
                _ => {}
            }
        }
        let error = |status, code: &str| {
            (
                status,
                json!({"error": code, "message": code})
                    .to_string()
                    .into_bytes(),
            )
        };
        let Some(log) = self.logs.get(sid) else {
            return Err(error(404, "not_found"));
        };
        let head = log.len() as u64;
        if after > head {
            return Err(error(409, "cursor_ahead"));
        }
        let to = (after + limit).min(head);
        let events = log[after.min(head) as usize..to as usize].to_vec();
        let has_more = to < head;
        Ok(match kind {
            FetchKind::Replay => serde_json::to_vec(&ReplayPage {
                epoch: EPOCH.into(),
                boot_id: BOOT.into(),
                cursor: to.max(after),
                head,
                has_more,
                history: events,
                live_turn: None,
                tasks: None,
                older_cursor: None,
            })
            .unwrap(),
            FetchKind::Events => serde_json::to_vec(&EventPage {
                epoch: EPOCH.into(),
                head,
                events,
                has_more,
            })
            .unwrap(),
        })
    }
}

/// One context: a hub and its machines.
pub struct Ctx {
    pub share: Share,
    pub machines: Vec<(u64, Machine)>,
    /// Virtual streams ended (clean, failed or an HTTP answer).
    pub ends: u64,
}

/// Contexts, one server, one clock.
pub struct World {
    pub server: Server,
    pub ctxs: Vec<Ctx>,
    pub now: u64,
    next_machine: u64,
}

pub fn machine_config(sid: &str, seed: u64) -> Config {
    let mut c = Config::session(sid);
    c.persist = false;
    c.prefetch_depth = 0;
    c.seed = seed;
    c
}

impl World {
    pub fn new(sessions: &[(&str, u64)]) -> Self {
        let mut server = Server::default();
        for (s, n) in sessions {
            server.add_session(s, *n);
        }
        World {
            server,
            ctxs: vec![],
            now: 1_000,
            next_machine: 0,
        }
    }

    /// A context with its hub.
    pub fn add_ctx(&mut self) -> usize {
        let i = self.ctxs.len();
        self.ctxs.push(Ctx {
            share: Share::new(ShareConfig::new(100 + i as u64)),
            machines: vec![],
            ends: 0,
        });
        i
    }

    /// A machine following `sid` in context `ctx`, optionally from a stored value.
    pub fn follow(&mut self, ctx: usize, sid: &str, stored: Option<&[u8]>) -> u64 {
        self.next_machine += 1;
        let key = self.next_machine;
        let c = Machine::new(machine_config(sid, key), stored, self.now);
        self.ctxs[ctx].machines.push((key, c));
        key
    }

    pub fn machine(&self, ctx: usize, key: u64) -> &Machine {
        &self.ctxs[ctx]
            .machines
            .iter()
            .find(|(k, _)| *k == key)
            .unwrap()
            .1
    }

    pub fn machine_mut(&mut self, ctx: usize, key: u64) -> &mut Machine {
        &mut self.ctxs[ctx]
            .machines
            .iter_mut()
            .find(|(k, _)| *k == key)
            .unwrap()
            .1
    }

    /// Closes a machine (its abort reaches the hub).
    pub fn unfollow(&mut self, ctx: usize, key: u64) {
        let now = self.now;
        self.machine_mut(ctx, key).close(now);
        self.settle();
        self.ctxs[ctx].machines.retain(|(k, _)| *k != key);
    }

    /// Runs every pending step until nothing moves (no clock advance).
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            if !self.step() {
                return;
            }
        }
        panic!("the world does not settle");
    }

    fn step(&mut self) -> bool {
        let mut moved = false;
        let now = self.now;
        for ci in 0..self.ctxs.len() {
            // Machines' actions: streams go to the hub, fetches are answered.
            let mut answers = vec![];
            {
                let ctx = &mut self.ctxs[ci];
                for (key, m) in ctx.machines.iter_mut() {
                    while let Some(a) = m.poll_action() {
                        moved = true;
                        let target = m.config().target.clone();
                        if ctx.share.handle_machine_action(*key, &target, &a, now) {
                            continue;
                        }
                        if let Action::Fetch {
                            id,
                            path_and_query,
                            kind,
                        } = a
                        {
                            answers.push((*key, id, path_and_query, kind));
                        }
                    }
                }
            }
            for (key, id, path, kind) in answers {
                let page = self.server.page(&path, kind);
                let m = self.machine_mut(ci, key);
                match (kind, page) {
                    (FetchKind::Replay, Ok(body)) => m.handle_replay_page(id, &body, now),
                    (FetchKind::Events, Ok(body)) => m.handle_event_page(id, &body, now),
                    (_, Err((status, body))) => m.handle_http_error(id, status, None, &body, now),
                }
            }
            // The hub's outputs.
            while let Some(o) = self.ctxs[ci].share.poll_output() {
                moved = true;
                match o {
                    Output::OpenMux { id, path_and_query } => {
                        self.server.open(ci, id, &path_and_query)
                    }
                    Output::AbortMux { id } => self.server.close(ci, id),
                    Output::Deliver {
                        machine,
                        stream,
                        what,
                    } => {
                        let ctx = &mut self.ctxs[ci];
                        let Some((_, m)) = ctx.machines.iter_mut().find(|(k, _)| *k == machine)
                        else {
                            continue;
                        };
                        if matches!(what, Response::End | Response::Failed(_)) {
                            ctx.ends += 1;
                        }
                        m.handle_response(stream, what, now);
                    }
                }
            }
        }
        // The server's bytes.
        for i in 0..self.server.conns.len() {
            let c = &mut self.server.conns[i];
            if c.paused {
                continue;
            }
            let (ci, id) = (c.ctx, c.id);
            if !c.opened {
                c.opened = true;
                moved = true;
                self.ctxs[ci].share.handle_mux_opened(
                    id,
                    200,
                    Some("text/event-stream"),
                    None,
                    now,
                );
            }
            if c.muted {
                continue;
            }
            let c = &mut self.server.conns[i];
            if !c.out.is_empty() {
                moved = true;
                let bytes = std::mem::take(&mut c.out);
                self.ctxs[ci].share.handle_mux_bytes(id, &bytes, now);
            }
        }
        moved
    }

    /// The next timer of anyone.
    pub fn next_timer(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        for c in &self.ctxs {
            let times = c
                .machines
                .iter()
                .filter_map(|(_, m)| m.poll_timeout())
                .chain(c.share.poll_timeout());
            for x in times {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        }
        t
    }

    /// Advances the clock by `ms`, firing every timer on the way, with a
    /// heartbeat on every connection each 10 s (as the server would).
    pub fn advance(&mut self, ms: u64) {
        let end = self.now + ms;
        let mut next_beat = self.now + 10_000;
        self.settle();
        let mut spins = 0;
        loop {
            let t = self.next_timer().unwrap_or(u64::MAX).min(next_beat);
            if t > end {
                break;
            }
            spins += 1;
            if spins > 100_000 {
                let hubs: Vec<_> = self.ctxs.iter().map(|c| c.share.poll_timeout()).collect();
                let ms: Vec<_> = self
                    .ctxs
                    .iter()
                    .flat_map(|c| {
                        c.machines
                            .iter()
                            .map(|(k, m)| (*k, m.poll_timeout(), m.status().state))
                    })
                    .collect();
                panic!("timers spin at {}: hubs {hubs:?} machines {ms:?}", self.now);
            }
            self.now = self.now.max(t);
            if t == next_beat {
                self.server.heartbeat();
                next_beat += 10_000;
            }
            let now = self.now;
            for c in &mut self.ctxs {
                for (_, m) in c.machines.iter_mut() {
                    if m.poll_timeout().is_some_and(|x| x <= now) {
                        m.handle_timeout(now);
                    }
                }
                if c.share.poll_timeout().is_some_and(|x| x <= now) {
                    c.share.handle_timeout(now);
                }
            }
            self.settle();
        }
        self.now = end;
        self.settle();
    }

    /// What a fresh client restored from the server's replay shows.
    pub fn reference(&self, sid: &str) -> Transcript {
        let mut m = Machine::new(machine_config(sid, 7), None, 0);
        let mut steps = 0;
        while let Some(a) = m.poll_action() {
            steps += 1;
            assert!(steps < 1000);
            if let Action::Fetch {
                id,
                path_and_query,
                kind: FetchKind::Replay,
            } = a
            {
                let body = self
                    .server
                    .page(&path_and_query, FetchKind::Replay)
                    .unwrap();
                m.handle_replay_page(id, &body, 0);
            }
        }
        m.transcript().unwrap()
    }

    /// Every live machine shows exactly the server's log.
    pub fn assert_converged(&self) {
        for (ci, c) in self.ctxs.iter().enumerate() {
            for (key, m) in &c.machines {
                let Target::Scoped { scope_id, .. } = &m.config().target else {
                    unreachable!()
                };
                if !self.server.logs.contains_key(scope_id) {
                    continue;
                }
                assert_eq!(
                    m.cursor(),
                    self.server.head(scope_id),
                    "ctx {ci} machine {key} ({scope_id}) cursor; status {:?}",
                    m.status()
                );
                assert_eq!(
                    m.transcript().unwrap(),
                    self.reference(scope_id),
                    "ctx {ci} machine {key} ({scope_id}) transcript"
                );
                assert_eq!(
                    m.status().state,
                    replay_client::core::machine::State::Live,
                    "ctx {ci} machine {key} ({scope_id})"
                );
            }
        }
    }

    /// Connections the server holds, per context.
    pub fn conns_of(&self, ctx: usize) -> usize {
        self.server.conns.iter().filter(|c| c.ctx == ctx).count()
    }

    /// Scopes the server's connections carry (over all of them).
    pub fn carried(&self) -> BTreeSet<String> {
        self.server
            .conns
            .iter()
            .flat_map(|c| c.subs.iter().map(|(k, _)| k.clone()))
            .collect()
    }
}
