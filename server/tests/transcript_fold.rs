//! `GET /v1/sessions/{id}/transcript` folds the log with the client's own
//! session fold (PROTOCOL.md §7): one card per tool call, at its first
//! `tool.started`; a `tool.completed` without a card adds none.

mod common;

use common::*;
use replay_core::protocol::TranscriptItem;
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn append(s: &Server, sid: &str, ty: &str, data: Value) {
    let (st, v) = s
        .post(
            "/v1/admin/events",
            json!({"scope": "session", "scope_id": sid, "type": ty, "data": data}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

fn tool(call_id: &str, name: &str, status: &str, output: Option<&str>) -> TranscriptItem {
    TranscriptItem::Tool {
        call_id: call_id.into(),
        turn_id: "t1".into(),
        name: name.into(),
        status: status.into(),
        output: output.map(Into::into),
        input: replay_core::json::RawJson::empty_object(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_tool_started_keeps_one_card() {
    let s = server().await;
    let sid = "ses_repeat";
    let started = |name: &str| json!({"turn_id": "t1", "call_id": "c1", "name": name, "input": {}});
    append(&s, sid, "tool.started", started("shell")).await;
    append(&s, sid, "tool.started", started("shell")).await;
    assert_eq!(
        s.transcript(sid).await.items,
        vec![tool("c1", "shell", "running", None)]
    );
    append(
        &s,
        sid,
        "tool.completed",
        json!({"turn_id": "t1", "call_id": "c1", "status": "ok", "output": "done"}),
    )
    .await;
    // A start after the completion neither adds a card nor reopens this one.
    append(&s, sid, "tool.started", started("other")).await;
    let t = s.transcript(sid).await;
    assert_eq!(t.items, vec![tool("c1", "shell", "ok", Some("done"))]);
    assert_eq!(t.cursor, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_tool_completed_adds_no_card() {
    let s = server().await;
    let sid = "ses_orphan";
    append(
        &s,
        sid,
        "tool.completed",
        json!({"turn_id": "t1", "call_id": "c9", "status": "error", "output": "x"}),
    )
    .await;
    append(&s, sid, "turn.completed", json!({"turn_id": "t1"})).await;
    let t = s.transcript(sid).await;
    assert_eq!(
        t.items,
        vec![TranscriptItem::TurnEnd {
            turn_id: "t1".into(),
            outcome: "completed".into(),
            reason: None,
        }]
    );
    assert_eq!(t.cursor, 2);
}
