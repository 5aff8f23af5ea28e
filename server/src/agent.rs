//! The scripted agent: deterministic turns driven by directives in the user's
//! text (`/tool`, `/bg`, `/ask`, `/fail`, `/long N`, `/slow`, `/burst`), so tests can
//! produce every kind of event on purpose.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use replay_core::protocol::Empty;
use replay_core::protocol::{
    Event, LiveTool, LiveTurn, LiveTurnState, MessageCommitted, OutputStream, PendingQuestion,
    ProcessExited, ProcessOutput, ProcessStarted, QuestionAnswered, QuestionAsked,
    QuestionDeclined, Role, Scope, Task, TaskState, ToolCompleted, ToolProgress, ToolStarted,
    ToolStatus, TurnDelta, TurnFailed, TurnRef, TurnStarted, WithReason,
};
use serde_json::json;
use tokio::sync::{mpsc, Notify};

use crate::app::{App, Handover};
use crate::recovery::Waiting;
use crate::store::StoreResult;
use crate::util::{now_rfc3339, Rng};
use crate::worker::{AnswerMsg, RunningTurn, SessionLive, TurnSlot, Worker};

/// Most scalars a `live_turn.text` keeps (PROTOCOL.md §5).
pub const LIVE_TEXT_MAX: usize = 16_384;

/// Longest reply `/long N` may ask for, in scalars (a reply is stored once
/// and pulled by every client: ~400 KB of UTF-8 at most).
pub const LONG_MAX: usize = 100_000;

/// Most steps (`/tool`, `/ask`, `/bg`) one message may ask for: each writes
/// events, and each `/bg` adds a task that every later task change rewrites.
pub const STEPS_MAX: usize = 16;

/// A message asks for more work than one message may.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirectiveError {
    /// `/long N` above [`LONG_MAX`].
    #[error("/long {0} is above the limit of {LONG_MAX} scalars")]
    TooLong(String),
    /// More than [`STEPS_MAX`] steps.
    #[error("{0} steps (/tool, /ask, /bg, /plan) are above the limit of {STEPS_MAX} per message")]
    TooManySteps(usize),
}

/// One step of a turn, in the order the directives appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A shell tool call with a runtime-managed process.
    Tool,
    /// A question that waits for an answer.
    Ask,
    /// A background task that outlives the turn.
    Bg,
    /// A durable event of the runtime's own type (`plan.updated`), which no
    /// client folds: what a runtime adds to the protocol.
    Plan,
}

/// How the runtime ends the session after the turn (`/close`, `/crash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// `session.closed`.
    Closed,
    /// `session.failed {reason: "scripted_failure"}`.
    Failed,
}

/// What a user message asks the scripted agent to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// End with `turn.failed`.
    pub fail: bool,
    /// End the session after the turn.
    pub end: Option<SessionEnd>,
    /// Reply length in scalars.
    pub long: Option<usize>,
    /// Ten times slower deltas.
    pub slow: bool,
    /// Deltas back to back, no pause between them: a burst that reaches a
    /// client as a few large chunks (the benchmark's many-events-per-chunk
    /// case).
    pub burst: bool,
}

impl Directives {
    /// The pause between deltas, in units of `--delta-ms`: 0 for `/burst`
    /// (it wins over `/slow`), 10 for `/slow`, else 1.
    pub fn delta_factor(&self) -> u64 {
        match (self.burst, self.slow) {
            (true, _) => 0,
            (false, true) => 10,
            (false, false) => 1,
        }
    }
}

