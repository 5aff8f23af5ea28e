//! Wire types of PROTOCOL.md §2–5 and §7: the event envelope, every event
//! payload, the replay and event pages, the write bodies and the canonical
//! transcript. One definition, shared by the client core and `replay-server`.
//!
//! Decoding is tolerant: unknown fields are ignored, and an unknown `type`
//! becomes [`Event::Unknown`] with its data kept opaque, so a durable event of
//! a newer server still advances the cursor.

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::core::json::{self, JsonError, RawJson};

/// The logbook an event belongs to (PROTOCOL.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Session and turn lifecycle, messages, tools, questions.
    Session,
    /// Team messages and deliveries.
    Team,
    /// Runtime-managed command lifecycle and sampled output.
    Process,
    /// Worktree creation, claim, release, cleanup.
    Worktree,
    /// Runtime-level events such as startup recovery.
    System,
}

impl Scope {
    /// The scope's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Team => "team",
            Scope::Process => "process",
            Scope::Worktree => "worktree",
            Scope::System => "system",
        }
    }
}

/// One event as it crosses the wire (PROTOCOL.md §2).
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// Global row id; durable events only.
    pub id: Option<u64>,
    /// The logbook.
    pub scope: Scope,
    /// Which logbook of that scope, e.g. `ses_7f3a`.
    pub scope_id: String,
    /// Dense per-scope sequence number; durable events only.
    pub seq: Option<u64>,
    /// Durable head when a transient event was produced; transient only.
    pub after_seq: Option<u64>,
    /// Whether the event must not be lost (all durable events are critical).
    pub critical: bool,
    /// RFC 3339 timestamp as sent by the server.
    pub ts: String,
    /// The typed payload; `type` and `data` on the wire.
    pub event: Event,
}

impl Envelope {
    /// A durable event as a store hands it out: row id and seq, critical.
    pub fn durable(
        id: u64,
        scope: Scope,
        scope_id: String,
        seq: u64,
        ts: String,
        event: Event,
    ) -> Self {
        Envelope {
            id: Some(id),
            scope,
            scope_id,
            seq: Some(seq),
            after_seq: None,
            critical: true,
            ts,
            event,
        }
    }

    /// True for events that carry a `seq` (persisted before sending).
    pub fn is_durable(&self) -> bool {
        self.seq.is_some()
    }

    /// Decodes one envelope from JSON bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Encodes the envelope as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("envelope serialisation cannot fail")
    }
}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Some(id) = self.id {
            m.serialize_entry("id", &id)?;
        }
        m.serialize_entry("scope", &self.scope)?;
        m.serialize_entry("scope_id", &self.scope_id)?;
        if let Some(seq) = self.seq {
            m.serialize_entry("seq", &seq)?;
        }
        if let Some(after) = self.after_seq {
            m.serialize_entry("after_seq", &after)?;
        }
        m.serialize_entry("type", self.event.type_name())?;
        m.serialize_entry("critical", &self.critical)?;
        m.serialize_entry("ts", &self.ts)?;
        m.serialize_entry("data", &EventDataRef(&self.event))?;
        m.end()
    }
}

#[derive(Deserialize)]
struct WireEnvelope<'a> {
    #[serde(default)]
    id: Option<u64>,
    scope: Scope,
    #[serde(default)]
    scope_id: String,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    after_seq: Option<u64>,
    #[serde(rename = "type", borrow)]
    ty: std::borrow::Cow<'a, str>,
    #[serde(default)]
    critical: Option<bool>,
    #[serde(default)]
    ts: String,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireEnvelope::deserialize(d)?;
        let event = Event::decode(&w.ty, w.data.map(RawValue::get)).map_err(D::Error::custom)?;
        Ok(Envelope {
            id: w.id,
            scope: w.scope,
            scope_id: w.scope_id,
            seq: w.seq,
            after_seq: w.after_seq,
            // Every durable event is critical, whatever the wire says.
            critical: w.critical.unwrap_or(true) || w.seq.is_some(),
            ts: w.ts,
            event,
        })
    }
}

