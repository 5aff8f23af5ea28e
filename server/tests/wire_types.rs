//! Every event type of `docs/protocol.md` §3, as the real server writes it
//! (scripted agent, startup recovery, the admin append), fetched over HTTP
//! (JSON pages, replay, SSE frames) and read with the client's own reader
//! (`core::json`, what the wasm runs), checked against serde's reader.

mod common;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use replay_core::json::{self, FromJson};
use replay_core::protocol::{Envelope, Event, EventPage, ReplayPage, Transcript};
use replay_core::sse::{SseItem, SseParser};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::task::JoinHandle;

/// The event types §3 names, read from the document itself: the first cell
/// of its tables, and every dotted name in its prose (`a.b|c` is `a.b`, `a.c`).
fn section3_types() -> BTreeSet<String> {
    let doc = include_str!("../../docs/protocol.md");
    let start = doc.find("\n## 3.").expect("§3");
    let end = start + doc[start..].find("\n## 4.").expect("§4");
    let ticked = |text: &str| -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let (tables, prose): (Vec<&str>, Vec<&str>) =
        doc[start..end].lines().partition(|l| l.starts_with('|'));
    let mut out: BTreeSet<String> = tables
        .iter()
        .filter(|l| l.starts_with("| `"))
        .map(|l| ticked(l)[0].clone())
        .collect();
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    for t in ticked(&prose.join(" ")) {
        let name = t.split(' ').next().unwrap_or_default();
        if let Some((head, tails)) = name.split_once('.') {
            for tail in tails.split('|').filter(|t| word(head) && word(t)) {
                out.insert(format!("{head}.{tail}"));
            }
        }
    }
    out
}

