//! Event payloads (PROTOCOL.md §3): the session's durable and transient
//! events, the stream's `hello` and `heartbeat`, and `tasks.snapshot`; the
//! [`Event`] enum that names them all, with its readers by type name.

use super::*;

// `session` lists the types a client reads into their payload types (the
// session fold's vocabulary, and `hello`/`heartbeat`, which every stream
// carries); `logs` the other scopes' types, which a client keeps as text
// (a log shows them; `LogEntry::event` types one on demand). The server and
// `Event::read_data` know both. Reading only what it interprets keeps the
// other payloads' readers out of the wasm: 1.2 KB gzipped (docs/size.md).
macro_rules! events {
    (
        session { $( $(#[$sdoc:meta])* $svariant:ident($spayload:ty) = $sname:literal, )* }
        logs { $( $(#[$ldoc:meta])* $lvariant:ident($lpayload:ty) = $lname:literal, )* }
    ) => {
        events!(@all
            $( $(#[$sdoc])* $svariant($spayload) = $sname, )*
            $( $(#[$ldoc])* $lvariant($lpayload) = $lname, )*
        );

        impl Event {
            /// What a client's envelope reader ([`Envelope`]'s `FromJson`)
            /// makes of `data`: the session's types and the stream's
            /// typed, every other type as [`Event::Unknown`] (text).
            pub(crate) fn read_client_value(type_name: &str, r: &mut json::Reader<'_>) -> Result<Self, JsonError> {
                Ok(match type_name {
                    $( $sname => Event::$svariant(json::FromJson::read(r)?), )*
                    other => Event::Unknown {
                        type_name: other.to_owned(),
                        data: json::FromJson::read(r)?,
                    },
                })
            }

            /// [`Event::read_client_value`] of a whole `data` text (`None`: absent).
            pub(crate) fn read_client_data(type_name: &str, data: Option<&str>) -> Result<Self, JsonError> {
                Self::read_whole(type_name, data, Self::read_client_value)
            }

            /// `data` (raw JSON, `None` when absent, read as `{}`) read whole
            /// by `read`.
            // Inlined: called out of line, the reader it is given is called
            // through a pointer too (93 B gz of wasm).
            #[inline(always)]
            fn read_whole(
                type_name: &str,
                data: Option<&str>,
                read: fn(&str, &mut json::Reader<'_>) -> Result<Self, JsonError>,
            ) -> Result<Self, JsonError> {
                let mut r = json::Reader::new(data.unwrap_or("{}"));
                let event = read(type_name, &mut r)?;
                r.end()?;
                Ok(event)
            }
        }
    };
    (@all $( $(#[$doc:meta])* $variant:ident($payload:ty) = $name:literal, )*) => {
        /// A typed event payload, keyed by the envelope's `type`.
        ///
        /// Equal means the same `type` and payload, whether held typed or
        /// as text ([`Event::Unknown`] of a known type equals the typed
        /// event its text decodes to).
        #[derive(Clone, Debug)]
        pub enum Event {
            $( $(#[$doc])* $variant($payload), )*
            /// A type this version does not know, or an event a client
            /// keeps as text: every one read with [`json::from_str_opaque`]
            /// (logs), and the other scopes' types read by [`Envelope`]'s
            /// `FromJson` (see `events!`).
            Unknown {
                /// The wire `type`.
                type_name: String,
                /// The wire `data` (compacted). Decode it, if needed, with
                /// [`Event::read_data`].
                data: RawJson,
            },
        }

        impl PartialEq for Event {
            fn eq(&self, other: &Self) -> bool {
                match (self, other) {
                    $( (Event::$variant(a), Event::$variant(b)) => a == b, )*
                    (
                        Event::Unknown { type_name: a, data: x },
                        Event::Unknown { type_name: b, data: y },
                    ) => a == b && x == y,
                    (Event::Unknown { type_name, data }, typed)
                    | (typed, Event::Unknown { type_name, data }) => {
                        type_name == typed.type_name()
                            && Event::read_data(type_name, Some(data.as_str())).is_ok_and(|e| &e == typed)
                    }
                    _ => false,
                }
            }
        }

        impl Event {
            /// Every wire `type` this version knows.
            pub const TYPE_NAMES: &'static [&'static str] = &[$( $name ),*];

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

            /// Decodes `data` (raw JSON, `None` when absent) for a wire `type`
            /// with the client's reader ([`Event::read_data`]).
            pub fn decode(type_name: &str, data: Option<&str>) -> Result<Self, serde_json::Error> {
                Self::read_data(type_name, data).map_err(serde::de::Error::custom)
            }

            /// Decodes `data` with serde's derived readers: what
            /// [`Envelope`]'s `Deserialize` uses, so serde_json's reading
            /// is a check on the client's, not a copy of it.
            pub(crate) fn decode_serde(type_name: &str, data: Option<&str>) -> Result<Self, serde_json::Error> {
                let data = data.unwrap_or("{}");
                Ok(match type_name {
                    $( $name => Event::$variant(serde_json::from_str(data)?), )*
                    other => Event::Unknown {
                        type_name: other.to_owned(),
                        data: serde_json::from_str(data)?,
                    },
                })
            }

            /// [`Event::decode`] with the client's small reader ([`crate::json`]).
            pub fn read_data(type_name: &str, data: Option<&str>) -> Result<Self, JsonError> {
                Self::read_whole(type_name, data, Self::read_value)
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

        // Every variant, and unknown types with any object as data.
        #[cfg(all(test, not(target_arch = "wasm32")))]
        impl json::arb::Arb for Event {
            fn arb() -> proptest::strategy::BoxedStrategy<Self> {
                use proptest::strategy::Strategy;
                proptest::strategy::Union::new(vec![
                    $( <$payload as json::arb::Arb>::arb().prop_map(Event::$variant).boxed(), )*
                    ("x\\.[a-z_]{1,8}", json::arb::json_object())
                        .prop_map(|(type_name, data)| Event::Unknown { type_name, data })
                        .boxed(),
                ])
                .boxed()
            }
        }
    };
}

events! {
  session {
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
  }
  logs {
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
}

wire_struct! {
    /// A payload with no fields.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Empty {}
}

wire_struct! {
    /// `{reason}`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct WithReason {
        /// Why.
        reason: String = default,
    }
}

wire_struct! {
    /// `session.created`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SessionCreated {
        /// Human title.
        title: String = default,
    }
}

wire_struct! {
    /// `turn.started`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TurnStarted {
        /// The turn.
        turn_id: String,
        /// The user message that started it.
        input_message_id: String = default,
    }
}

wire_enum! {
    /// Who wrote a message.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Role {
        /// The person.
        User = "user",
        /// The agent.
        Assistant = "assistant",
    }
}

wire_struct! {
    /// `message.committed`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct MessageCommitted {
        /// The message.
        message_id: String,
        /// Its turn.
        turn_id: String = default,
        /// Author.
        role: Role,
        /// Whole text.
        text: String = default,
    }
}

wire_struct! {
    /// `tool.started`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ToolStarted {
        /// The turn.
        turn_id: String = default,
        /// The tool call.
        call_id: String,
        /// Tool name, e.g. `shell`.
        name: String = default,
        /// Tool input, any JSON.
        input: RawJson = default,
    }
}

wire_enum! {
    /// Outcome of a tool call.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum ToolStatus {
        /// Succeeded.
        Ok = "ok",
        /// Failed.
        Error = "error",
    }
}

wire_struct! {
    /// `tool.completed`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ToolCompleted {
        /// The turn.
        turn_id: String = default,
        /// The tool call.
        call_id: String,
        /// Outcome.
        status: ToolStatus,
        /// Tool output text.
        output: String = default,
    }
}

wire_struct! {
    /// `question.asked`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct QuestionAsked {
        /// The turn.
        turn_id: String = default,
        /// The question.
        question_id: String,
        /// What is asked.
        prompt: String = default,
        /// Answer choices; empty for free text.
        options: Vec<String> = default,
    }
}

wire_struct! {
    /// `question.answered`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct QuestionAnswered {
        /// The question.
        question_id: String,
        /// The answer given.
        answer: String = default,
    }
}

wire_struct! {
    /// `question.declined`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct QuestionDeclined {
        /// The question.
        question_id: String,
        /// Why, e.g. `orphaned`.
        reason: String = default,
    }
}

wire_struct! {
    /// `turn.completed` and `turn.cancelled`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TurnRef {
        /// The turn.
        turn_id: String,
    }
}

wire_struct! {
    /// `turn.failed`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TurnFailed {
        /// The turn.
        turn_id: String,
        /// Why, e.g. `worker_restart`.
        reason: String = default,
    }
}

/// The reason a turn fails when its worker died.
pub const REASON_WORKER_RESTART: &str = "worker_restart";

wire_struct! {
    /// `hello`: first frame of every stream.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Hello {
        /// The log's epoch.
        epoch: String,
        /// Durable head of the scope (row id on the global stream).
        head: u64,
        /// The runtime process run.
        boot_id: String = default,
    }
}

wire_struct! {
    /// `heartbeat`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Heartbeat {
        /// Durable head of the scope.
        head: u64,
    }
}

wire_struct! {
    /// `turn.delta`: live assistant text.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TurnDelta {
        /// The turn.
        turn_id: String = default,
        /// The assistant message being written.
        message_id: String = default,
        /// Offset in Unicode scalar values from the start of the message text.
        offset: u64,
        /// The appended text.
        text: String,
    }
}

wire_struct! {
    /// `turn.tool_progress` (droppable).
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ToolProgress {
        /// The turn.
        turn_id: String = default,
        /// The tool call.
        call_id: String,
        /// Free-form progress text.
        progress: String = default,
    }
}

wire_struct! {
    /// `live_turn.snapshot`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct LiveTurnSnapshot {
        /// The running turn, or `null` when none runs.
        live_turn: Option<LiveTurn> = default,
    }
}

