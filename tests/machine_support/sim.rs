//! A seeded simulation: a generated session script, a fake server, random
//! faults, and invariant checks after every input. The client is the
//! executor the browser runs (`replay_client::exec`) over a fake platform
//! (`sim_io`), so the drive loop itself is what is simulated.

#![allow(dead_code)]

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;

use replay_client::core::fold::View;
use replay_client::core::machine::{
    Action, Config, CoreError, Lifecycle, Machine, RequestId, Response, SplitMix64, State, Status,
    Write,
};
use replay_client::core::protocol::Transcript;
use replay_client::core::protocol::*;
use replay_client::core::transcript::{fold, fold_view, transcript_eq};
use replay_client::exec::Executor;

use super::server::{Server, Step};
use super::sim_io::SimIo;

/// Choices come from a schedule first (proptest shrinks it), then the RNG.
pub struct Chooser {
    pub schedule: VecDeque<u32>,
    pub rng: SplitMix64,
}

impl Chooser {
    pub fn pick(&mut self, n: u32) -> u32 {
        match self.schedule.pop_front() {
            Some(v) => v % n,
            None => (self.rng.next_u64() % n as u64) as u32,
        }
    }
    pub fn chance(&mut self, percent: u32) -> bool {
        self.pick(100) < percent
    }
}

const WORDS: &[&str] = &[
    "hello ", "wörld ", "café ", "日本 ", "→ ", "tool ", "ok ", "x",
];

/// Generates a random valid session script.
pub fn script(c: &mut Chooser, turns: u32, allow_epoch: bool) -> Vec<Step> {
    let mut out = Vec::new();
    let mut n = 0u32;
    let d = |t: &str, v: serde_json::Value| Event::decode(t, Some(&v.to_string())).unwrap();
    out.push(Step::Durable(d(
        "session.created",
        serde_json::json!({"title": WORDS[c.pick(8) as usize]}),
    )));
    for turn in 0..turns {
        let tid = format!("t{turn}");
        n += 1;
        out.push(Step::Durable(d(
            "message.committed",
            serde_json::json!({"message_id": format!("u{n}"), "turn_id": tid, "role": "user", "text": "go"}),
        )));
        out.push(Step::Durable(d(
            "turn.started",
            serde_json::json!({"turn_id": tid, "input_message_id": format!("u{n}")}),
        )));
        let mut interrupted = false;
        for part in 0..1 + c.pick(3) {
            let mid = format!("m{turn}_{part}");
            let mut text = String::new();
            let mut len = 0u64;
            for _ in 0..1 + c.pick(5) {
                let chunk: String = (0..1 + c.pick(3))
                    .map(|_| WORDS[c.pick(8) as usize])
                    .collect();
                out.push(Step::Transient(
                    d(
                        "turn.delta",
                        serde_json::json!({"turn_id": tid, "message_id": mid, "offset": len, "text": chunk}),
                    ),
                    true,
                ));
                len += chunk.chars().count() as u64;
                text.push_str(&chunk);
                if c.chance(15) {
                    out.push(Step::LiveSnap);
                }
                if c.chance(10) {
                    out.push(Step::Heartbeat);
                }
            }
            if c.chance(8) {
                out.push(Step::RestartWorker);
                interrupted = true;
                break;
            }
            out.push(Step::Durable(d(
                "message.committed",
                serde_json::json!({"message_id": mid, "turn_id": tid, "role": "assistant", "text": text}),
            )));
            if c.chance(50) {
                let call = format!("c{turn}_{part}");
                out.push(Step::Durable(d(
                    "tool.started",
                    serde_json::json!({"turn_id": tid, "call_id": call, "name": "shell", "input": {"cmd": WORDS[c.pick(8) as usize], "n": [part]}}),
                )));
                for k in 0..c.pick(3) {
                    out.push(Step::Transient(
                        d(
                            "turn.tool_progress",
                            serde_json::json!({"turn_id": tid, "call_id": call, "progress": format!("{k}")}),
                        ),
                        false,
                    ));
                }
                let status = if c.chance(80) { "ok" } else { "error" };
                out.push(Step::Durable(d(
                    "tool.completed",
                    serde_json::json!({"turn_id": tid, "call_id": call, "status": status, "output": "done"}),
                )));
            }
            if c.chance(30) {
                let q = format!("q{turn}_{part}");
                out.push(Step::AskLive(q.clone()));
                out.push(Step::Durable(d(
                    "question.asked",
                    serde_json::json!({"turn_id": tid, "question_id": q, "prompt": "Proceed?", "options": ["yes", "no"]}),
                )));
                if c.chance(80) {
                    let (t, v) = if c.chance(80) {
                        (
                            "question.answered",
                            serde_json::json!({"question_id": q, "answer": "yes"}),
                        )
                    } else {
                        (
                            "question.declined",
                            serde_json::json!({"question_id": q, "reason": "no"}),
                        )
                    };
                    out.push(Step::Durable(d(t, v)));
                }
            }
            if c.chance(30) {
                out.push(Step::TasksBump(c.pick(4) as usize));
            }
            // A runtime's own durable type, which the fold keeps as an extra.
            if c.chance(25) {
                out.push(Step::Durable(d(
                    "plan.updated",
                    serde_json::json!({"turn_id": tid, "steps": [WORDS[c.pick(8) as usize], part]}),
                )));
            }
        }
        if !interrupted {
            let end = match c.pick(10) {
                0 => d("turn.cancelled", serde_json::json!({"turn_id": tid})),
                1 => d(
                    "turn.failed",
                    serde_json::json!({"turn_id": tid, "reason": "model_error"}),
                ),
                _ => d("turn.completed", serde_json::json!({"turn_id": tid})),
            };
            out.push(Step::Durable(end));
        }
        if allow_epoch && c.chance(5) {
            out.push(Step::NewEpoch);
            out.push(Step::Durable(d(
                "session.created",
                serde_json::json!({"title": "again"}),
            )));
        }
    }
    // The session's end, said by the runtime.
    match c.pick(4) {
        0 => out.push(Step::Durable(d("session.closed", serde_json::json!({})))),
        1 => out.push(Step::Durable(d(
            "session.failed",
            serde_json::json!({"reason": "worker_lost"}),
        ))),
        _ => {}
    }
    out
}