macro_rules! events {
    ($( $(#[$doc:meta])* $variant:ident($payload:ty) = $name:literal, )*) => {
        /// A typed event payload, keyed by the envelope's `type`.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Event {
            $( $(#[$doc])* $variant($payload), )*
            /// A type this version does not know, or any event read with
            /// [`json::from_str_opaque`] (logs): `data` kept as text.
            Unknown {
                /// The wire `type`.
                type_name: String,
                /// The wire `data` (compacted). Decode it, if needed, with
                /// [`Event::read_data`].
                data: RawJson,
            },
        }

        impl Event {
            /// The wire `type` of this event.
            pub fn type_name(&self) -> &str {
                match self {
                    $( Event::$variant(_) => $name, )*
                    Event::Unknown { type_name, .. } => type_name,
                }
            }

            /// Encodes only the `data` part as JSON (what a store keeps beside `type`).
            pub fn data_json(&self) -> String {
                serde_json::to_string(&EventDataRef(self)).expect("event data serialisation cannot fail")
            }

            /// Serialises only the `data` part (what [`Event::data_json`] writes).
            pub fn serialize_data<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                EventDataRef(self).serialize(s)
            }

            /// Decodes `data` (raw JSON, `None` when absent) for a wire `type`.
            pub fn decode(type_name: &str, data: Option<&str>) -> Result<Self, serde_json::Error> {
                Self::read_data(type_name, data).map_err(serde::de::Error::custom)
            }

            /// [`Event::decode`] with the client's small reader ([`crate::core::json`]).
            pub fn read_data(type_name: &str, data: Option<&str>) -> Result<Self, JsonError> {
                let mut r = json::Reader::new(data.unwrap_or("{}"));
                let event = Self::read_value(type_name, &mut r)?;
                r.end()?;
                Ok(event)
            }

            /// Reads the `data` value of a wire `type` at the reader's position.
            pub fn read_value(type_name: &str, r: &mut json::Reader<'_>) -> Result<Self, JsonError> {
                Ok(match type_name {
                    $( $name => Event::$variant(json::FromJson::read(r)?), )*
                    other => Event::Unknown {
                        type_name: other.to_owned(),
                        data: json::FromJson::read(r)?,
                    },
                })
            }
        }

        struct EventDataRef<'a>(&'a Event);

        impl Serialize for EventDataRef<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self.0 {
                    $( Event::$variant(p) => p.serialize(s), )*
                    Event::Unknown { data, .. } => data.serialize(s),
                }
            }
        }
    };
}

events! {
    /// `session.created` (durable).
    SessionCreated(SessionCreated) = "session.created",
    /// `session.closed` (durable).
    SessionClosed(Empty) = "session.closed",
    /// `session.failed` (durable).
    SessionFailed(WithReason) = "session.failed",
    /// `turn.started` (durable).
    TurnStarted(TurnStarted) = "turn.started",
    /// `message.committed` (durable).
    MessageCommitted(MessageCommitted) = "message.committed",
    /// `tool.started` (durable).
    ToolStarted(ToolStarted) = "tool.started",
    /// `tool.completed` (durable).
    ToolCompleted(ToolCompleted) = "tool.completed",
    /// `question.asked` (durable).
    QuestionAsked(QuestionAsked) = "question.asked",
    /// `question.answered` (durable).
    QuestionAnswered(QuestionAnswered) = "question.answered",
    /// `question.declined` (durable).
    QuestionDeclined(QuestionDeclined) = "question.declined",
    /// `turn.completed` (durable).
    TurnCompleted(TurnRef) = "turn.completed",
    /// `turn.failed` (durable).
    TurnFailed(TurnFailed) = "turn.failed",
    /// `turn.cancelled` (durable).
    TurnCancelled(TurnRef) = "turn.cancelled",
    /// `hello` (transient, critical): first frame of every stream.
    Hello(Hello) = "hello",
    /// `heartbeat` (transient, critical).
    Heartbeat(Heartbeat) = "heartbeat",
    /// `turn.delta` (transient, critical).
    TurnDelta(TurnDelta) = "turn.delta",
    /// `turn.tool_progress` (transient, droppable).
    ToolProgress(ToolProgress) = "turn.tool_progress",
    /// `live_turn.snapshot` (transient, critical).
    LiveTurnSnapshot(LiveTurnSnapshot) = "live_turn.snapshot",
    /// `tasks.snapshot` (transient, critical).
    TasksSnapshot(TasksSnapshot) = "tasks.snapshot",
    /// `process.started` (durable, process scope).
    ProcessStarted(ProcessStarted) = "process.started",
    /// `process.exited` (durable, process scope).
    ProcessExited(ProcessExited) = "process.exited",
    /// `process.failed` (durable, process scope).
    ProcessFailed(WithReason) = "process.failed",
    /// `process.output` (transient, droppable, process scope).
    ProcessOutput(ProcessOutput) = "process.output",
    /// `team.message` (durable, team scope).
    TeamMessage(TeamMessage) = "team.message",
    /// `delivery.deferred` (durable, team scope).
    DeliveryDeferred(Delivery) = "delivery.deferred",
    /// `delivery.delivered` (durable, team scope).
    DeliveryDelivered(Delivery) = "delivery.delivered",
    /// `delivery.failed` (durable, team scope).
    DeliveryFailed(Delivery) = "delivery.failed",
    /// `worktree.created` (durable, worktree scope).
    WorktreeCreated(Worktree) = "worktree.created",
    /// `worktree.claimed` (durable, worktree scope).
    WorktreeClaimed(Worktree) = "worktree.claimed",
    /// `worktree.released` (durable, worktree scope).
    WorktreeReleased(Worktree) = "worktree.released",
    /// `worktree.removed` (durable, worktree scope).
    WorktreeRemoved(Worktree) = "worktree.removed",
    /// `system.started` (durable, system scope).
    SystemStarted(SystemStarted) = "system.started",
    /// `system.recovered` (durable, system scope).
    SystemRecovered(SystemRecovered) = "system.recovered",
}

