//! Restart: the real binary is killed during a turn that holds a running
//! process, and during one that waits for an answer, then started again on
//! the same file. Recovery must be on disk and visible; the epoch stays, the
//! boot id changes, `live_turn` is gone; the running turn is failed, the
//! waiting one keeps waiting and goes on when answered. Also: SIGTERM shuts
//! down gracefully.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Event, TaskState, REASON_WORKER_RESTART};
use reqwest::StatusCode;
use serde_json::Value;

struct Proc {
    child: Child,
    server: Server,
}

/// Starts the binary and reads its one stdout line for the address.
async fn spawn_binary(db: &str) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replay-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--db",
            db,
            "--delta-ms",
            "20",
            "--heartbeat-ms",
            "500",
            "--bg-ms",
            "60000",
            "--ask-persist-ms",
            "100",
            "--seed",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replay-server");
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let base = line
        .trim()
        .strip_prefix("replay-server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"));
    Proc {
        child,
        server: Server::remote(base),
    }
}

async fn wait_until<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "condition not reached");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_turn_then_recover_on_same_file() {
    let dir =
        std::env::temp_dir().join(format!("replay-restart-{}", replay_server::util::entropy()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("replay.sqlite").to_str().unwrap().to_owned();

    let mut first = spawn_binary(&db).await;
    let s = &first.server;
    // s1: streams, starts a background process, then asks and waits.
    let s1 = s.create_session().await;
    let t1 = s.send(&s1, "m1", "go /long 200 /bg /ask").await;
    // s2: inside a slow tool call when the process dies.
    let s2 = s.create_session().await;
    let t2 = s.send(&s2, "m2", "build /tool /slow /long 40").await;
    s.wait_event(&format!("sessions/{s1}"), |e| {
        matches!(e.event, Event::QuestionAsked(_))
    })
    .await;
    s.wait_event(&format!("sessions/{s2}"), |e| {
        matches!(e.event, Event::ToolStarted(_))
    })
    .await;
    wait_until(|| async {
        let (_, p) = s.get("/v1/diagnostics/processes").await;
        p["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["state"] == "running")
            .count()
            == 2
    })
    .await;
    let (_, before) = s.get(&format!("/v1/sessions/{s1}/replay")).await;
    assert!(
        before["live_turn"]["pending_question"].is_object(),
        "{before}"
    );
    assert_eq!(before["tasks"]["tasks"][0]["state"], "running");
    let epoch = before["epoch"].as_str().unwrap().to_owned();
    let boot = before["boot_id"].as_str().unwrap().to_owned();
    let head_before = before["head"].as_u64().unwrap();
    let version_before = before["tasks"]["version"].as_u64().unwrap();

    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = spawn_binary(&db).await;
    let s = &second.server;
    let (st, after) = s.get(&format!("/v1/sessions/{s1}/replay")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(after["epoch"], epoch.as_str(), "epoch survives a restart");
    assert_ne!(after["boot_id"], boot.as_str(), "new boot id");
    assert!(after["live_turn"].is_null(), "no live tail after a restart");
    assert_eq!(
        after["head"].as_u64().unwrap(),
        head_before,
        "nothing ends the waiting turn's session"
    );
    assert!(after["tasks"]["version"].as_u64().unwrap() > version_before);
    assert_eq!(after["tasks"]["tasks"][0]["state"], "failed");
    assert!(after["tasks"]["background_wait"].is_null());

    // Recovery events, in the sessions' own logs. The turn waiting for an
    // answer keeps waiting: its question is not declined, it is not failed.
    let ev1 = s.events(&format!("sessions/{s1}")).await;
    assert!(!ev1
        .iter()
        .any(|e| matches!(&e.event, Event::QuestionDeclined(_) | Event::TurnFailed(_))));
    let ev2 = s.events(&format!("sessions/{s2}")).await;
    assert!(ev2.iter().any(|e| matches!(&e.event, Event::ToolCompleted(t) if t.status == replay_core::protocol::ToolStatus::Error)));
    assert!(ev2
        .iter()
        .any(|e| matches!(&e.event, Event::TurnFailed(t) if t.turn_id == t2)));
    let (_, procs) = s.get("/v1/diagnostics/processes").await;
    let procs = procs["processes"].as_array().unwrap().clone();
    assert_eq!(procs.len(), 2);
    for p in &procs {
        assert_eq!(p["state"], "failed", "{p}");
        let id = p["process_id"].as_str().unwrap();
        let pe = s.events(&format!("processes/{id}")).await;
        assert!(
            matches!(&pe.last().unwrap().event, Event::ProcessFailed(r) if r.reason == REASON_WORKER_RESTART)
        );
    }
    let sys = s.events("system").await;
    let boots = sys
        .iter()
        .filter(|e| matches!(e.event, Event::SystemStarted(_)))
        .count();
    assert_eq!(boots, 2);
    let Event::SystemRecovered(rec) = &sys.last().unwrap().event else {
        panic!("system.recovered last")
    };
    assert_eq!(
        rec.summary.to_value()["turns_failed"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (_, diag) = s.get("/v1/diagnostics/recovery").await;
    assert_eq!(diag["turns_failed"].as_array().unwrap().len(), 1);
    assert_eq!(diag["turns_waiting"][0]["turn_id"], t1.as_str(), "{diag}");
    assert_eq!(diag["questions_declined"].as_array().unwrap().len(), 0);
    assert_eq!(diag["processes_failed"].as_array().unwrap().len(), 2);
    assert_eq!(diag["tasks_failed"].as_array().unwrap().len(), 1);
    assert_eq!(diag["boot_id"], after["boot_id"]);

    // The transcript is consistent: partial text never promoted, the
    // failed turn ended, the question still pending.
    let (_, tr) = s.get(&format!("/v1/sessions/{s1}/transcript")).await;
    assert_eq!(tr["epoch"], epoch.as_str());
    assert_eq!(tr["cursor"], after["head"]);
    let items = tr["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["role"] != "assistant"), "{tr}");
    let prompts = tr["pending_prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 1, "{tr}");
    let qid = prompts[0]["question_id"].as_str().unwrap().to_owned();
    assert_eq!(tr["tasks"]["tasks"][0]["state"], "failed");
    let (_, tr2) = s.get(&format!("/v1/sessions/{s2}/transcript")).await;
    let items2 = tr2["items"].as_array().unwrap();
    assert_eq!(items2.last().unwrap()["reason"], REASON_WORKER_RESTART);
    let tool = tr2["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "tool")
        .unwrap();
    assert_eq!(tool["status"], "error");

    // A stream after the restart says so in hello; the runtime works again.
    let mut sse = s.stream(&format!("/v1/sessions/{s1}/events"), None).await;
    let hello = sse.until(SEC, |f| is_type(f, "hello")).await.unwrap();
    let Event::Hello(h) = &hello.env().unwrap().event else {
        unreachable!()
    };
    assert_eq!(h.boot_id, after["boot_id"].as_str().unwrap());
    assert_eq!(h.epoch, epoch);
    // Answered, the waiting turn goes on to its reply.
    let (st, ans) = s
        .post(
            &format!("/v1/sessions/{s1}/questions/{qid}/answer"),
            serde_json::json!({"answer": "yes"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{ans}");
    assert!(matches!(
        s.wait_turn_end(&s1, &t1).await.event,
        Event::TurnCompleted(_)
    ));
    let (_, tr) = s.get(&format!("/v1/sessions/{s1}/transcript")).await;
    assert_eq!(tr["pending_prompts"], Value::Array(vec![]));
    assert!(tr["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["role"] == "assistant"));
    let t3 = s.send(&s1, "m3", "still there?").await;
    assert!(matches!(
        s.wait_turn_end(&s1, &t3).await.event,
        Event::TurnCompleted(_)
    ));
    // A retry of a message from before the restart starts nothing new.
    assert_eq!(s.send(&s1, "m1", "go").await, t1);
    let (_, snap) = s.get(&format!("/v1/sessions/{s1}/replay")).await;
    assert!(snap["tasks"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["state"] != serde_json::to_value(TaskState::Running).unwrap()));

    // SIGTERM: graceful shutdown even with a stream open.
    let status = Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(st) = second.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "{exit:?}");
    drop(sse);
    let _ = std::fs::remove_dir_all(&dir);
}