/// What the view shows beside the transcript, the same at a cursor as the
/// oracle's fold of the log up to it: the session's title and state, and the
/// kept events of types the fold does not know.
pub fn assert_said_as_the_oracle(got: &View, log: &[Envelope], at: &str) {
    let got = got.as_session().expect("a session view");
    let (want, _) = fold_view(log);
    assert_eq!(got.session(), want.session(), "session at {at}");
    assert_eq!(got.extras(), want.extras(), "extras at {at}");
}

/// Which faults the run may inject.
#[derive(Clone, Copy, Debug)]
pub struct FaultMix {
    pub cuts: bool,
    pub http_errors: bool,
    pub lag_drops: bool,
    pub reloads: bool,
    pub lifecycle: bool,
    pub close: bool,
    /// The user sends messages (the outbox), and the server's answers to
    /// them fail at random (a transport error, a 503, an answer lost after
    /// the message was committed).
    pub sends: bool,
}

impl FaultMix {
    pub fn all() -> Self {
        FaultMix {
            cuts: true,
            http_errors: true,
            lag_drops: true,
            reloads: true,
            lifecycle: true,
            close: true,
            sends: false,
        }
    }

    /// Every fault, and sends.
    pub fn with_sends() -> Self {
        FaultMix {
            sends: true,
            ..FaultMix::all()
        }
    }
}

pub struct Sim {
    pub c: Chooser,
    pub now: u64,
    pub server: Server,
    /// The client: the executor over the fake platform.
    pub exec: Rc<Executor<SimIo>>,
    pub io: SimIo,
    pub cfg: Config,
    pub stored: Option<Vec<u8>>,
    pub script: VecDeque<Step>,
    pub faults: FaultMix,
    /// Subscriber calls.
    pub notified: Rc<Cell<u64>>,
    /// (epoch, cursor) last checked, for monotonicity.
    last: (String, u64),
    unauthorized_used: bool,
    pub closed: bool,
    pub steps: u64,
    /// Every request the client made, as `METHOD path`: every kind of
    /// request action is recorded, so a rule about requests can fail.
    pub requested: Vec<String>,
    /// Most fetches the client had in flight at once (pipelined paging).
    pub max_fetches_in_flight: usize,
    /// The `message_id`s the user sent, in order.
    pub sent: Vec<String>,
}

