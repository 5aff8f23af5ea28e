//! A fake runtime made of data: a session log that grows by a script, and
//! answers to the machine's actions (streams, replay and event pages).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

use replay_client::core::machine::{Action, FetchKind, RequestId};
use replay_client::core::protocol::*;

use super::events::*;

/// One step of the server's life.
#[derive(Clone, Debug)]
pub enum Step {
    /// A durable event (seq and id assigned by the server).
    Durable(Event),
    /// A transient event (after_seq = head).
    Transient(Event, bool),
    /// The live turn gets a not-yet-persisted question.
    AskLive(String),
    /// Send the current live_turn snapshot.
    LiveSnap,
    /// A new tasks snapshot.
    TasksBump(usize),
    /// Heartbeat on every stream.
    Heartbeat,
    /// The runtime restarts: new boot id, the running turn fails, streams cut.
    RestartWorker,
    /// The log is recreated: new epoch, empty log, streams cut.
    NewEpoch,
}

/// A stream the server is writing.
pub struct SStream {
    pub buf: Vec<u8>,
    pub sent: usize,
    /// (end offset in buf, seq) of every durable frame written.
    pub durable_ends: Vec<(usize, u64)>,
}

impl SStream {
    /// Highest seq whose frame is completely within the first `upto` bytes.
    pub fn complete_upto(&self, upto: usize) -> u64 {
        self.durable_ends
            .iter()
            .filter(|(end, _)| *end <= upto)
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(0)
    }
}

pub struct Server {
    pub epoch: String,
    pub epoch_n: u32,
    pub boot: String,
    pub boot_n: u32,
    /// Every epoch's log (the current one is `logs[&epoch]`).
    pub logs: HashMap<String, Vec<Envelope>>,
    pub live: Option<LiveTurn>,
    pub tasks: TasksSnapshot,
    pub next_row: u64,
    /// Open streams by request id (answered ones).
    pub streams: BTreeMap<u64, SStream>,
    /// Stream requests not answered yet: (id, after).
    pub pending_opens: Vec<(RequestId, Option<u64>)>,
    /// Fetches not answered yet.
    pub pending_fetches: Vec<(RequestId, FetchKind, String)>,
    /// Sends not answered yet: (request, message_id).
    pub pending_posts: Vec<(RequestId, String)>,
    /// Drop this many durable frames from live streams (lagging subscriber).
    pub drop_durable: u32,
    pub retry_ms: u64,
}