/// A payload with no fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

/// `{reason}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WithReason {
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// `session.created`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionCreated {
    /// Human title.
    #[serde(default)]
    pub title: String,
}

/// `turn.started`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnStarted {
    /// The turn.
    pub turn_id: String,
    /// The user message that started it.
    #[serde(default)]
    pub input_message_id: String,
}

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person.
    User,
    /// The agent.
    Assistant,
}

impl Role {
    /// The role's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// `message.committed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageCommitted {
    /// The message.
    pub message_id: String,
    /// Its turn.
    #[serde(default)]
    pub turn_id: String,
    /// Author.
    pub role: Role,
    /// Whole text.
    #[serde(default)]
    pub text: String,
}

/// `tool.started`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolStarted {
    /// The turn.
    #[serde(default)]
    pub turn_id: String,
    /// The tool call.
    pub call_id: String,
    /// Tool name, e.g. `shell`.
    #[serde(default)]
    pub name: String,
    /// Tool input, any JSON.
    #[serde(default)]
    pub input: RawJson,
}

/// Outcome of a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    /// Succeeded.
    Ok,
    /// Failed.
    Error,
}

/// `tool.completed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCompleted {
    /// The turn.
    #[serde(default)]
    pub turn_id: String,
    /// The tool call.
    pub call_id: String,
    /// Outcome.
    pub status: ToolStatus,
    /// Tool output text.
    #[serde(default)]
    pub output: String,
}

/// `question.asked`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuestionAsked {
    /// The turn.
    #[serde(default)]
    pub turn_id: String,
    /// The question.
    pub question_id: String,
    /// What is asked.
    #[serde(default)]
    pub prompt: String,
    /// Answer choices; empty for free text.
    #[serde(default)]
    pub options: Vec<String>,
}

/// `question.answered`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuestionAnswered {
    /// The question.
    pub question_id: String,
    /// The answer given.
    #[serde(default)]
    pub answer: String,
}

/// `question.declined`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuestionDeclined {
    /// The question.
    pub question_id: String,
    /// Why, e.g. `orphaned`.
    #[serde(default)]
    pub reason: String,
}

/// `turn.completed` and `turn.cancelled`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRef {
    /// The turn.
    pub turn_id: String,
}

/// `turn.failed`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnFailed {
    /// The turn.
    pub turn_id: String,
    /// Why, e.g. `worker_restart`.
    #[serde(default)]
    pub reason: String,
}

/// The reason a turn fails when its worker died.
pub const REASON_WORKER_RESTART: &str = "worker_restart";

/// `hello`: first frame of every stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The log's epoch.
    pub epoch: String,
    /// Durable head of the scope (row id on the global stream).
    pub head: u64,
    /// The runtime process run.
    #[serde(default)]
    pub boot_id: String,
}

/// `heartbeat`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Durable head of the scope.
    pub head: u64,
}

/// `turn.delta`: live assistant text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnDelta {
    /// The turn.
    #[serde(default)]
    pub turn_id: String,
    /// The assistant message being written.
    #[serde(default)]
    pub message_id: String,
    /// Offset in Unicode scalar values from the start of the message text.
    pub offset: u64,
    /// The appended text.
    pub text: String,
}