/// A client over a fresh fake platform, started; its subscriber counts
/// calls in `notified`.
fn start(
    cfg: &Config,
    stored: Option<&[u8]>,
    now: u64,
    notified: &Rc<Cell<u64>>,
) -> (Rc<Executor<SimIo>>, SimIo) {
    let io = SimIo::default();
    io.clock.set(now);
    let machine = Machine::new(cfg.clone(), stored, now);
    let exec = Executor::new(machine, |_| io.clone());
    let n = notified.clone();
    exec.subscribe(Rc::new(move || n.set(n.get() + 1)));
    exec.start();
    (exec, io)
}

impl Sim {
    pub fn new(seed: u64, schedule: Vec<u32>, turns: u32, faults: FaultMix) -> Self {
        let mut c = Chooser {
            schedule: schedule.into(),
            rng: SplitMix64::new(seed),
        };
        let script = script(&mut c, turns, true).into();
        // The oracle is the whole history: read forward (`rig::forward`).
        let mut cfg = Config::session(super::events::SES);
        cfg.tail = 0;
        cfg.seed = seed ^ 0xabc;
        cfg.replay_page_limit = 1 + c.pick(7);
        cfg.buffer_limit = 4 + c.pick(60) as usize;
        let notified = Rc::new(Cell::new(0));
        let (exec, io) = start(&cfg, None, 0, &notified);
        let mut sim = Sim {
            c,
            now: 0,
            server: Server::new(),
            exec,
            io,
            cfg,
            stored: None,
            script,
            faults,
            notified,
            last: (String::new(), 0),
            unauthorized_used: false,
            closed: false,
            steps: 0,
            requested: Vec::new(),
            max_fetches_in_flight: 0,
            sent: Vec::new(),
        };
        sim.pump();
        sim
    }

    // --- Reading the client ------------------------------------------------

    pub fn cursor(&self) -> u64 {
        self.exec.with_machine(Machine::cursor)
    }

    pub fn epoch(&self) -> Option<String> {
        self.exec.with_machine(|m| m.epoch().map(str::to_owned))
    }

    pub fn status(&self) -> Status {
        self.exec.with_machine(Machine::status)
    }

    pub fn transcript(&self) -> Transcript {
        self.exec.with_machine(|m| m.transcript().unwrap())
    }

    pub fn is_restoring(&self) -> bool {
        self.exec.with_machine(Machine::is_restoring)
    }

    // --- Inputs, through the executor ---------------------------------------

    fn clock(&self) {
        self.io.clock.set(self.now);
    }

    fn respond(&mut self, id: RequestId, response: Response) {
        self.clock();
        self.exec.response(id, response);
    }

    fn opened(&mut self, id: RequestId, status: u16, content_type: &str) {
        let head = Response::Head {
            status,
            content_type: Some(content_type.into()),
            retry_after: None,
        };
        self.respond(id, head);
    }

    /// A whole answer: head, body, end.
    fn answer(&mut self, id: RequestId, status: u16, retry_after: Option<&str>, body: &[u8]) {
        let head = Response::Head {
            status,
            content_type: Some("application/json".into()),
            retry_after: retry_after.map(str::to_owned),
        };
        self.respond(id, head);
        self.respond(id, Response::Body(body.to_vec()));
        self.respond(id, Response::End);
    }

    fn network_error(&mut self, id: RequestId, message: &str) {
        self.clock();
        self.exec.failed(id, CoreError::Network(message.to_owned()));
    }

    fn timeout(&mut self) {
        self.clock();
        self.exec.timeout();
    }

    fn lifecycle_event(&mut self, event: Lifecycle) {
        self.clock();
        self.exec.lifecycle(event);
    }