fn query(path: &str, key: &str) -> Option<u64> {
    let q = path.split_once('?')?.1;
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

impl Server {
    pub fn new() -> Self {
        let mut logs = HashMap::new();
        logs.insert("e1".to_owned(), Vec::new());
        Server {
            epoch: "e1".into(),
            epoch_n: 1,
            boot: "b1".into(),
            boot_n: 1,
            logs,
            live: None,
            tasks: TasksSnapshot::default(),
            next_row: 1,
            streams: BTreeMap::new(),
            pending_opens: Vec::new(),
            pending_fetches: Vec::new(),
            pending_posts: Vec::new(),
            drop_durable: 0,
            retry_ms: 5,
        }
    }

    pub fn log(&self) -> &Vec<Envelope> {
        &self.logs[&self.epoch]
    }

    pub fn head(&self) -> u64 {
        self.log().len() as u64
    }

    /// Forget every request (the client was replaced).
    pub fn forget_requests(&mut self) {
        self.streams.clear();
        self.pending_opens.clear();
        self.pending_fetches.clear();
        self.pending_posts.clear();
    }

    /// Accepts a send: its `message.committed` is appended unless the log
    /// holds it (a repeat starts nothing). The turn it names.
    pub fn accept_message(&mut self, mid: &str) -> String {
        let turn = format!("t_{mid}");
        let committed = self
            .log()
            .iter()
            .any(|e| matches!(&e.event, Event::MessageCommitted(m) if m.message_id == mid));
        if !committed {
            let event = ev(
                "message.committed",
                serde_json::json!({"message_id": mid, "turn_id": turn, "role": "user", "text": mid}),
            );
            self.step(Step::Durable(event));
        }
        turn
    }

    /// Handles one action of the client; returns true for RefreshCredentials.
    pub fn on_action(&mut self, a: &Action) {
        match a {
            Action::OpenStream {
                id, path_and_query, ..
            } => self
                .pending_opens
                .push((*id, query(path_and_query, "after_seq"))),
            Action::Fetch {
                id,
                path_and_query,
                kind,
            } => self
                .pending_fetches
                .push((*id, *kind, path_and_query.clone())),
            Action::Abort { id } => {
                self.streams.remove(&id.0);
                self.pending_opens.retain(|(i, _)| i != id);
                self.pending_fetches.retain(|(i, _, _)| i != id);
                self.pending_posts.retain(|(i, _)| i != id);
            }
            // The outbox's sends (the only writes the simulation makes).
            Action::Post { id, body, .. } => {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                let mid = v["message_id"].as_str().unwrap().to_owned();
                assert!(
                    self.pending_posts.iter().all(|(_, m)| *m != mid),
                    "two requests for {mid} at once"
                );
                self.pending_posts.push((*id, mid));
            }
            // Storage is tested on its own (machine_storage).
            Action::Persist(_)
            | Action::RefreshCredentials
            | Action::LoadStored
            | Action::RemoveStored
            | Action::Release { .. } => {}
        }
    }

    fn write(&mut self, env: &Envelope) {
        let text = frame(env);
        let seq = env.seq;
        for s in self.streams.values_mut() {
            s.buf.extend_from_slice(text.as_bytes());
            if let Some(seq) = seq {
                s.durable_ends.push((s.buf.len(), seq));
            }
        }
    }

    fn write_durable_lagged(&mut self, env: &Envelope) {
        if self.drop_durable > 0 {
            // A lagging subscriber is sent a stream that skips this event.
            self.drop_durable -= 1;
            return;
        }
        self.write(env);
    }

    pub fn snapshot_frames(&self) -> Vec<Envelope> {
        vec![
            live_snapshot(self.head(), self.live.as_ref()),
            transient(self.head(), Event::TasksSnapshot(self.tasks.clone()), true),
        ]
    }

    /// Answers a pending open with the stream's start: retry, hello, backlog,
    /// snapshots. Err(status, code) when the cursor is above head.
    pub fn accept_open(
        &mut self,
        id: RequestId,
        after: Option<u64>,
        overlap: u64,
    ) -> Result<(), (u16, &'static str)> {
        if after.is_some_and(|a| a > self.head()) {
            return Err((409, "cursor_ahead"));
        }
        let mut s = SStream {
            buf: format!("retry: {}\n\n", self.retry_ms).into_bytes(),
            sent: 0,
            durable_ends: Vec::new(),
        };
        let mut out = vec![hello(&self.epoch, self.head(), &self.boot)];
        if let Some(a) = after {
            // `overlap` re-sends events the client has (duplicated backlog).
            let from = a.saturating_sub(overlap) as usize;
            out.extend(self.log()[from..].iter().cloned());
        }
        out.extend(self.snapshot_frames());
        for env in &out {
            s.buf.extend_from_slice(frame(env).as_bytes());
            if let Some(seq) = env.seq {
                s.durable_ends.push((s.buf.len(), seq));
            }
        }
        self.streams.insert(id.0, s);
        Ok(())
    }

    /// The body of a fetch, or an error status and code.
    pub fn answer_fetch(
        &self,
        kind: FetchKind,
        path: &str,
    ) -> Result<Vec<u8>, (u16, &'static str)> {
        let limit = query(path, "limit").unwrap_or(500) as usize;
        let log = self.log();
        let head = self.head();
        match kind {
            FetchKind::Replay => {
                let after = query(path, "after_cursor").ok_or((400, "invalid_cursor"))?;
                if after > head {
                    return Err((409, "cursor_ahead"));
                }
                let end = (after as usize + limit).min(log.len());
                let has_more = end < log.len();
                Ok(replay_page(
                    &self.epoch,
                    &self.boot,
                    after,
                    &log[after as usize..end],
                    head,
                    has_more,
                    self.live.as_ref(),
                    Some(&self.tasks),
                ))
            }
            FetchKind::Events => {
                let after = query(path, "after_seq").ok_or((400, "invalid_cursor"))?;
                if after > head {
                    return Err((409, "cursor_ahead"));
                }
                let end = (after as usize + limit).min(log.len());
                Ok(event_page(
                    &self.epoch,
                    &log[after as usize..end],
                    head,
                    end < log.len(),
                ))
            }
        }
    }

    fn append(&mut self, event: Event) -> Envelope {
        let seq = self.head() + 1;
        let mut env = durable(seq, event);
        env.id = Some(self.next_row);
        self.next_row += 1;
        self.logs.get_mut(&self.epoch).unwrap().push(env.clone());
        env
    }

    fn bump_live(&mut self, f: impl FnOnce(&mut LiveTurn)) {
        if let Some(l) = self.live.as_mut() {
            f(l);
            l.rev += 1;
        }
    }

    /// Applies a step: grows the log, updates the live state, writes frames.
    /// Returns the streams it cut (restart, new epoch), with the bytes that
    /// were still unsent.
    pub fn step(&mut self, step: Step) -> Vec<u64> {
        if matches!(step, Step::RestartWorker | Step::NewEpoch) {
            let cut: Vec<u64> = self.streams.keys().copied().collect();
            self.step_inner(step);
            return cut;
        }
        self.step_inner(step);
        Vec::new()
    }

    fn step_inner(&mut self, step: Step) -> bool {
        match step {
            Step::Durable(event) => {
                self.track_durable(&event);
                let env = self.append(event);
                self.write_durable_lagged(&env);
                false
            }
            Step::Transient(event, critical) => {
                if let Event::TurnDelta(d) = &event {
                    let d = d.clone();
                    self.bump_live(|l| {
                        if l.message_id != d.message_id {
                            l.message_id = d.message_id.clone();
                            l.text.clear();
                            l.text_offset = 0;
                        }
                        l.text.push_str(&d.text);
                        l.state = LiveTurnState::Sampling;
                    });
                }
                if let Event::ToolProgress(p) = &event {
                    let p = p.clone();
                    self.bump_live(|l| {
                        if let Some(t) = l.tools.iter_mut().find(|t| t.call_id == p.call_id) {
                            t.progress = p.progress.clone();
                        }
                    });
                }
                let env = transient(self.head(), event, critical);
                self.write(&env);
                false
            }
            Step::AskLive(q) => {
                self.bump_live(|l| {
                    l.pending_question = Some(PendingQuestion {
                        question_id: q.clone(),
                        prompt: "Proceed?".into(),
                        options: vec!["yes".into(), "no".into()],
                    });
                    l.state = LiveTurnState::WaitingForAnswer;
                });
                let env = live_snapshot(self.head(), self.live.as_ref());
                self.write(&env);
                false
            }
            Step::LiveSnap => {
                let env = live_snapshot(self.head(), self.live.as_ref());
                self.write(&env);
                false
            }
            Step::TasksBump(n) => {
                self.tasks.version += 1;
                self.tasks.tasks = (0..n)
                    .map(|i| Task {
                        task_id: format!("task{i}"),
                        title: "build".into(),
                        state: if i % 2 == 0 {
                            TaskState::Running
                        } else {
                            TaskState::Succeeded
                        },
                        process_id: None,
                        started_at: None,
                        ended_at: None,
                        detail: None,
                    })
                    .collect();
                let env = transient(self.head(), Event::TasksSnapshot(self.tasks.clone()), true);
                self.write(&env);
                false
            }
            Step::Heartbeat => {
                let env = heartbeat(self.head());
                self.write(&env);
                false
            }
            Step::RestartWorker => {
                self.boot_n += 1;
                self.boot = format!("b{}", self.boot_n);
                if let Some(l) = self.live.take() {
                    // Startup recovery marks the interrupted turn failed.
                    let reason = REASON_WORKER_RESTART.to_owned();
                    self.append(Event::TurnFailed(TurnFailed {
                        turn_id: l.turn_id,
                        reason,
                    }));
                }
                self.streams.clear();
                true
            }
            Step::NewEpoch => {
                self.epoch_n += 1;
                self.epoch = format!("e{}", self.epoch_n);
                self.logs.insert(self.epoch.clone(), Vec::new());
                self.live = None;
                self.streams.clear();
                true
            }
        }
    }

    fn track_durable(&mut self, event: &Event) {
        match event {
            Event::TurnStarted(t) => {
                self.live = Some(LiveTurn {
                    turn_id: t.turn_id.clone(),
                    message_id: String::new(),
                    rev: self.live.as_ref().map_or(1, |l| l.rev + 1),
                    state: LiveTurnState::Sampling,
                    text: String::new(),
                    text_offset: 0,
                    tools: Vec::new(),
                    pending_question: None,
                });
            }
            Event::MessageCommitted(m) => {
                let mid = m.message_id.clone();
                self.bump_live(|l| {
                    if l.message_id == mid {
                        l.text.clear();
                    }
                });
            }
            Event::ToolStarted(t) => {
                let t = t.clone();
                self.bump_live(|l| {
                    l.tools.push(LiveTool {
                        call_id: t.call_id,
                        name: t.name,
                        state: "running".into(),
                        progress: String::new(),
                    });
                    l.state = LiveTurnState::ToolRunning;
                });
            }
            Event::ToolCompleted(t) => {
                let id = t.call_id.clone();
                self.bump_live(|l| {
                    if let Some(tool) = l.tools.iter_mut().find(|x| x.call_id == id) {
                        tool.state = "ok".into();
                    }
                });
            }
            Event::QuestionAnswered(_) | Event::QuestionDeclined(_) => {
                self.bump_live(|l| l.pending_question = None);
            }
            Event::TurnCompleted(_) | Event::TurnCancelled(_) | Event::TurnFailed(_) => {
                self.live = None;
            }
            _ => {}
        }
    }
}