/// `turn.tool_progress` (droppable).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    /// The turn.
    #[serde(default)]
    pub turn_id: String,
    /// The tool call.
    pub call_id: String,
    /// Free-form progress text.
    #[serde(default)]
    pub progress: String,
}

/// `live_turn.snapshot`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveTurnSnapshot {
    /// The running turn, or `null` when none runs.
    pub live_turn: Option<LiveTurn>,
}

/// What a running turn looks like right now (PROTOCOL.md §5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveTurn {
    /// The turn.
    pub turn_id: String,
    /// The assistant message being written.
    #[serde(default)]
    pub message_id: String,
    /// Revision within one boot id; higher wins.
    pub rev: u64,
    /// What the turn is doing.
    pub state: LiveTurnState,
    /// Tail of the uncommitted assistant text (at most 16 384 scalars).
    #[serde(default)]
    pub text: String,
    /// Offset of `text`'s first scalar in the message.
    #[serde(default)]
    pub text_offset: u64,
    /// Tool calls of the turn and their states.
    #[serde(default)]
    pub tools: Vec<LiveTool>,
    /// A question waiting for an answer, possibly not yet persisted.
    #[serde(default)]
    pub pending_question: Option<PendingQuestion>,
}

/// State of a live turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LiveTurnState {
    /// The model is writing.
    Sampling,
    /// A tool runs.
    ToolRunning,
    /// A question waits for the person.
    WaitingForAnswer,
}

/// A tool call inside a live turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveTool {
    /// The call.
    pub call_id: String,
    /// Tool name.
    #[serde(default)]
    pub name: String,
    /// `running`, `ok` or `error`.
    #[serde(default)]
    pub state: String,
    /// Latest progress text.
    #[serde(default)]
    pub progress: String,
}

/// A question in a live turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingQuestion {
    /// The question.
    pub question_id: String,
    /// What is asked.
    #[serde(default)]
    pub prompt: String,
    /// Answer choices.
    #[serde(default)]
    pub options: Vec<String>,
}

/// `tasks.snapshot` and the `tasks` part of a replay page.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TasksSnapshot {
    /// Higher or equal replaces.
    pub version: u64,
    /// Every task of the session.
    #[serde(default)]
    pub tasks: Vec<Task>,
    /// Idle between turns but waiting on these tasks.
    #[serde(default)]
    pub background_wait: Option<BackgroundWait>,
}

/// A background task (can span turns).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The task.
    pub task_id: String,
    /// Human title.
    #[serde(default)]
    pub title: String,
    /// Lifecycle state.
    pub state: TaskState,
    /// The process it runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Free-form detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Task lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Waiting to run.
    Queued,
    /// Running.
    Running,
    /// Done, fine.
    Succeeded,
    /// Done, failed.
    Failed,
    /// Stopped.
    Cancelled,
}

/// The session waits on background tasks between turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackgroundWait {
    /// The tasks waited on.
    pub task_ids: Vec<String>,
    /// Since when.
    #[serde(default)]
    pub since: String,
}

/// `process.started`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStarted {
    /// The process.
    pub process_id: String,
    /// Its command line.
    #[serde(default)]
    pub command: String,
}

/// `process.exited`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessExited {
    /// Exit code.
    pub code: i64,
}

/// Which output stream of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// `process.output` (droppable sample; the process log is authoritative).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessOutput {
    /// Which stream.
    pub stream: OutputStream,
    /// Byte offset in the process log.
    pub offset: u64,
    /// The sample.
    pub text: String,
}

/// `team.message`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TeamMessage {
    /// Sender.
    pub from: String,
    /// Recipient.
    pub to: String,
    /// Text.
    pub text: String,
}

/// `delivery.deferred`, `delivery.delivered`, `delivery.failed`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The delivery.
    pub delivery_id: String,
    /// Recipient.
    #[serde(default)]
    pub to: String,
    /// Why, for deferred and failed deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `worktree.*`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Worktree {
    /// The worktree.
    pub worktree_id: String,
    /// The session that claims it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `system.started`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemStarted {
    /// The new run.
    pub boot_id: String,
}

/// `system.recovered`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemRecovered {
    /// What startup recovery did.
    #[serde(default)]
    pub summary: RawJson,
}