    /// Hands what the client asked for to the server; checks persisted
    /// values and the invariants; reads a page that arrived early when the
    /// executor asks to, as the browser's microtask does.
    pub fn pump(&mut self) {
        loop {
            for a in self.io.take() {
                match &a {
                    Action::OpenStream { path_and_query, .. }
                    | Action::Fetch { path_and_query, .. } => {
                        self.requested.push(format!("GET {path_and_query}"));
                    }
                    Action::Post { path_and_query, .. } => {
                        self.requested.push(format!("POST {path_and_query}"));
                    }
                    Action::Abort { .. }
                    | Action::Persist(_)
                    | Action::RefreshCredentials
                    | Action::Release { .. }
                    | Action::LoadStored
                    | Action::RemoveStored => {}
                }
                if let Action::Persist(bytes) = &a {
                    self.check_restored(bytes);
                    self.stored = Some(bytes.clone());
                }
                self.server.on_action(&a);
            }
            self.max_fetches_in_flight = self
                .max_fetches_in_flight
                .max(self.server.pending_fetches.len());
            self.check();
            let waiting = std::mem::take(&mut self.io.outbox.borrow_mut().read_waiting_page);
            if !waiting {
                break;
            }
            self.clock();
            self.exec.read_waiting_page();
        }
    }

    /// A client built from persisted bytes shows exactly the oracle at its cursor.
    fn check_restored(&self, bytes: &[u8]) {
        let c = Machine::new(self.cfg.clone(), Some(bytes), self.now);
        let Some(epoch) = c.epoch() else {
            assert_eq!(c.cursor(), 0);
            return;
        };
        let log = &self.server.logs[epoch];
        let want = fold(epoch, &log[..c.cursor() as usize]);
        let got = c.transcript().unwrap();
        assert!(
            transcript_eq(&got, &want),
            "restored state differs at cursor {}",
            c.cursor()
        );
        let at = format!("restored cursor {}", c.cursor());
        assert_said_as_the_oracle(c.view(), &log[..c.cursor() as usize], &at);
    }

    /// Invariants after every input.
    fn check(&mut self) {
        let cursor = self.cursor();
        let epoch = self.epoch().unwrap_or_default();
        if epoch == self.last.0 {
            assert!(
                cursor >= self.last.1,
                "cursor went back {} -> {cursor}",
                self.last.1
            );
        }
        if (epoch.clone(), cursor) != self.last && !epoch.is_empty() {
            let log = &self.server.logs[&epoch];
            assert!(cursor as usize <= log.len(), "cursor beyond the log");
            let want = fold(&epoch, &log[..cursor as usize]);
            let got = self.transcript();
            assert_eq!(got.items, want.items, "transcript at cursor {cursor}");
            assert!(transcript_eq(&got, &want), "prompts at cursor {cursor}");
            // The state at the cursor (`view()` may be a failed restore's
            // live view, with the live events on top), as it is persisted.
            let state = self.exec.with_machine(Machine::persisted_value);
            let at_cursor = Machine::new(self.cfg.clone(), Some(&state), self.now);
            let at = format!("cursor {cursor}");
            assert_said_as_the_oracle(at_cursor.view(), &log[..cursor as usize], &at);
        }
        if epoch.is_empty() {
            assert_eq!(cursor, 0, "a cursor without an epoch");
        }
        self.last = (epoch, cursor);
    }

    fn deliver(&mut self, max_chunk: usize) -> bool {
        let Some((&id, s)) = self.server.streams.iter_mut().next_back() else {
            return false;
        };
        if s.sent >= s.buf.len() {
            return false;
        }
        let n = 1 + self.c.pick(max_chunk as u32) as usize;
        let end = (s.sent + n).min(s.buf.len());
        let chunk = s.buf[s.sent..end].to_vec();
        s.sent = end;
        let complete = s.complete_upto(end);
        let (before_epoch, before) = (self.epoch(), self.cursor());
        self.respond(RequestId(id), Response::Body(chunk));
        // The cursor moves only on complete durable frames of this stream or
        // on pages; never on a partial frame.
        let after = self.cursor();
        if self.epoch() == before_epoch && after > before {
            assert!(
                after <= complete.max(before),
                "cursor {after} moved past complete frames {complete}"
            );
        }
        self.pump();
        true
    }