impl Directives {
    /// Reads the directives out of a message text, within the bounds of
    /// one message's work ([`LONG_MAX`], [`STEPS_MAX`]).
    pub fn parse(text: &str) -> Result<Directives, DirectiveError> {
        let mut d = Directives::default();
        let mut words = text.split_whitespace().peekable();
        while let Some(w) = words.next() {
            let step = match w {
                "/tool" => Some(Step::Tool),
                "/ask" => Some(Step::Ask),
                "/bg" => Some(Step::Bg),
                "/plan" => Some(Step::Plan),
                "/close" => {
                    d.end = Some(SessionEnd::Closed);
                    None
                }
                "/crash" => {
                    d.end = Some(SessionEnd::Failed);
                    None
                }
                "/fail" => {
                    d.fail = true;
                    None
                }
                "/slow" => {
                    d.slow = true;
                    None
                }
                "/burst" => {
                    d.burst = true;
                    None
                }
                "/long" => {
                    // Any run of digits is N, so a huge N is refused, not ignored.
                    if let Some(arg) = words.next_if(|n| n.bytes().all(|b| b.is_ascii_digit())) {
                        let n = arg
                            .parse::<usize>()
                            .ok()
                            .filter(|n| *n <= LONG_MAX)
                            .ok_or_else(|| DirectiveError::TooLong(arg.to_owned()))?;
                        d.long = Some(n);
                    }
                    None
                }
                _ => None,
            };
            if let Some(step) = step {
                if d.steps.len() == STEPS_MAX {
                    let total = d.steps.len() + 1 + words.filter(|w| is_step(w)).count();
                    return Err(DirectiveError::TooManySteps(total));
                }
                d.steps.push(step);
            }
        }
        Ok(d)
    }
}

fn is_step(word: &str) -> bool {
    matches!(word, "/tool" | "/ask" | "/bg" | "/plan")
}

const WORDS: &[&str] = &[
    "replay",
    "cursor",
    "café",
    "naïve",
    "epoch",
    "🙂",
    "stream",
    "über",
    "delta",
    "日本語",
    "snapshot",
    "résumé",
    "🚀",
    "log",
    "señor",
    "heartbeat",
    "ça",
    "💡",
    "gap",
    "repair",
];

/// The deterministic reply for a turn: exactly `len` scalars when given.
pub fn reply_text(seed: u64, turn_id: &str, user_text: &str, len: Option<usize>) -> String {
    let mut rng = Rng::new(seed ^ fnv(turn_id) ^ fnv(user_text).rotate_left(17));
    let target = len.unwrap_or(60 + rng.below(80) as usize);
    let mut out = String::new();
    let mut count = 0;
    while count < target {
        let w = WORDS[rng.below(WORDS.len() as u64) as usize];
        let piece = if count == 0 {
            w.to_owned()
        } else {
            format!(" {w}")
        };
        out.push_str(&piece);
        count += piece.chars().count();
    }
    if count > target {
        out = out.chars().take(target).collect();
    }
    out
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Starts a turn for an accepted message on the current worker.
pub fn spawn_turn(
    app: &Arc<App>,
    slot: TurnSlot,
    session_id: &str,
    turn_id: &str,
    message_id: &str,
    text: &str,
) {
    let worker = app.worker();
    let ctx = Turn {
        _slot: slot,
        app: Arc::clone(app),
        worker: Arc::clone(&worker),
        session_id: session_id.to_owned(),
        turn_id: turn_id.to_owned(),
        user_message_id: message_id.to_owned(),
        reply_id: format!("{turn_id}_reply"),
        text: text.to_owned(),
        track: Mutex::new(Track::default()),
    };
    let handle = tokio::spawn(async move { ctx.run(None).await });
    worker.track(handle);
}

/// Starts a waiter for a turn kept waiting by recovery on the current
/// worker: the answer is taken as before the restart, then the turn goes
/// on with its reply and ends. The steps after the question in its message
/// are not run: the provider state they would build on did not survive.
pub fn resume_waiting(app: &Arc<App>, waiting: Waiting) {
    let worker = app.worker();
    let input = match app.log.db().turn_input(&waiting.turn_id) {
        Ok(Some(input)) => input,
        Ok(None) => return,
        Err(e) => {
            tracing::error!(turn = %waiting.turn_id, error = %e, "resuming a waiting turn failed");
            worker.abandon(&waiting.turn_id);
            return;
        }
    };
    // Not capped: the turn was accepted before the restart.
    let Ok(mut slot) = worker.reserve_turn(&waiting.session_id, usize::MAX, usize::MAX) else {
        return;
    };
    slot.enqueue(&waiting.turn_id);
    let (tx, rx) = mpsc::channel(4);
    let live = worker.session(&waiting.session_id);
    live.lock()
        .questions
        .insert(waiting.question_id.clone(), tx);
    // An answer forwarded by another node while no node waited on the
    // question is sent again once this one does.
    if let Some(cluster) = &app.cluster {
        cluster.announce_waiter(&waiting.question_id);
    }
    let ctx = Turn {
        _slot: slot,
        app: Arc::clone(app),
        worker: Arc::clone(&worker),
        session_id: waiting.session_id.clone(),
        turn_id: waiting.turn_id.clone(),
        user_message_id: input.0,
        reply_id: format!("{}_reply", waiting.turn_id),
        text: input.1,
        track: Mutex::new(Track {
            question: Some(waiting.question_id.clone()),
            ..Track::default()
        }),
    };
    let handle = tokio::spawn(async move { ctx.run(Some((waiting.question_id, rx))).await });
    worker.track(handle);
}

/// A live tool call's state, as `LiveTool.state` carries it (PROTOCOL.md
/// §5: `running`, `ok` or `error`; this agent's tools do not fail while
/// live).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LiveToolState {
    /// The call runs.
    Running,
    /// The call succeeded.
    Ok,
}

