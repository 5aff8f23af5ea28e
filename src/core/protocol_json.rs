//! [`FromJson`] for the wire types the client reads: frames, pages, error
//! bodies. The field modes mirror the serde attributes in `protocol.rs`
//! (`req` = no `#[serde(default)]`; `def` = defaulted, or an `Option`).

use std::borrow::Cow;

use super::json::{self, FromJson, JsonError, RawJson, Reader};
use super::protocol::*;
use crate::{json_enum, json_struct};

json_enum!(Scope { Session = "session", Team = "team", Process = "process", Worktree = "worktree", System = "system" });
json_enum!(Role { User = "user", Assistant = "assistant" });
json_enum!(ToolStatus { Ok = "ok", Error = "error" });
json_enum!(LiveTurnState {
    Sampling = "sampling",
    ToolRunning = "tool_running",
    WaitingForAnswer = "waiting_for_answer",
});
json_enum!(TaskState {
    Queued = "queued",
    Running = "running",
    Succeeded = "succeeded",
    Failed = "failed",
    Cancelled = "cancelled",
});
json_enum!(OutputStream { Stdout = "stdout", Stderr = "stderr" });

json_struct!(Empty {});
json_struct!(WithReason { reason: def });
json_struct!(SessionCreated { title: def });
json_struct!(TurnStarted {
    turn_id: req,
    input_message_id: def
});
json_struct!(MessageCommitted {
    message_id: req,
    turn_id: def,
    role: req,
    text: def
});
json_struct!(ToolStarted {
    turn_id: def,
    call_id: req,
    name: def,
    input: def
});
json_struct!(ToolCompleted {
    turn_id: def,
    call_id: req,
    status: req,
    output: def
});
json_struct!(QuestionAsked {
    turn_id: def,
    question_id: req,
    prompt: def,
    options: def
});
json_struct!(QuestionAnswered {
    question_id: req,
    answer: def
});
json_struct!(QuestionDeclined {
    question_id: req,
    reason: def
});
json_struct!(TurnRef { turn_id: req });
json_struct!(TurnFailed {
    turn_id: req,
    reason: def
});
json_struct!(Hello {
    epoch: req,
    head: req,
    boot_id: def
});
json_struct!(Heartbeat { head: req });
json_struct!(TurnDelta {
    turn_id: def,
    message_id: def,
    offset: req,
    text: req
});
json_struct!(ToolProgress {
    turn_id: def,
    call_id: req,
    progress: def
});
json_struct!(LiveTurnSnapshot { live_turn: def });
json_struct!(LiveTurn {
    turn_id: req,
    message_id: def,
    rev: req,
    state: req,
    text: def,
    text_offset: def,
    tools: def,
    pending_question: def,
});
json_struct!(LiveTool {
    call_id: req,
    name: def,
    state: def,
    progress: def
});
json_struct!(PendingQuestion {
    question_id: req,
    prompt: def,
    options: def
});
json_struct!(TasksSnapshot {
    version: req,
    tasks: def,
    background_wait: def
});
json_struct!(Task {
    task_id: req,
    title: def,
    state: req,
    process_id: def,
    started_at: def,
    ended_at: def,
    detail: def,
});
json_struct!(BackgroundWait {
    task_ids: req,
    since: def
});
json_struct!(ProcessStarted {
    process_id: req,
    command: def
});
json_struct!(ProcessExited { code: req });
json_struct!(ProcessOutput {
    stream: req,
    offset: req,
    text: req
});
json_struct!(TeamMessage {
    from: req,
    to: req,
    text: req
});
json_struct!(Delivery {
    delivery_id: req,
    to: def,
    reason: def
});
json_struct!(Worktree {
    worktree_id: req,
    session_id: def
});
json_struct!(SystemStarted { boot_id: req });
json_struct!(SystemRecovered { summary: def });
json_struct!(ReplayPage {
    epoch: req,
    boot_id: def,
    cursor: req,
    head: req,
    has_more: def,
    history: def,
    live_turn: def,
    tasks: def,
});
json_struct!(EventPage {
    epoch: req,
    head: req,
    events: def,
    has_more: def
});
json_struct!(ErrorBody {
    error: req,
    message: def,
    epoch: def,
    head: def
});
json_struct!(SessionCreatedReply {
    session_id: req,
    epoch: req
});
json_struct!(MessageAccepted { turn_id: req });
json_struct!(CancelAccepted { turn_id: def });
json_struct!(PendingPrompt {
    question_id: req,
    prompt: req,
    options: req,
    persisted: req
});