    fn answer_open(&mut self, allow_faults: bool) -> bool {
        if self.server.pending_opens.is_empty() {
            return false;
        }
        let (id, after) = self.server.pending_opens.remove(0);
        let error = |code| super::events::error_body(code);
        if allow_faults && self.faults.http_errors && self.c.chance(12) {
            match self.c.pick(4) {
                0 => self.answer(id, 503, Some("0"), b""),
                1 => self.opened(id, 200, "text/html"),
                2 => self.answer(id, 429, None, &error("rate")),
                _ => self.answer(id, 400, None, &error("invalid_cursor")),
            }
        } else if allow_faults
            && self.faults.http_errors
            && !self.unauthorized_used
            && self.c.chance(3)
        {
            self.unauthorized_used = true;
            self.answer(id, 401, None, &error("unauthorized"));
        } else {
            let overlap = if allow_faults && self.c.chance(20) {
                self.c.pick(4) as u64
            } else {
                0
            };
            match self.server.accept_open(id, after, overlap) {
                Ok(()) => self.opened(id, 200, "text/event-stream; charset=utf-8"),
                Err((status, code)) => self.answer(id, status, None, &error(code)),
            }
        }
        self.pump();
        true
    }

    fn answer_fetch(&mut self, allow_faults: bool) -> bool {
        if self.server.pending_fetches.is_empty() {
            return false;
        }
        // Several pages may be in flight (pipelined paging): any may answer first.
        let n = self.server.pending_fetches.len();
        let i = if n > 1 {
            self.c.pick(n as u32) as usize
        } else {
            0
        };
        let (id, kind, path) = self.server.pending_fetches.remove(i);
        if allow_faults && self.faults.http_errors && self.c.chance(10) {
            match self.c.pick(3) {
                0 => self.answer(id, 500, None, b"oops"),
                1 => self.network_error(id, "reset"),
                _ => self.answer(id, 409, None, &super::events::error_body("cursor_ahead")),
            }
        } else {
            match self.server.answer_fetch(kind, &path) {
                Ok(body) => self.answer(id, 200, None, &body),
                Err((status, code)) => {
                    self.answer(id, status, None, &super::events::error_body(code))
                }
            }
        }
        self.pump();
        true
    }

    fn produce(&mut self) -> bool {
        let Some(step) = self.script.pop_front() else {
            return false;
        };
        if self.faults.lag_drops && self.c.chance(4) {
            self.server.drop_durable = 1;
        }
        let cut = self.server.step(step);
        self.notify_cut(cut);
        true
    }

    /// A restarted server's connections die: the client sees a network error.
    fn notify_cut(&mut self, cut: Vec<u64>) {
        for id in cut {
            self.network_error(RequestId(id), "server restarted");
            self.pump();
        }
    }

    fn cut(&mut self) {
        let Some((&id, _)) = self.server.streams.iter().next_back() else {
            return;
        };
        self.server.streams.remove(&id);
        if self.c.chance(15) {
            // Half-open: the client is not told; only its stall watchdog can notice.
            return;
        }
        if self.c.chance(50) {
            self.respond(RequestId(id), Response::End);
        } else {
            self.network_error(RequestId(id), "cut");
        }
        self.pump();
    }

    fn tick(&mut self) {
        // The deadline the executor armed the platform's timer at.
        let armed = self.io.outbox.borrow().timer;
        assert_eq!(
            armed,
            self.exec.with_machine(Machine::poll_timeout),
            "the timer is armed at the machine's deadline"
        );
        match armed {
            Some(t) => self.now = self.now.max(t),
            None => self.now += 1000,
        }
        self.timeout();
        self.pump();
    }