impl LiveToolState {
    /// The wire string.
    fn as_str(self) -> &'static str {
        match self {
            LiveToolState::Running => "running",
            LiveToolState::Ok => "ok",
        }
    }
}

/// What a turn holds open, for cleanup on cancel.
#[derive(Default)]
struct Track {
    process: Option<String>,
    tool: Option<String>,
    question: Option<String>,
}

struct Turn {
    /// Held until the turn ends (the queue caps).
    _slot: TurnSlot,
    app: Arc<App>,
    worker: Arc<Worker>,
    session_id: String,
    turn_id: String,
    user_message_id: String,
    reply_id: String,
    text: String,
    track: Mutex<Track>,
}

impl Turn {
    /// Runs the turn from its start, or (`resumed`: a question and its
    /// answer channel) from the question it waited on before a restart.
    async fn run(self, resumed: Option<(String, mpsc::Receiver<AnswerMsg>)>) {
        let live = self.worker.session(&self.session_id);
        // One turn of the session at a time: first in this node's order
        // (its slot leaves the queue when this returns), then (on a cluster)
        // in the whole cluster's; one turn per node looks at the log. A
        // resumed turn is the session's earliest open one.
        live.wait_first(&self.turn_id).await;
        if let (None, Some(cluster)) = (&resumed, &self.app.cluster) {
            if !cluster
                .wait_for_earlier_turns(&self.session_id, &self.turn_id)
                .await
            {
                return;
            }
        }
        let cancel = Arc::new(Notify::new());
        live.lock().running = Some(RunningTurn {
            turn_id: self.turn_id.clone(),
            cancel: Arc::clone(&cancel),
        });
        let body = async {
            match resumed {
                Some((question_id, rx)) => self.go_on(question_id, rx).await,
                None => self.script().await,
            }
        };
        let outcome = tokio::select! {
            r = body => Some(r),
            _ = cancel.notified() => None,
        };
        let result = match outcome {
            Some(r) => r,
            None => self.cancelled(),
        };
        if let Err(e) = result {
            tracing::error!(turn = %self.turn_id, error = %e, "turn aborted by a store error");
            // Its end is not written: on a shared store, a node (maybe this
            // one) writes it once the lease has run out.
            self.worker.abandon(&self.turn_id);
        }
        live.lock().running = None;
        // The session may now be idle but waiting on background tasks.
        let open = self
            .app
            .log
            .db()
            .tasks(&self.session_id)
            .map(|t| {
                t.tasks
                    .iter()
                    .any(|t| matches!(t.state, TaskState::Queued | TaskState::Running))
                    || t.background_wait.is_some()
            })
            .unwrap_or(false);
        if open {
            let _ = self.app.edit_tasks(&self.worker, &self.session_id, |_| {});
        }
        // The session may take a team message deferred while it was busy.
        self.app
            .hand_over(Handover::SessionReady(self.session_id.clone()));
    }

    fn append(&self, event: Event) -> StoreResult<()> {
        self.app
            .log
            .append(Scope::Session, &self.session_id, event)?;
        Ok(())
    }

    fn delay(&self, factor: u64) -> Duration {
        Duration::from_millis(self.app.cfg.delta_ms.saturating_mul(factor))
    }