wire_struct! {
    /// `tasks.snapshot` and the `tasks` part of a replay page.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TasksSnapshot {
        /// Higher or equal replaces.
        version: u64,
        /// Every task of the session.
        tasks: Vec<Task> = default,
        /// Idle between turns but waiting on these tasks.
        background_wait: Option<BackgroundWait> = default,
    }
}

wire_struct! {
    /// A background task (can span turns).
    #[derive(Clone, Debug, PartialEq)]
    pub struct Task {
        /// The task.
        task_id: String,
        /// Human title.
        title: String = default,
        /// Lifecycle state.
        state: TaskState,
        /// The process it runs, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        process_id: Option<String> = default,
        /// When it started.
        #[serde(skip_serializing_if = "Option::is_none")]
        started_at: Option<String> = default,
        /// When it ended.
        #[serde(skip_serializing_if = "Option::is_none")]
        ended_at: Option<String> = default,
        /// Free-form detail.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String> = default,
    }
}

wire_enum! {
    /// Task lifecycle.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum TaskState {
        /// Waiting to run.
        Queued = "queued",
        /// Running.
        Running = "running",
        /// Done, fine.
        Succeeded = "succeeded",
        /// Done, failed.
        Failed = "failed",
        /// Stopped.
        Cancelled = "cancelled",
    }
}

wire_struct! {
    /// The session waits on background tasks between turns.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct BackgroundWait {
        /// The tasks waited on.
        task_ids: Vec<String>,
        /// Since when.
        since: String = default,
    }
}