    fn reload(&mut self) {
        self.server.forget_requests();
        // The page is gone: its platform and requests with it (nothing it
        // asked for reaches the server any more).
        let (exec, io) = start(&self.cfg, self.stored.as_deref(), self.now, &self.notified);
        self.exec = exec;
        self.io = io;
        self.unauthorized_used = false;
        self.last = (String::new(), 0);
        self.pump();
    }

    fn lifecycle(&mut self) {
        match self.c.pick(3) {
            0 => {
                self.lifecycle_event(Lifecycle::Offline);
                self.pump();
                self.server.forget_requests();
                self.now += 1;
                self.lifecycle_event(Lifecycle::Online);
            }
            1 => {
                self.lifecycle_event(Lifecycle::PageHide);
                self.pump();
                self.server.forget_requests();
                self.now += 1;
                self.lifecycle_event(Lifecycle::PageShow { persisted: true });
            }
            _ => {
                self.lifecycle_event(Lifecycle::Hidden);
                self.now += 20_000;
                self.lifecycle_event(Lifecycle::Visible);
            }
        }
        self.pump();
    }

    /// One random step with faults.
    #[allow(clippy::collapsible_match)] // arms read as a probability table
    pub fn random_step(&mut self) {
        self.steps += 1;
        self.now += self.c.pick(50) as u64;
        match self.c.pick(100) {
            0..=29 => {
                if !self.produce() {
                    self.deliver(400);
                }
            }
            30..=59 => {
                self.deliver(300);
            }
            60..=69 => {
                self.answer_open(true);
            }
            70..=81 => {
                self.answer_fetch(true);
            }
            82..=85 => {
                if self.faults.cuts {
                    self.cut();
                }
            }
            86..=89 => self.tick(),
            90..=92 => {
                self.server.step(Step::Heartbeat);
            }
            93..=94 => {
                if self.faults.reloads {
                    self.reload();
                }
            }
            95..=96 => {
                if self.faults.lifecycle {
                    self.lifecycle();
                }
            }
            97..=98 => {
                if self.faults.sends {
                    if self.c.chance(50) {
                        self.send_message();
                    } else {
                        self.answer_post(true);
                    }
                }
            }
            _ => {}
        }
    }

    /// The user sends a message.
    fn send_message(&mut self) {
        let mid = format!("out_{}", self.sent.len());
        self.sent.push(mid.clone());
        self.clock();
        let write = Write::Send {
            message_id: mid,
            text: "sent in the simulation".into(),
        };
        self.exec.write(write, Box::new(|_| {}));
        self.pump();
    }