/// Records the `data` of every frame of one SSE stream until aborted or ended.
fn record(s: &Server, path: &str) -> (Arc<Mutex<Vec<String>>>, JoinHandle<()>) {
    let (http, url) = (s.http.clone(), s.url(path));
    let frames = Arc::new(Mutex::new(Vec::new()));
    let out = frames.clone();
    let task = tokio::spawn(async move {
        let resp = http
            .get(url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("stream request");
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        while let Some(Ok(chunk)) = body.next().await {
            parser.push(&chunk, &mut |item| {
                if let SseItem::Event(ev) = item {
                    out.lock().unwrap().push(ev.data.clone());
                }
            });
        }
    });
    (frames, task)
}

async fn get_bytes(s: &Server, path: &str) -> Vec<u8> {
    let r = s.http.get(s.url(path)).send().await.expect("GET");
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    r.bytes().await.expect("body").to_vec()
}

/// Polls the session's durable events until one matches.
async fn wait_for(s: &Server, sid: &str, pred: impl Fn(&Event) -> bool) -> Envelope {
    s.wait_event(&format!("sessions/{sid}"), |e| pred(&e.event))
        .await
}

/// Reads a body with the client's reader; serde's reader must agree.
fn read<T: FromJson + DeserializeOwned + PartialEq + Debug>(bytes: &[u8]) -> T {
    let text = String::from_utf8_lossy(bytes);
    let ours: T = json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {text}"));
    let theirs: T = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(ours, theirs, "{text}");
    ours
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reads_every_section_3_type_the_server_writes() {
    let s = server_with(|c| {
        c.delta_ms = 10;
        c.bg_ms = 60_000;
    })
    .await;
    let sid = s.create_session().await;
    let (session_frames, session_task) = record(&s, &format!("/v1/sessions/{sid}/events"));

    // A tool (with its process and its output), a question, an answer.
    let t1 = s.send(&sid, "m1", "/long 20 /slow /tool /ask").await;
    let started = wait_for(&s, &sid, |e| matches!(e, Event::ToolStarted(_))).await;
    let Event::ToolStarted(tool) = &started.event else {
        unreachable!()
    };
    let pid = tool.input.to_value()["process_id"]
        .as_str()
        .expect("the scripted tool names its process")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s
        .http
        .get(s.url(&format!("/v1/processes/{pid}/events")))
        .send()
        .await
        .unwrap()
        .status()
        != StatusCode::OK
    {
        assert!(Instant::now() < deadline, "process {pid} never appeared");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (process_frames, process_task) = record(&s, &format!("/v1/processes/{pid}/events"));
    let asked = wait_for(&s, &sid, |e| matches!(e, Event::QuestionAsked(_))).await;
    let Event::QuestionAsked(q) = &asked.event else {
        unreachable!()
    };
    let (st, v) = s
        .post(
            &format!("/v1/sessions/{sid}/questions/{}/answer", q.question_id),
            json!({"answer": "yes"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.wait_turn_end(&sid, &t1).await;

    // A failed turn, a cancelled one.
    let t2 = s.send(&sid, "m2", "/fail").await;
    s.wait_turn_end(&sid, &t2).await;
    let t3 = s.send(&sid, "m3", "/slow /long 400").await;
    wait_for(
        &s,
        &sid,
        |e| matches!(e, Event::TurnStarted(t) if t.turn_id == t3),
    )
    .await;
    let (st, v) = s
        .post(&format!("/v1/sessions/{sid}/cancel"), json!({}))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    s.wait_turn_end(&sid, &t3).await;
    // Idle past the heartbeat interval.
    tokio::time::sleep(Duration::from_millis(700)).await;

    // A background task whose process runs, and a persisted question, when
    // the worker restarts and the session's provider cannot resume:
    // recovery fails the session, declines the question (no owner left),
    // fails the turn and the task, and reports.
    let t4 = s.send(&sid, "m4", "/bg /ask").await;
    wait_for(
        &s,
        &sid,
        |e| matches!(e, Event::QuestionAsked(q) if q.turn_id == t4),
    )
    .await;
    s.fault(json!({"kind": "provider_resume_fails", "session_id": sid}))
        .await;
    s.fault(json!({"kind": "restart_worker"})).await;
    s.wait_turn_end(&sid, &t4).await;

    // What nothing in the runtime writes yet: through the admin append.
    for (scope, scope_id, ty, data) in [
        ("session", sid.as_str(), "session.closed", json!({})),
        (
            "session",
            "ses_broken",
            "session.failed",
            json!({"reason": "r"}),
        ),
        (
            "team",
            "team_1",
            "team.message",
            json!({"from": "a", "to": "b", "text": "é"}),
        ),
        (
            "team",
            "team_1",
            "delivery.deferred",
            json!({"delivery_id": "d1", "to": "b", "reason": "busy"}),
        ),
        (
            "team",
            "team_1",
            "delivery.delivered",
            json!({"delivery_id": "d1", "to": "b"}),
        ),
        (
            "team",
            "team_1",
            "delivery.failed",
            json!({"delivery_id": "d2", "to": "c", "reason": "gone"}),
        ),
        (
            "worktree",
            "wt_1",
            "worktree.created",
            json!({"worktree_id": "wt_1"}),
        ),
        (
            "worktree",
            "wt_1",
            "worktree.claimed",
            json!({"worktree_id": "wt_1", "session_id": sid}),
        ),
        (
            "worktree",
            "wt_1",
            "worktree.released",
            json!({"worktree_id": "wt_1", "session_id": sid}),
        ),
        (
            "worktree",
            "wt_1",
            "worktree.removed",
            json!({"worktree_id": "wt_1"}),
        ),
    ] {
        let (st, v) = s
            .post(
                "/v1/admin/events",
                json!({"scope": scope, "scope_id": scope_id, "type": ty, "data": data}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    session_task.abort();
    process_task.abort();

    // Every durable event of every scope, from the global JSON pages.
    let mut envelopes = Vec::new();
    let mut after = 0;
    loop {
        let page: EventPage =
            read(&get_bytes(&s, &format!("/v1/events?after_id={after}&limit=50")).await);
        after = page.events.last().and_then(|e| e.id).unwrap_or(after);
        envelopes.extend(page.events);
        if !page.has_more {
            break;
        }
    }
    // The session's replay and transcript, as a client restoring reads them.
    let replay: ReplayPage =
        read(&get_bytes(&s, &format!("/v1/sessions/{sid}/replay?after_cursor=0")).await);
    assert!(!replay.history.is_empty());
    envelopes.extend(replay.history);
    let transcript: Transcript =
        read(&get_bytes(&s, &format!("/v1/sessions/{sid}/transcript")).await);
    assert!(!transcript.items.is_empty());
    // Every frame the streams sent, transient ones included.
    let frames: Vec<String> = [session_frames, process_frames]
        .iter()
        .flat_map(|f| f.lock().unwrap().clone())
        .collect();
    envelopes.extend(frames.iter().map(|f| read::<Envelope>(f.as_bytes())));

    let mut seen = BTreeSet::new();
    for e in &envelopes {
        // The envelope reader keeps the other scopes' types as text; the
        // client's reader types them on demand (`Event::read_data`).
        let typed = match &e.event {
            Event::Unknown { type_name, data } => Event::read_data(type_name, Some(data.as_str()))
                .unwrap_or_else(|err| panic!("the client cannot read `{type_name}`: {err}")),
            typed => typed.clone(),
        };
        if let Event::Unknown { type_name, .. } = &typed {
            panic!("the client did not know `{type_name}`");
        }
        seen.insert(typed.type_name().to_owned());
    }
    let want = section3_types();
    let known: BTreeSet<String> = Event::TYPE_NAMES.iter().map(|t| t.to_string()).collect();
    assert_eq!(want, known, "§3 and the client's event types");
    let missing: Vec<&String> = want.difference(&seen).collect();
    assert!(missing.is_empty(), "not written by the server: {missing:?}");
}