/// `GET /v1/sessions/{id}/replay` (PROTOCOL.md §4.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayPage {
    /// The log's epoch.
    pub epoch: String,
    /// The runtime run that produced `live_turn`.
    #[serde(default)]
    pub boot_id: String,
    /// Seq of the last event in `history` (or `after_cursor` when empty).
    pub cursor: u64,
    /// Durable head.
    pub head: u64,
    /// More pages follow.
    #[serde(default)]
    pub has_more: bool,
    /// Durable events, ascending.
    #[serde(default)]
    pub history: Vec<Envelope>,
    /// The running turn (meaningful on the last page only).
    #[serde(default)]
    pub live_turn: Option<LiveTurn>,
    /// Task state (meaningful on the last page only).
    #[serde(default)]
    pub tasks: Option<TasksSnapshot>,
}

/// `GET /v1/{scope_path}/events` as JSON (PROTOCOL.md §4.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    /// The log's epoch.
    pub epoch: String,
    /// Durable head.
    pub head: u64,
    /// Durable events, ascending.
    #[serde(default)]
    pub events: Vec<Envelope>,
    /// More pages follow.
    #[serde(default)]
    pub has_more: bool,
}

/// Every error response body: `{"error": CODE, "message": TEXT}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable code, e.g. `invalid_cursor`, `cursor_ahead`.
    pub error: String,
    /// Human text.
    #[serde(default)]
    pub message: String,
    /// With `cursor_ahead`: the log's epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// With `cursor_ahead`: the durable head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<u64>,
}

/// `POST /v1/sessions` body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateSession {
    /// Human title.
    #[serde(default)]
    pub title: String,
}

/// `POST /v1/sessions` answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionCreatedReply {
    /// The new session.
    pub session_id: String,
    /// Its log's epoch.
    pub epoch: String,
}

/// `POST /v1/sessions/{id}/messages` body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PostMessage {
    /// Chosen by the client; a retry with the same id starts nothing.
    pub message_id: String,
    /// The text.
    pub text: String,
}

/// `POST /v1/sessions/{id}/messages` answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageAccepted {
    /// The turn the message started (the same on a retry).
    pub turn_id: String,
}

/// `POST /v1/sessions/{id}/questions/{qid}/answer` body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerQuestion {
    /// The answer.
    pub answer: String,
}

/// `POST /v1/sessions/{id}/cancel` body: the turn to stop. A cancel that
/// names a turn stops nothing else, so a retry never stops the next turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CancelTurn {
    /// The turn to stop; absent: whichever turn is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// The `202` answer to a cancel: the turn it stopped, `null` when none ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CancelAccepted {
    /// The stopped turn.
    pub turn_id: Option<String>,
}

/// The canonical transcript of a session (PROTOCOL.md §7).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    /// The log's epoch.
    pub epoch: String,
    /// Seq of the last applied durable event.
    pub cursor: u64,
    /// Committed items in durable order.
    pub items: Vec<TranscriptItem>,
    /// Unanswered questions, persisted and live.
    pub pending_prompts: Vec<PendingPrompt>,
    /// Task state.
    pub tasks: TasksSnapshot,
}

impl Transcript {
    /// Transcript equality (PROTOCOL.md §6): the committed items only.
    pub fn items_eq(&self, other: &Transcript) -> bool {
        self.items == other.items
    }
}

/// One committed item of a transcript.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TranscriptItem {
    /// A committed message.
    Message {
        /// The message.
        message_id: String,
        /// Its turn.
        turn_id: String,
        /// Author.
        role: Role,
        /// Whole text.
        text: String,
    },
    /// A tool card.
    Tool {
        /// The call.
        call_id: String,
        /// Its turn.
        turn_id: String,
        /// Tool name.
        name: String,
        /// `running`, `ok` or `error`.
        status: String,
        /// Output once completed.
        output: Option<String>,
    },
    /// The end of a turn.
    TurnEnd {
        /// The turn.
        turn_id: String,
        /// `completed`, `failed` or `cancelled`.
        outcome: String,
        /// Why it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ItemKind {
    Message,
    Tool,
    TurnEnd,
}

/// Every field of every [`TranscriptItem`] variant. Read flat and then checked:
/// a derived internally tagged enum would buffer each item through serde's
/// generic `Content` tree, a large piece of code in the wasm.
#[derive(Deserialize)]
struct FlatItem {
    kind: ItemKind,
    message_id: Option<String>,
    turn_id: Option<String>,
    role: Option<Role>,
    text: Option<String>,
    call_id: Option<String>,
    name: Option<String>,
    status: Option<String>,
    output: Option<String>,
    outcome: Option<String>,
    reason: Option<String>,
}