    /// Answers the oldest send, with a fault now and then.
    fn answer_post(&mut self, allow_faults: bool) -> bool {
        if self.server.pending_posts.is_empty() {
            return false;
        }
        let (id, mid) = self.server.pending_posts.remove(0);
        let fault = if allow_faults { self.c.pick(8) } else { 7 };
        match fault {
            0 => self.network_error(id, "reset"),
            1 => self.answer(id, 503, Some("1"), b"{}"),
            2 => {
                // Committed, and the answer lost on its way.
                self.server.accept_message(&mid);
                self.network_error(id, "reset");
            }
            _ => {
                let turn = self.server.accept_message(&mid);
                let body = format!(r#"{{"turn_id":"{turn}"}}"#);
                self.answer(id, 200, None, body.as_bytes());
            }
        }
        self.pump();
        true
    }

    /// Every message sent is in the runtime's log once (in each epoch's
    /// log at most once; a log recreated after its commit was shown holds
    /// it no more), and nothing is pending.
    fn check_sends(&self) {
        for mid in &self.sent {
            let mut total = 0;
            for log in self.server.logs.values() {
                let n = (log.iter())
                    .filter(
                        |e| matches!(&e.event, Event::MessageCommitted(m) if m.message_id == *mid),
                    )
                    .count();
                assert!(n <= 1, "{mid} committed {n} times in one log");
                total += n;
            }
            assert!(total >= 1, "{mid} was never committed");
        }
        let pending = self.exec.with_machine(Machine::pending_messages);
        assert!(pending.is_empty(), "still pending: {pending:?}");
    }

    /// Runs the script with faults, then settles without faults and checks
    /// the final state against the oracle.
    pub fn run(&mut self, max_steps: u64) {
        while self.steps < max_steps && !self.script.is_empty() {
            self.random_step();
        }
        self.settle();
    }

    /// Closing during restore dispatches nothing afterwards.
    pub fn close_now(&mut self) {
        self.pump();
        self.clock();
        let told = self.notified.get();
        self.exec.close();
        let mut persisted = 0;
        for a in self.io.take() {
            match a {
                Action::Abort { .. } => {}
                Action::Persist(b) => {
                    self.check_restored(&b);
                    persisted += 1;
                }
                other => panic!("action after close: {other:?}"),
            }
        }
        assert!(persisted <= 1);
        self.exec.with_machine_mut(|m| {
            assert_eq!(m.poll_notice(), None);
            assert_eq!(m.poll_view_change(), None);
            m.handle_timeout(self.now + 100_000);
            m.handle_lifecycle(Lifecycle::Online, self.now);
            assert_eq!(m.poll_action(), None);
            assert_eq!(m.poll_timeout(), None);
            assert_eq!(m.poll_pace(self.now), None);
            assert_eq!(m.status().state, State::Stopped);
        });
        // Inputs after close are carried out by nobody.
        self.now += 100_000;
        self.timeout();
        self.lifecycle_event(Lifecycle::Online);
        assert!(self.io.take().is_empty(), "the executor acted after close");
        assert_eq!(
            self.notified.get(),
            told,
            "a subscriber was called after close"
        );
        self.closed = true;
    }

    pub fn settle(&mut self) {
        while let Some(step) = self.script.pop_front() {
            let cut = self.server.step(step);
            self.notify_cut(cut);
        }
        self.server.drop_durable = 0;
        for _ in 0..20_000 {
            let progressed = self.answer_open(false)
                || self.answer_fetch(false)
                || self.deliver(4096)
                || self.answer_post(false);
            if progressed {
                continue;
            }
            // Caught up, on a stream the server really holds.
            let caught_up = !self.server.streams.is_empty()
                && self.epoch().as_deref() == Some(self.server.epoch.as_str())
                && self.cursor() == self.server.head()
                && self.status().state == State::Live
                && self.exec.with_machine(|m| m.pending_messages().is_empty());
            if caught_up {
                break;
            }
            // Idle: a heartbeat reveals silent gaps; time passes in small
            // steps so that heartbeats keep the stall watchdog quiet (a
            // silent gap must be found through the heartbeat, not a reconnect).
            self.server.step(Step::Heartbeat);
            self.now += 1000;
            self.timeout();
            self.pump();
        }
        let state = self.status();
        let notices = self.exec.with_machine(|m| {
            let n = m.recent_notices();
            n.iter().rev().take(5).cloned().collect::<Vec<_>>()
        });
        assert_eq!(
            state.state,
            State::Live,
            "did not settle: {state:?}, notices {notices:?}"
        );
        assert_eq!(self.epoch().as_deref(), Some(self.server.epoch.as_str()));
        assert_eq!(self.cursor(), self.server.head());
        // The subscribers are told through the executor, by a timer at once
        // here (no frames in this platform): the one armed goes off.
        if self.io.outbox.borrow().timer.is_some_and(|t| t <= self.now) {
            self.timeout();
            self.pump();
        }
        assert!(self.notified.get() > 0, "no subscriber call");
        let want = fold(&self.server.epoch, self.server.log());
        let got = self.transcript();
        assert!(
            transcript_eq(&got, &want),
            "final transcript differs:\n{got:#?}\nvs\n{want:#?}"
        );
        assert_eq!(got.tasks, self.server.tasks, "tasks snapshot lost");
        self.exec.with_machine(|m| {
            assert_said_as_the_oracle(m.view(), self.server.log(), "the end");
            if let (Some(live), View::Session(v)) = (&self.server.live, m.view()) {
                if let Some(o) = v
                    .overlay()
                    .filter(|o| !o.stale && o.message_id == live.message_id)
                {
                    assert_eq!(o.text, live.text, "overlay text");
                }
            }
        });
        self.check_sends();
    }
}