impl FromJson for TranscriptItem {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        // The same flat read as the serde impl in protocol.rs.
        let mut kind: Option<Cow<'_, str>> = None;
        let mut f: [Option<String>; 10] = Default::default();
        let mut role = None;
        const KEYS: [&str; 10] = [
            "message_id",
            "turn_id",
            "text",
            "call_id",
            "name",
            "status",
            "output",
            "outcome",
            "reason",
            "",
        ];
        r.object(&mut |r, key| {
            if key == "kind" {
                kind = Some(r.string()?);
            } else if key == "role" {
                role = Some(Role::read(r)?);
            } else if let Some(i) = KEYS.iter().position(|k| *k == key) {
                f[i] = FromJson::read(r)?;
            } else {
                r.skip()?;
            }
            Ok(())
        })?;
        let [message_id, turn_id, text, call_id, name, status, output, outcome, reason, _] = f;
        let req = |v: Option<String>, field| v.ok_or(JsonError::Missing(field));
        let turn_id = req(turn_id, "turn_id")?;
        Ok(match kind.as_deref() {
            Some("message") => TranscriptItem::Message {
                message_id: req(message_id, "message_id")?,
                turn_id,
                role: role.ok_or(JsonError::Missing("role"))?,
                text: req(text, "text")?,
            },
            Some("tool") => TranscriptItem::Tool {
                call_id: req(call_id, "call_id")?,
                turn_id,
                name: req(name, "name")?,
                status: req(status, "status")?,
                output,
            },
            Some("turn_end") => TranscriptItem::TurnEnd {
                turn_id,
                outcome: req(outcome, "outcome")?,
                reason,
            },
            Some(_) => return Err(JsonError::Type(0, "a known item kind")),
            None => return Err(JsonError::Missing("kind")),
        })
    }
}

/// Whether to keep this event's payload as text: the reader says so, and the
/// machine needs to look inside `hello` and `heartbeat` whatever the target.
fn opaque(r: &Reader<'_>, type_name: &str) -> bool {
    r.opaque_events() && !matches!(type_name, "hello" | "heartbeat")
}

impl FromJson for Envelope {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let mut id = None;
        let mut scope = None;
        let mut scope_id = String::new();
        let mut seq = None;
        let mut after_seq = None;
        let mut ty: Option<Cow<'_, str>> = None;
        let mut critical = None;
        let mut ts = String::new();
        let mut data = None;
        let mut event = None;
        r.object(&mut |r, key| {
            match key {
                "id" => id = FromJson::read(r)?,
                "scope" => scope = Some(FromJson::read(r)?),
                "scope_id" => scope_id = FromJson::read(r)?,
                "seq" => seq = FromJson::read(r)?,
                "after_seq" => after_seq = FromJson::read(r)?,
                "type" => ty = Some(r.string()?),
                "critical" => critical = FromJson::read(r)?,
                "ts" => ts = FromJson::read(r)?,
                // Servers write `type` first: decode in place, one pass. If
                // `type` comes later, keep the text and decode at the end.
                "data" if r.null() => {}
                "data" => match &ty {
                    Some(t) if !opaque(r, t) => event = Some(Event::read_value(t, r)?),
                    _ => data = Some(r.raw()?),
                },
                _ => r.skip()?,
            }
            Ok(())
        })?;
        let ty = ty.ok_or(JsonError::Missing("type"))?;
        Ok(Envelope {
            id,
            scope: scope.ok_or(JsonError::Missing("scope"))?,
            scope_id,
            seq,
            after_seq,
            // Every durable event is critical, whatever the wire says.
            critical: critical.unwrap_or(true) || seq.is_some(),
            ts,
            event: match event {
                Some(e) => e,
                None if opaque(r, &ty) => Event::Unknown {
                    type_name: ty.into_owned(),
                    data: match data {
                        Some(text) => json::from_str(text)?,
                        None => RawJson::empty_object(),
                    },
                },
                None => Event::read_data(&ty, data)?,
            },
        })
    }
}