impl<'de> Deserialize<'de> for TranscriptItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fn req<E: serde::de::Error>(v: Option<String>, field: &'static str) -> Result<String, E> {
            v.ok_or_else(|| E::missing_field(field))
        }
        let f = FlatItem::deserialize(d)?;
        let turn_id = req(f.turn_id, "turn_id")?;
        Ok(match f.kind {
            ItemKind::Message => TranscriptItem::Message {
                message_id: req(f.message_id, "message_id")?,
                turn_id,
                role: f.role.ok_or_else(|| D::Error::missing_field("role"))?,
                text: req(f.text, "text")?,
            },
            ItemKind::Tool => TranscriptItem::Tool {
                call_id: req(f.call_id, "call_id")?,
                turn_id,
                name: req(f.name, "name")?,
                status: req(f.status, "status")?,
                output: f.output,
            },
            ItemKind::TurnEnd => TranscriptItem::TurnEnd {
                turn_id,
                outcome: req(f.outcome, "outcome")?,
                reason: f.reason,
            },
        })
    }
}

/// An unanswered question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingPrompt {
    /// The question.
    pub question_id: String,
    /// What is asked.
    pub prompt: String,
    /// Answer choices.
    pub options: Vec<String>,
    /// False when it exists only in a live turn.
    pub persisted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn durable_envelope_round_trips_in_wire_order() {
        let line = r#"{"id":5012,"scope":"session","scope_id":"ses_7f3a","seq":17,"type":"message.committed","critical":true,"ts":"2026-11-29T23:00:00.123Z","data":{"message_id":"m1","turn_id":"t1","role":"assistant","text":"hi"}}"#;
        let env = Envelope::from_json(line.as_bytes()).unwrap();
        assert!(env.is_durable());
        assert!(matches!(env.event, Event::MessageCommitted(ref m) if m.text == "hi"));
        assert_eq!(env.to_json(), line);
    }

    #[test]
    fn unknown_type_and_fields_are_tolerated() {
        let line = r#"{"scope":"session","scope_id":"s","seq":3,"type":"future.thing","critical":true,"ts":"","data":{"x":[1,2]},"extra":1}"#;
        let env = Envelope::from_json(line.as_bytes()).unwrap();
        assert_eq!(env.event.type_name(), "future.thing");
        assert_eq!(env.seq, Some(3));
        let line = r#"{"scope":"session","scope_id":"s","seq":4,"type":"turn.completed","ts":"","data":{"turn_id":"t","new_field":true}}"#;
        let env = Envelope::from_json(line.as_bytes()).unwrap();
        assert!(env.critical, "durable events are critical");
        assert!(matches!(env.event, Event::TurnCompleted(ref t) if t.turn_id == "t"));
    }

    #[test]
    fn transient_envelope_has_no_id_or_seq() {
        let line = r#"{"scope":"session","scope_id":"s","after_seq":16,"type":"turn.delta","critical":true,"ts":"","data":{"turn_id":"t","message_id":"m","offset":3,"text":"é"}}"#;
        let env = Envelope::from_json(line.as_bytes()).unwrap();
        assert!(!env.is_durable());
        assert_eq!(env.after_seq, Some(16));
        assert_eq!(env.to_json(), line);
    }

    #[test]
    fn transcript_serialises_keys_in_canonical_order() {
        let t = Transcript {
            epoch: "e".into(),
            cursor: 2,
            items: vec![
                TranscriptItem::Tool {
                    call_id: "c1".into(),
                    turn_id: "t1".into(),
                    name: "shell".into(),
                    status: "ok".into(),
                    output: Some("x".into()),
                },
                TranscriptItem::TurnEnd {
                    turn_id: "t1".into(),
                    outcome: "completed".into(),
                    reason: None,
                },
            ],
            pending_prompts: vec![],
            tasks: TasksSnapshot::default(),
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"epoch":"e","cursor":2,"items":[{"kind":"tool","call_id":"c1","turn_id":"t1","name":"shell","status":"ok","output":"x"},{"kind":"turn_end","turn_id":"t1","outcome":"completed"}],"pending_prompts":[],"tasks":{"version":0,"tasks":[],"background_wait":null}}"#
        );
    }
}