    async fn pause(&self, d: Duration) {
        if d.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(d).await;
        }
    }

    fn live_snapshot(&self, f: impl FnOnce(&mut LiveTurn)) {
        self.app
            .edit_live(&self.worker, &self.session_id, true, |lt| {
                if let Some(lt) = lt.as_mut() {
                    f(lt);
                }
            });
    }

    async fn script(&self) -> StoreResult<()> {
        // Checked when the message was accepted; a refused one never runs.
        let d = Directives::parse(&self.text).unwrap_or_default();
        self.append(Event::TurnStarted(TurnStarted {
            turn_id: self.turn_id.clone(),
            input_message_id: self.user_message_id.clone(),
        }))?;
        // The user's message.committed was written when it was accepted.
        let (turn_id, reply_id) = (self.turn_id.clone(), self.reply_id.clone());
        self.app
            .edit_live(&self.worker, &self.session_id, true, |lt| {
                *lt = Some(LiveTurn {
                    turn_id,
                    message_id: reply_id,
                    rev: 0,
                    state: LiveTurnState::Sampling,
                    text: String::new(),
                    text_offset: 0,
                    tools: Vec::new(),
                    pending_question: None,
                });
            });
        let reply: Vec<char> = reply_text(self.app.cfg.seed, &self.turn_id, &self.text, d.long)
            .chars()
            .collect();
        let mut rng = Rng::new(self.app.cfg.seed ^ fnv(&self.turn_id));
        let split = if d.steps.is_empty() {
            reply.len()
        } else {
            reply.len() / 2
        };
        let mut offset = 0;
        self.stream(&reply[..split], &mut offset, &mut rng, d.delta_factor())
            .await;
        for step in &d.steps {
            match step {
                Step::Tool => self.tool(d.delta_factor()).await?,
                Step::Ask => self.ask().await?,
                Step::Bg => self.background()?,
                Step::Plan => self.append(Event::Unknown {
                    type_name: "plan.updated".into(),
                    data: json!({"turn_id": self.turn_id, "steps": ["read", "answer"]}).into(),
                })?,
            }
        }
        self.stream(&reply[split..], &mut offset, &mut rng, d.delta_factor())
            .await;
        self.finish(&reply, &d)
    }

    /// The answer to `question_id` arrived: it is written, the question
    /// leaves the turn and the session's open questions, and the answering
    /// request is told.
    fn answered(
        &self,
        question_id: &str,
        (answer, ack): AnswerMsg,
        live: &SessionLive,
    ) -> StoreResult<()> {
        self.append(Event::QuestionAnswered(QuestionAnswered {
            question_id: question_id.to_owned(),
            answer,
        }))?;
        self.track
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .question = None;
        live.lock().questions.remove(question_id);
        let _ = ack.send(());
        Ok(())
    }

    /// A turn kept waiting across a restart: takes the answer, then ends
    /// with its reply as [`Turn::script`] does.
    async fn go_on(
        &self,
        question_id: String,
        mut rx: mpsc::Receiver<AnswerMsg>,
    ) -> StoreResult<()> {
        let Some(answer) = rx.recv().await else {
            return Ok(());
        };
        let live = self.worker.session(&self.session_id);
        self.answered(&question_id, answer, &live)?;
        let d = Directives::parse(&self.text).unwrap_or_default();
        let reply: Vec<char> = reply_text(self.app.cfg.seed, &self.turn_id, &self.text, d.long)
            .chars()
            .collect();
        self.finish(&reply, &d)
    }

    /// Ends the turn: `turn.failed` for `/fail`, else the reply committed
    /// and `turn.completed`; then the session's end, if asked for.
    fn finish(&self, reply: &[char], d: &Directives) -> StoreResult<()> {
        if d.fail {
            self.app
                .edit_live(&self.worker, &self.session_id, true, |lt| *lt = None);
            self.append(Event::TurnFailed(TurnFailed {
                turn_id: self.turn_id.clone(),
                reason: "scripted_failure".into(),
            }))?;
            return self.end_session(d.end);
        }
        let committed = Event::MessageCommitted(MessageCommitted {
            message_id: self.reply_id.clone(),
            turn_id: self.turn_id.clone(),
            role: Role::Assistant,
            text: reply.iter().collect(),
        });
        // Commit and clear the overlay in one step under the session lock, so a
        // replay never sees both the committed reply and its overlay.
        let mut result = Ok(());
        self.app
            .edit_live(&self.worker, &self.session_id, true, |lt| {
                result = self.append(committed);
                *lt = None;
            });
        result?;
        self.append(Event::TurnCompleted(TurnRef {
            turn_id: self.turn_id.clone(),
        }))?;
        self.end_session(d.end)
    }

    /// `/close` and `/crash`: the runtime ends the session once the turn
    /// has ended (what a runtime does when its user leaves, or its worker
    /// cannot go on).
    fn end_session(&self, end: Option<SessionEnd>) -> StoreResult<()> {
        match end {
            Some(SessionEnd::Closed) => self.append(Event::SessionClosed(Empty {})),
            Some(SessionEnd::Failed) => self.append(Event::SessionFailed(WithReason {
                reason: "scripted_failure".into(),
            })),
            None => Ok(()),
        }
    }

    async fn stream(&self, text: &[char], offset: &mut u64, rng: &mut Rng, factor: u64) {
        let mut i = 0;
        while i < text.len() {
            let n = (1 + rng.below(6) as usize).min(text.len() - i);
            let chunk: String = text[i..i + n].iter().collect();
            self.pause(self.delay(factor)).await;
            let start = *offset;
            self.app
                .edit_live(&self.worker, &self.session_id, false, |lt| {
                    if let Some(lt) = lt.as_mut() {
                        lt.text.push_str(&chunk);
                        let len = lt.text.chars().count();
                        if len > LIVE_TEXT_MAX {
                            let cut = len - LIVE_TEXT_MAX;
                            let byte = lt.text.char_indices().nth(cut).map_or(0, |(b, _)| b);
                            lt.text.drain(..byte);
                            lt.text_offset += cut as u64;
                        }
                    }
                });
            self.app.log.publish_transient(
                Scope::Session,
                &self.session_id,
                Event::TurnDelta(TurnDelta {
                    turn_id: self.turn_id.clone(),
                    message_id: self.reply_id.clone(),
                    offset: start,
                    text: chunk,
                }),
                true,
            );
            *offset += n as u64;
            i += n;
        }
    }

    async fn tool(&self, factor: u64) -> StoreResult<()> {
        let n = self.app.log.db().next_number("call")?;
        let call_id = format!("call_{n}");
        let process_id = format!("proc_{n}");
        let command = "scripted-build --steps 5".to_owned();
        self.append(Event::ToolStarted(ToolStarted {
            turn_id: self.turn_id.clone(),
            call_id: call_id.clone(),
            name: "shell".into(),
            input: json!({"command": command, "process_id": process_id}).into(),
        }))?;
        self.track.lock().unwrap_or_else(|e| e.into_inner()).tool = Some(call_id.clone());
        let cid = call_id.clone();
        self.live_snapshot(|lt| {
            lt.state = LiveTurnState::ToolRunning;
            lt.tools.push(LiveTool {
                call_id: cid,
                name: "shell".into(),
                state: LiveToolState::Running.as_str().into(),
                progress: String::new(),
            });
        });
        self.app.log.append(
            Scope::Process,
            &process_id,
            Event::ProcessStarted(ProcessStarted {
                process_id: process_id.clone(),
                command,
            }),
        )?;
        self.track.lock().unwrap_or_else(|e| e.into_inner()).process = Some(process_id.clone());
        let mut output = String::new();
        for step in 1..=5 {
            self.pause(self.delay(factor) * 2).await;
            let line = format!("step {step}/5 ✓ compiled\n");
            self.emit_output(&process_id, &line)?;
            output.push_str(&line);
            let progress = format!("{step}/5");
            self.app.log.publish_transient(
                Scope::Session,
                &self.session_id,
                Event::ToolProgress(ToolProgress {
                    turn_id: self.turn_id.clone(),
                    call_id: call_id.clone(),
                    progress: progress.clone(),
                }),
                false,
            );
            self.app
                .edit_live(&self.worker, &self.session_id, false, |lt| {
                    if let Some(t) = lt.as_mut().and_then(|lt| lt.tools.last_mut()) {
                        t.progress = progress;
                    }
                });
        }
        self.app.log.append(
            Scope::Process,
            &process_id,
            Event::ProcessExited(ProcessExited { code: 0 }),
        )?;
        self.track.lock().unwrap_or_else(|e| e.into_inner()).process = None;
        self.append(Event::ToolCompleted(ToolCompleted {
            turn_id: self.turn_id.clone(),
            call_id: call_id.clone(),
            status: ToolStatus::Ok,
            output,
        }))?;
        self.track.lock().unwrap_or_else(|e| e.into_inner()).tool = None;
        self.live_snapshot(|lt| {
            lt.state = LiveTurnState::Sampling;
            if let Some(t) = lt.tools.iter_mut().find(|t| t.call_id == call_id) {
                t.state = LiveToolState::Ok.as_str().into();
            }
        });
        Ok(())
    }

    fn emit_output(&self, process_id: &str, line: &str) -> StoreResult<()> {
        emit_output(&self.app, process_id, line)
    }

    async fn ask(&self) -> StoreResult<()> {
        let n = self.app.log.db().next_number("question")?;
        let question_id = format!("q_{n}");
        let (tx, mut rx) = mpsc::channel(4);
        let live = self.worker.session(&self.session_id);
        live.lock().questions.insert(question_id.clone(), tx);
        let prompt = "Proceed with the plan?".to_owned();
        let options = vec!["yes".to_owned(), "no".to_owned()];
        let pq = PendingQuestion {
            question_id: question_id.clone(),
            prompt: prompt.clone(),
            options: options.clone(),
        };
        self.live_snapshot(|lt| {
            lt.state = LiveTurnState::WaitingForAnswer;
            lt.pending_question = Some(pq);
        });
        // The question lives only in live_turn for a while, then is persisted.
        let early = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(self.app.cfg.ask_persist_ms)) => None,
            a = rx.recv() => a,
        };
        self.append(Event::QuestionAsked(QuestionAsked {
            turn_id: self.turn_id.clone(),
            question_id: question_id.clone(),
            prompt,
            options,
        }))?;
        self.track
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .question = Some(question_id.clone());
        let answer = match early {
            Some(a) => Some(a),
            None => rx.recv().await,
        };
        let Some(answer) = answer else {
            return Ok(());
        };
        self.answered(&question_id, answer, &live)?;
        self.live_snapshot(|lt| {
            lt.state = LiveTurnState::Sampling;
            lt.pending_question = None;
        });
        Ok(())
    }

    fn background(&self) -> StoreResult<()> {
        let n = self.app.log.db().next_number("task")?;
        let task_id = format!("task_{n}");
        let process_id = format!("proc_bg_{n}");
        let tid = task_id.clone();
        self.app
            .edit_tasks(&self.worker, &self.session_id, |tasks| {
                tasks.push(Task {
                    task_id: tid,
                    title: "background indexing".into(),
                    state: TaskState::Queued,
                    process_id: None,
                    started_at: None,
                    ended_at: None,
                    detail: None,
                });
            })?;
        let app = Arc::clone(&self.app);
        let worker = Arc::clone(&self.worker);
        let session_id = self.session_id.clone();
        let handle = tokio::spawn(async move {
            if let Err(e) = run_background(&app, &worker, &session_id, &task_id, &process_id).await
            {
                tracing::error!(task = %task_id, error = %e, "background task failed");
            }
        });
        self.worker.track(handle);
        Ok(())
    }

    /// Cleanup after `cancel`: close what the turn held open, then end it.
    fn cancelled(&self) -> StoreResult<()> {
        let track = std::mem::take(&mut *self.track.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(p) = track.process {
            self.app.log.append(
                Scope::Process,
                &p,
                Event::ProcessFailed(WithReason {
                    reason: "cancelled".into(),
                }),
            )?;
        }
        if let Some(call_id) = track.tool {
            self.append(Event::ToolCompleted(ToolCompleted {
                turn_id: self.turn_id.clone(),
                call_id,
                status: ToolStatus::Error,
                output: "cancelled".into(),
            }))?;
        }
        if let Some(question_id) = track.question {
            self.append(Event::QuestionDeclined(QuestionDeclined {
                question_id,
                reason: "cancelled".into(),
            }))?;
        }
        let live = self.worker.session(&self.session_id);
        live.lock().questions.clear();
        self.app
            .edit_live(&self.worker, &self.session_id, true, |lt| *lt = None);
        self.append(Event::TurnCancelled(TurnRef {
            turn_id: self.turn_id.clone(),
        }))
    }
}

