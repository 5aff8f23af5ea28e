//! Rules of the runtime that no other test states on its own: droppable
//! events dropped under load and counted; `after_seq` on the global
//! endpoint is a row id; a replay starts no agent and re-runs no tool;
//! `live_turn.tools` after a reconnect, from the server's own answers;
//! closing a stream never cancels a turn.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::Event;
use replay_server::LagPolicy;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A test server on SQLite, or on a fresh Postgres database (`None`: no
/// `REPLAY_TEST_POSTGRES`, the test is skipped).
async fn start(pg: bool, f: impl FnOnce(&mut replay_server::Config)) -> Option<Server> {
    cluster_support::server_on(pg, "rules", f).await
}

/// Runs `$body(pg)` as a SQLite test and a Postgres one.
macro_rules! on_both {
    ($body:ident, $sqlite:ident, $pg:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $body(false).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $pg() {
            $body(true).await;
        }
    };
}

async fn comms(s: &Server) -> Value {
    s.get("/v1/diagnostics/comms").await.1
}

on_both!(
    dropped,
    the_server_drops_droppable_events_under_load_and_counts_them,
    the_server_drops_droppable_events_under_load_and_counts_them_pg
);

async fn dropped(pg: bool) {
    // Eight frames per subscriber; a stream whose reader stopped keeps its
    // durable frames coming in order (skip policy) and is not timed out.
    let Some(s) = start(pg, |c| {
        c.subscriber_buffer = 8;
        c.lag_policy = LagPolicy::Skip;
        c.write_timeout_ms = 60_000;
        c.socket_send_buffer_bytes = 4096;
    })
    .await
    else {
        return;
    };
    let addr = s.running.as_ref().unwrap().addr();
    // The first tool call of a fresh server runs process `proc_1`: its log
    // exists before the call, so a reader can stop on it beforehand.
    let (st, _) = s
        .post(
            "/v1/admin/events",
            json!({"scope": "process", "scope_id": "proc_1", "type": "x.fill",
                   "data": {"pad": "x".repeat(100)}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let _stopped = unread_stream(addr, "/v1/processes/proc_1/events", 4096).await;
    // Load: durable frames until its socket and its buffer are full.
    for _ in 0..40 {
        let (st, _) = s
            .post(
                "/v1/admin/events",
                json!({"scope": "process", "scope_id": "proc_1", "type": "x.fill",
                       "data": {"pad": "y".repeat(40_000)}}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED);
    }
    let before = comms(&s).await;
    assert_eq!(before["dropped"], 0, "{before}");
    assert!(before["skipped_durable"].as_u64().unwrap() > 0, "{before}");
    // The tool's five `process.output` samples are droppable: dropped for
    // the stopped reader, and counted.
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "/tool").await;
    s.wait_turn_end(&sid, &turn).await;
    let after = comms(&s).await;
    assert_eq!(after["dropped"], 5, "{after}");
    // Nothing is lost for good: the process log is the authoritative output.
    let (st, log) = s.get("/v1/processes/proc_1/log").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(log["text"].as_str().unwrap().lines().count(), 5, "{log}");
}

on_both!(
    global_after_seq,
    after_seq_on_the_global_endpoint_is_a_row_id,
    after_seq_on_the_global_endpoint_is_a_row_id_pg
);

async fn global_after_seq(pg: bool) {
    let Some(s) = start(pg, |_| {}).await else {
        return;
    };
    // Two logs interleaved: their seqs are 1..=3, the row ids go further.
    for _ in 0..3 {
        s.append("team", "ga", 1).await;
        s.append("team", "gb", 1).await;
    }
    let (_, all) = s.get("/v1/events?after_id=0").await;
    let ids: Vec<u64> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    let cut = ids[ids.len() - 3];
    // A row id, not a seq: after_seq=cut gives exactly the rows above it.
    let (st, page) = s.get(&format!("/v1/events?after_seq={cut}")).await;
    assert_eq!(st, StatusCode::OK, "{page}");
    let got: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert_eq!(got, ids[ids.len() - 2..], "{page}");
    // The stream too, and after_seq wins over Last-Event-ID there.
    let mut sse = s
        .stream(&format!("/v1/events?after_seq={cut}"), Some("1"))
        .await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let f = sse.next(Duration::from_secs(5)).await.expect("a frame");
        if let Frame::Event {
            id: Some(line),
            env,
            ..
        } = &f
        {
            // The frame's `id:` line is the row id.
            assert_eq!(*line, env.id.unwrap().to_string());
            seen.push(env.id.unwrap());
        }
    }
    assert_eq!(seen, ids[ids.len() - 2..]);
    // A row id above the last is ahead, as any cursor.
    let last = ids.last().unwrap();
    let (st, v) = s.get(&format!("/v1/events?after_seq={}", last + 100)).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
}

/// What would change if something ran: the session's head, the global
/// head, the processes and their logs, the running turns.
async fn footprint(s: &Server, sid: &str) -> Value {
    let (_, replay) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    let (_, diag) = s.get("/v1/diagnostics").await;
    let (_, procs) = s.get("/v1/diagnostics/processes").await;
    let mut logs = Vec::new();
    for p in procs["processes"].as_array().unwrap() {
        let id = p["process_id"].as_str().unwrap();
        logs.push(s.get(&format!("/v1/processes/{id}/log")).await.1);
    }
    json!({
        "session_head": replay["head"],
        "global_head": diag["head"],
        "events": diag["events"],
        "running_turns": diag["running_turns"],
        "processes": procs,
        "logs": logs,
    })
}

on_both!(
    replay_runs_nothing,
    replay_starts_no_agent_and_reruns_no_tool,
    replay_starts_no_agent_and_reruns_no_tool_pg
);

async fn replay_runs_nothing(pg: bool) {
    let Some(s) = start(pg, |_| {}).await else {
        return;
    };
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "/tool /ask").await;
    let asked = s
        .wait_event(&format!("sessions/{sid}"), |e| {
            matches!(e.event, Event::QuestionAsked(_))
        })
        .await;
    let Event::QuestionAsked(q) = &asked.event else {
        unreachable!()
    };
    let qid = q.question_id.clone();
    s.post(
        &format!("/v1/sessions/{sid}/questions/{qid}/answer"),
        json!({"answer": "yes"}),
    )
    .await;
    s.wait_turn_end(&sid, &turn).await;
    // Restart too: what the new worker is handed is the store, never work.
    s.fault(json!({"kind": "restart_worker"})).await;
    let before = footprint(&s, &sid).await;
    assert_eq!(before["running_turns"], 0);
    let head = before["session_head"].as_u64().unwrap();
    for after in [0, 1, head / 2, head] {
        let (st, page) = s
            .get(&format!("/v1/sessions/{sid}/replay?after_cursor={after}"))
            .await;
        assert_eq!(st, StatusCode::OK, "{page}");
        assert!(page["live_turn"].is_null());
        s.get(&format!(
            "/v1/sessions/{sid}/replay?after_cursor={after}&limit=1"
        ))
        .await;
        s.get(&format!("/v1/sessions/{sid}/events?after_seq={after}"))
            .await;
        s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    }
    // A replaying stream, read to its end.
    let mut sse = s
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    sse.until(Duration::from_secs(5), |f| is_type(f, "tasks.snapshot"))
        .await
        .expect("the replay ran");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = footprint(&s, &sid).await;
    assert_eq!(before, after, "a replay wrote or ran something");
}

on_both!(
    live_tools,
    live_turn_tools_after_a_reconnect_come_from_the_server,
    live_turn_tools_after_a_reconnect_come_from_the_server_pg
);

async fn live_tools(pg: bool) {
    let Some(s) = start(pg, |c| c.delta_ms = 40).await else {
        return;
    };
    let sid = s.create_session().await;
    s.send(&sid, "m1", "/tool /long 300").await;
    let started = s
        .wait_event(&format!("sessions/{sid}"), |e| {
            matches!(e.event, Event::ToolStarted(_))
        })
        .await;
    let Event::ToolStarted(tool) = &started.event else {
        unreachable!()
    };
    let call_id = tool.call_id.clone();
    // A first stream, closed mid-tool.
    let mut first = s
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    first
        .until(Duration::from_secs(5), |f| is_type(f, "live_turn.snapshot"))
        .await
        .expect("a snapshot");
    drop(first);
    // The reconnect: the stream's snapshot after its backlog, and the
    // replay answer, both name the running tool.
    let mut again = s
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    let snap = again
        .until(Duration::from_secs(5), |f| is_type(f, "live_turn.snapshot"))
        .await
        .expect("a snapshot on reconnect");
    let Event::LiveTurnSnapshot(snap) = &snap.env().unwrap().event else {
        unreachable!()
    };
    let lt = snap.live_turn.as_ref().expect("the turn is live");
    assert_eq!(lt.tools.len(), 1, "{lt:?}");
    assert_eq!(lt.tools[0].call_id, call_id);
    assert_eq!(lt.tools[0].name, "shell");
    assert_eq!(lt.tools[0].state, "running");
    let (_, replay) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    let tools = &replay["live_turn"]["tools"];
    assert_eq!(tools[0]["call_id"], call_id.as_str(), "{replay}");
    assert_eq!(tools[0]["state"], "running");
    // Once the tool completed (the reply still streaming), a reconnect's
    // answer says so.
    s.wait_event(&format!("sessions/{sid}"), |e| {
        matches!(e.event, Event::ToolCompleted(_))
    })
    .await;
    let (_, replay) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert_eq!(replay["live_turn"]["tools"][0]["state"], "ok", "{replay}");
    assert_eq!(replay["live_turn"]["tools"][0]["progress"], "5/5");
}

on_both!(
    closing,
    closing_a_stream_never_cancels,
    closing_a_stream_never_cancels_pg
);

async fn closing(pg: bool) {
    let Some(s) = start(pg, |c| c.delta_ms = 10).await else {
        return;
    };
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "/long 300 /tool").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut closed = 0;
    // Streams of every kind opened and closed while the turn runs, and
    // every stream ended by the server.
    while closed < 6 && Instant::now() < deadline {
        for path in [
            format!("/v1/sessions/{sid}/events?after_seq=0"),
            format!("/v1/stream?sub=session:{sid}:0"),
            "/v1/events?after_id=0".to_owned(),
        ] {
            let mut sse = s.stream(&path, None).await;
            sse.until(Duration::from_secs(5), |f| is_type(f, "hello"))
                .await
                .expect("hello");
            drop(sse);
            closed += 1;
        }
        s.fault(json!({"kind": "close_streams"})).await;
    }
    assert!(closed >= 6);
    let end = s.wait_turn_end(&sid, &turn).await;
    assert!(
        matches!(end.event, Event::TurnCompleted(_)),
        "the turn ran to its end: {end:?}"
    );
    let events = s.events(&format!("sessions/{sid}")).await;
    assert!(!events.iter().any(|e| matches!(
        &e.event,
        Event::TurnCancelled(_) | Event::QuestionDeclined(_)
    )));
}
