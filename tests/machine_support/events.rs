//! Builders for envelopes, SSE frames and pages used by the machine tests.

#![allow(dead_code)]

use replay_client::core::protocol::*;
use serde_json::json;

pub const SES: &str = "ses_1";

pub fn durable(seq: u64, event: Event) -> Envelope {
    Envelope::durable(
        1000 + seq,
        Scope::Session,
        SES.into(),
        seq,
        String::new(),
        event,
    )
}

pub fn transient(after_seq: u64, event: Event, critical: bool) -> Envelope {
    Envelope {
        id: None,
        scope: Scope::Session,
        scope_id: SES.into(),
        seq: None,
        after_seq: Some(after_seq),
        critical,
        ts: String::new(),
        event,
    }
}

pub fn ev(type_name: &str, data: serde_json::Value) -> Event {
    Event::decode(type_name, Some(&data.to_string())).expect("valid test event")
}

pub fn user_msg(seq: u64, mid: &str, text: &str) -> Envelope {
    durable(
        seq,
        ev(
            "message.committed",
            json!({"message_id": mid, "turn_id": "t", "role": "user", "text": text}),
        ),
    )
}

pub fn assistant_msg(seq: u64, turn: &str, mid: &str, text: &str) -> Envelope {
    durable(
        seq,
        ev(
            "message.committed",
            json!({"message_id": mid, "turn_id": turn, "role": "assistant", "text": text}),
        ),
    )
}

pub fn turn_started(seq: u64, turn: &str) -> Envelope {
    durable(
        seq,
        ev(
            "turn.started",
            json!({"turn_id": turn, "input_message_id": "u"}),
        ),
    )
}

pub fn turn_completed(seq: u64, turn: &str) -> Envelope {
    durable(seq, ev("turn.completed", json!({"turn_id": turn})))
}

pub fn turn_failed(seq: u64, turn: &str, reason: &str) -> Envelope {
    durable(
        seq,
        ev("turn.failed", json!({"turn_id": turn, "reason": reason})),
    )
}

pub fn tool_started(seq: u64, turn: &str, call: &str) -> Envelope {
    durable(
        seq,
        ev(
            "tool.started",
            json!({"turn_id": turn, "call_id": call, "name": "shell", "input": {"cmd": "ls"}}),
        ),
    )
}

pub fn tool_completed(seq: u64, turn: &str, call: &str, out: &str) -> Envelope {
    durable(
        seq,
        ev(
            "tool.completed",
            json!({"turn_id": turn, "call_id": call, "status": "ok", "output": out}),
        ),
    )
}

pub fn question_asked(seq: u64, turn: &str, q: &str) -> Envelope {
    durable(
        seq,
        ev(
            "question.asked",
            json!({"turn_id": turn, "question_id": q, "prompt": "Proceed?", "options": ["yes", "no"]}),
        ),
    )
}

pub fn question_answered(seq: u64, q: &str) -> Envelope {
    durable(
        seq,
        ev(
            "question.answered",
            json!({"question_id": q, "answer": "yes"}),
        ),
    )
}

pub fn hello(epoch: &str, head: u64, boot: &str) -> Envelope {
    transient(
        head,
        ev(
            "hello",
            json!({"epoch": epoch, "head": head, "boot_id": boot}),
        ),
        true,
    )
}

pub fn heartbeat(head: u64) -> Envelope {
    transient(head, ev("heartbeat", json!({"head": head})), true)
}

pub fn delta(after: u64, turn: &str, mid: &str, offset: u64, text: &str) -> Envelope {
    transient(
        after,
        ev(
            "turn.delta",
            json!({"turn_id": turn, "message_id": mid, "offset": offset, "text": text}),
        ),
        true,
    )
}

pub fn progress(after: u64, turn: &str, call: &str, p: &str) -> Envelope {
    transient(
        after,
        ev(
            "turn.tool_progress",
            json!({"turn_id": turn, "call_id": call, "progress": p}),
        ),
        false,
    )
}

pub fn tasks(after: u64, version: u64, n_running: usize) -> Envelope {
    let list: Vec<_> = (0..n_running)
        .map(|i| json!({"task_id": format!("task{i}"), "title": "build", "state": "running"}))
        .collect();
    transient(
        after,
        ev(
            "tasks.snapshot",
            json!({"version": version, "tasks": list, "background_wait": null}),
        ),
        true,
    )
}

pub fn live_snapshot(after: u64, live: Option<&LiveTurn>) -> Envelope {
    transient(
        after,
        Event::LiveTurnSnapshot(LiveTurnSnapshot {
            live_turn: live.cloned(),
        }),
        true,
    )
}

/// One SSE frame: durable events carry `id: <seq>`, transient ones none.
pub fn frame(env: &Envelope) -> String {
    let mut s = String::new();
    if let Some(seq) = env.seq {
        s.push_str(&format!("id: {seq}\n"));
    }
    s.push_str(&format!(
        "event: {}\ndata: {}\n\n",
        env.event.type_name(),
        env.to_json()
    ));
    s
}

pub fn frames(envs: &[Envelope]) -> String {
    envs.iter().map(frame).collect()
}

#[allow(clippy::too_many_arguments)] // mirrors the page's fields
pub fn replay_page(
    epoch: &str,
    boot: &str,
    after: u64,
    history: &[Envelope],
    head: u64,
    has_more: bool,
    live: Option<&LiveTurn>,
    tasks: Option<&TasksSnapshot>,
) -> Vec<u8> {
    let page = ReplayPage {
        epoch: epoch.into(),
        boot_id: boot.into(),
        cursor: history.last().and_then(|e| e.seq).unwrap_or(after),
        head,
        has_more,
        history: history.to_vec(),
        live_turn: live.cloned(),
        tasks: tasks.cloned(),
        older_cursor: None,
    };
    serde_json::to_vec(&page).unwrap()
}

/// A replay of `history` after cursor 0 in one last page, head `head`.
pub fn whole_page(history: &[Envelope], head: u64) -> Vec<u8> {
    use super::rig::{BOOT, EPOCH};
    replay_page(EPOCH, BOOT, 0, history, head, false, None, None)
}

pub fn event_page(epoch: &str, events: &[Envelope], head: u64, has_more: bool) -> Vec<u8> {
    let page = EventPage {
        epoch: epoch.into(),
        head,
        events: events.to_vec(),
        has_more,
    };
    serde_json::to_vec(&page).unwrap()
}

pub fn error_body(code: &str) -> Vec<u8> {
    error_body_with(code, code)
}

pub fn error_body_with(code: &str, message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"error": code, "message": message})).unwrap()
}

/// A sampling turn `t1` of message `m1` at `rev` with `text` so far.
pub fn live_turn(rev: u64, text: &str) -> LiveTurn {
    LiveTurn {
        turn_id: "t1".into(),
        message_id: "m1".into(),
        rev,
        state: LiveTurnState::Sampling,
        text: text.into(),
        text_offset: 0,
        tools: vec![],
        pending_question: None,
    }
}