/// Logs process output and publishes it as a droppable sample.
fn emit_output(app: &App, process_id: &str, line: &str) -> StoreResult<()> {
    let offset = app.log.db().append_process_log(process_id, line)?;
    app.log.publish_transient(
        Scope::Process,
        process_id,
        Event::ProcessOutput(ProcessOutput {
            stream: OutputStream::Stdout,
            offset,
            text: line.to_owned(),
        }),
        false,
    );
    Ok(())
}

async fn run_background(
    app: &Arc<App>,
    worker: &Worker,
    session_id: &str,
    task_id: &str,
    process_id: &str,
) -> StoreResult<()> {
    tokio::time::sleep(Duration::from_millis(app.cfg.delta_ms)).await;
    let command = "scripted-index --all".to_owned();
    app.log.append(
        Scope::Process,
        process_id,
        Event::ProcessStarted(ProcessStarted {
            process_id: process_id.to_owned(),
            command,
        }),
    )?;
    let started = now_rfc3339();
    app.edit_tasks(worker, session_id, |tasks| {
        if let Some(t) = tasks.iter_mut().find(|t| t.task_id == task_id) {
            t.state = TaskState::Running;
            t.process_id = Some(process_id.to_owned());
            t.started_at = Some(started);
        }
    })?;
    let steps = 4;
    for step in 1..=steps {
        tokio::time::sleep(Duration::from_millis(app.cfg.bg_ms / steps)).await;
        emit_output(app, process_id, &format!("indexed part {step}/{steps}\n"))?;
    }
    app.log.append(
        Scope::Process,
        process_id,
        Event::ProcessExited(ProcessExited { code: 0 }),
    )?;
    let ended = now_rfc3339();
    app.edit_tasks(worker, session_id, |tasks| {
        if let Some(t) = tasks.iter_mut().find(|t| t.task_id == task_id) {
            t.state = TaskState::Succeeded;
            t.ended_at = Some(ended);
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_keep_step_order_and_flags() {
        let d = Directives::parse("please /ask then /tool and /bg /long 300 /slow /fail").unwrap();
        assert_eq!(d.steps, vec![Step::Ask, Step::Tool, Step::Bg]);
        assert_eq!(d.long, Some(300));
        assert!(d.slow && d.fail && !d.burst);
        assert_eq!(d.delta_factor(), 10);
        let b = Directives::parse("/long 20000 /slow /burst").unwrap();
        assert!(b.burst);
        assert_eq!(b.delta_factor(), 0, "a burst wins over /slow");
        assert_eq!(Directives::parse("hello").unwrap(), Directives::default());
        let p = Directives::parse("/plan /tool /close").unwrap();
        assert_eq!(p.steps, vec![Step::Plan, Step::Tool]);
        assert_eq!(p.end, Some(SessionEnd::Closed));
        let c = Directives::parse("/close /crash").unwrap();
        assert_eq!(c.end, Some(SessionEnd::Failed), "the last word wins");
        assert_eq!(Directives::default().delta_factor(), 1);
    }

    #[test]
    fn directives_are_bounded() {
        assert_eq!(
            Directives::parse("/long 100000").unwrap().long,
            Some(LONG_MAX)
        );
        assert_eq!(
            Directives::parse("/long 100001"),
            Err(DirectiveError::TooLong("100001".into()))
        );
        assert_eq!(
            Directives::parse("/long 100000000000000000000"),
            Err(DirectiveError::TooLong("100000000000000000000".into()))
        );
        assert_eq!(Directives::parse("/long x").unwrap().long, None);
        assert_eq!(
            Directives::parse(&"/bg ".repeat(16)).unwrap().steps.len(),
            16
        );
        assert_eq!(
            Directives::parse(&"/tool /ask ".repeat(9)),
            Err(DirectiveError::TooManySteps(18))
        );
    }

    #[test]
    fn reply_has_exact_length_and_non_ascii() {
        for n in [0, 1, 7, 500, 20_000] {
            let t = reply_text(1, "turn_1", "hi", Some(n));
            assert_eq!(t.chars().count(), n);
        }
        let t = reply_text(1, "turn_1", "hi", Some(500));
        assert!(!t.is_ascii());
        assert!(t.chars().any(|c| c.len_utf16() == 2), "needs astral chars");
    }

    #[test]
    fn reply_is_deterministic_per_seed() {
        assert_eq!(
            reply_text(5, "turn_2", "x", None),
            reply_text(5, "turn_2", "x", None)
        );
        assert_ne!(
            reply_text(5, "turn_2", "x", Some(200)),
            reply_text(6, "turn_2", "x", Some(200))
        );
    }
}
