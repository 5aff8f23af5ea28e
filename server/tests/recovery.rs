//! Startup recovery as seed 004 describes it, on SQLite and on Postgres
//! (with `REPLAY_TEST_POSTGRES`; `cargo xtask test` sets it), through the
//! in-process worker restart (`restart_worker`: live state dropped, the
//! recovery pass run, a new boot id). A turn waiting for an answer keeps
//! waiting and goes on when answered; a provider that cannot resume fails
//! its session with the reason, and its question (no owner left) is
//! declined; deferred team deliveries are retried; worktree records are
//! normalised; the three diagnostics show it.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Event, REASON_WORKER_RESTART};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A test server on SQLite, or on a fresh Postgres database (`None`: no
/// Postgres given, the test is skipped). The lease is short: on Postgres
/// the turns of the worker before a restart are settled once it runs out.
async fn start(pg: bool) -> Option<Server> {
    cluster_support::server_on(pg, "recovery", |c| c.turn_lease_ms = 600).await
}

async fn restart(s: &Server) -> Value {
    let r = s.fault(json!({"kind": "restart_worker"})).await;
    assert_eq!(r["done"], true, "{r}");
    let (_, report) = s.get("/v1/diagnostics/recovery").await;
    report
}

/// The recovery report once it lists `turn_id` among the turns kept
/// waiting (on Postgres the turn is adopted once its lease ran out).
async fn waiting_in_report(s: &Server, turn_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = s.get("/v1/diagnostics/recovery").await;
        let found = r["turns_waiting"]
            .as_array()
            .is_some_and(|l| l.iter().any(|w| w["turn_id"] == turn_id));
        if found {
            return r;
        }
        assert!(Instant::now() < deadline, "never listed as waiting: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn question_of(events: &[replay_core::protocol::Envelope]) -> String {
    events
        .iter()
        .find_map(|e| match &e.event {
            Event::QuestionAsked(q) => Some(q.question_id.clone()),
            _ => None,
        })
        .expect("a question asked")
}

macro_rules! on_both {
    ($body:ident, $sqlite:ident, $pg:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $body(start(false).await.unwrap()).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $pg() {
            if let Some(s) = start(true).await {
                $body(s).await;
            }
        }
    };
}

on_both!(
    waiting_turn_body,
    a_turn_waiting_for_an_answer_keeps_waiting_across_a_restart_and_goes_on_when_answered,
    a_turn_waiting_for_an_answer_keeps_waiting_across_a_restart_and_goes_on_when_answered_pg
);

async fn waiting_turn_body(s: Server) {
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "please /ask").await;
    s.wait_event(&format!("sessions/{sid}"), |e| {
        matches!(e.event, Event::QuestionAsked(_))
    })
    .await;
    let qid = question_of(&s.events(&format!("sessions/{sid}")).await);
    restart(&s).await;
    // Answered at once: on Postgres before any node adopted the turn (its
    // lease runs out first), the answer is sent on until one has.
    let (st, body) = s
        .post(
            &format!("/v1/sessions/{sid}/questions/{qid}/answer"),
            json!({"answer": "yes"}),
        )
        .await;
    if st != StatusCode::OK {
        let (_, r) = s.get("/v1/diagnostics/recovery").await;
        let ev = s.events(&format!("sessions/{sid}")).await;
        panic!("{st} {body} report {r} events {ev:?}");
    }
    let end = s.wait_turn_end(&sid, &turn).await;
    assert!(matches!(end.event, Event::TurnCompleted(_)), "{end:?}");
    let report = waiting_in_report(&s, &turn).await;
    assert!(
        !report["turns_failed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["turn_id"] == turn.as_str()),
        "{report}"
    );
    let events = s.events(&format!("sessions/{sid}")).await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(&e.event, Event::TurnFailed(_) | Event::QuestionDeclined(_))),
        "the waiting turn was not ended: {events:?}"
    );
    assert!(events
        .iter()
        .any(|e| matches!(&e.event, Event::QuestionAnswered(a) if a.answer == "yes")));
    // The session takes new turns after it.
    let next = s.send(&sid, "m2", "hello").await;
    assert!(matches!(
        s.wait_turn_end(&sid, &next).await.event,
        Event::TurnCompleted(_)
    ));
}

on_both!(
    provider_body,
    a_provider_that_cannot_resume_fails_its_session_with_the_reason_and_its_orphaned_question_is_declined,
    a_provider_that_cannot_resume_fails_its_session_with_the_reason_and_its_orphaned_question_is_declined_pg
);

async fn provider_body(s: Server) {
    let ok = s.create_session().await;
    let bad = s.create_session().await;
    let turn = s.send(&bad, "m1", "/ask").await;
    s.wait_event(&format!("sessions/{bad}"), |e| {
        matches!(e.event, Event::QuestionAsked(_))
    })
    .await;
    let r = s
        .fault(json!({"kind": "provider_resume_fails", "session_id": bad}))
        .await;
    assert_eq!(r["done"], true, "{r}");
    let report = restart(&s).await;
    assert_eq!(
        report["sessions_failed"],
        json!([{"session_id": bad, "reason": "provider_resume_failed"}]),
        "{report}"
    );
    assert!(report["providers_resumed"].as_u64().unwrap() >= 1);
    let events = s.events(&format!("sessions/{bad}")).await;
    assert!(events.iter().any(
        |e| matches!(&e.event, Event::SessionFailed(r) if r.reason == "provider_resume_failed")
    ));
    // Its question has no owner left: declined, and the turn failed
    // (on Postgres once the turn's lease ran out).
    let end = s.wait_turn_end(&bad, &turn).await;
    assert!(
        matches!(&end.event, Event::TurnFailed(t) if t.reason == REASON_WORKER_RESTART),
        "{end:?}"
    );
    let events = s.events(&format!("sessions/{bad}")).await;
    assert!(events
        .iter()
        .any(|e| matches!(&e.event, Event::QuestionDeclined(q) if q.reason == "orphaned")));
    let ok_events = s.events(&format!("sessions/{ok}")).await;
    assert!(!ok_events
        .iter()
        .any(|e| matches!(e.event, Event::SessionFailed(_))));
    // The client's fold of the log shows the reason (`view.session.reason`).
    let (view, _) = replay_core::transcript::fold_view(&events);
    let info = serde_json::to_value(view.session()).unwrap();
    assert_eq!(info["state"], "failed", "{info}");
    assert_eq!(info["reason"], "provider_resume_failed", "{info}");

    let (st, diag) = s.get("/v1/diagnostics/providers").await;
    assert_eq!(st, StatusCode::OK);
    let list = diag["providers"].as_array().unwrap();
    let of = |sid: &str| {
        list.iter()
            .find(|p| p["session_id"] == sid)
            .unwrap()
            .clone()
    };
    assert_eq!(of(&bad)["state"], "failed", "{diag}");
    assert_eq!(
        of(&bad)["failed_resume"]["reason"],
        "provider_resume_failed"
    );
    assert_eq!(of(&ok)["state"], "active");
    assert!(of(&ok)["failed_resume"].is_null());
    assert_eq!(of(&ok)["provider"], "scripted");
    assert_eq!(diag["states"]["failed"], 1, "{diag}");
    assert_eq!(
        diag["last_recovery"]["resumed"],
        report["providers_resumed"]
    );
    assert_eq!(
        diag["last_recovery"]["sessions_failed"],
        report["sessions_failed"]
    );
}

async fn team_events(s: &Server, team: &str) -> Vec<Value> {
    s.events(&format!("teams/{team}"))
        .await
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

async fn send_team(s: &Server, team: &str, to: &str, text: &str) -> Value {
    let (st, d) = s
        .post(
            &format!("/v1/admin/teams/{team}/messages"),
            json!({"from": "lead", "to": to, "text": text}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{d}");
    d
}

on_both!(
    deferred_body,
    a_message_to_a_busy_member_is_deferred_and_delivered_when_the_member_is_ready,
    a_message_to_a_busy_member_is_deferred_and_delivered_when_the_member_is_ready_pg
);

async fn deferred_body(s: Server) {
    let member = s.create_session().await;
    let idle = s.create_session().await;
    let busy_turn = s.send(&member, "m1", "/ask").await;
    let qid = question_of(&[s
        .wait_event(&format!("sessions/{member}"), |e| {
            matches!(e.event, Event::QuestionAsked(_))
        })
        .await]);
    let now = send_team(&s, "team_a", &idle, "hi idle").await;
    assert_eq!(now["state"], "delivered", "{now}");
    let later = send_team(&s, "team_a", &member, "hi busy").await;
    assert_eq!(later["state"], "deferred", "{later}");
    assert_eq!(later["reason"], "busy");
    let nobody = send_team(&s, "team_a", "ses_none", "hi").await;
    assert_eq!(nobody["state"], "failed");
    assert_eq!(nobody["reason"], "no_such_member");
    let team = team_events(&s, "team_a").await;
    let types: Vec<&str> = team.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "team.message",
            "delivery.delivered",
            "team.message",
            "delivery.deferred",
            "team.message",
            "delivery.failed"
        ]
    );
    // The member becomes ready: its turn ends once answered.
    let (st, _) = s
        .post(
            &format!("/v1/sessions/{member}/questions/{qid}/answer"),
            json!({"answer": "no"}),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    s.wait_turn_end(&member, &busy_turn).await;
    let id = later["delivery_id"].as_str().unwrap().to_owned();
    s.wait_event(
        "teams/team_a",
        |e| matches!(&e.event, Event::DeliveryDelivered(d) if d.delivery_id == id),
    )
    .await;
    let (_, ops) = s.get("/v1/diagnostics/team-operations").await;
    let rec = ops["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["delivery_id"] == later["delivery_id"])
        .unwrap()
        .clone();
    assert_eq!(rec["state"], "delivered", "{ops}");
    let delivered_turn = rec["turn_id"].as_str().unwrap().to_owned();
    assert!(matches!(
        s.wait_turn_end(&member, &delivered_turn).await.event,
        Event::TurnCompleted(_)
    ));
    let tr = serde_json::to_value(s.transcript(&member).await).unwrap();
    assert!(tr.to_string().contains("hi busy"), "{tr}");
    assert_eq!(ops["states"], json!({"delivered": 2, "failed": 1}), "{ops}");
}

on_both!(
    retried_body,
    startup_recovery_retries_deferred_deliveries,
    startup_recovery_retries_deferred_deliveries_pg
);

async fn retried_body(s: Server) {
    // `ready` is busy with a long tool call (failed by the restart, so
    // ready after it); `gone` waits for an answer but its provider will not
    // resume (its session fails at the restart).
    let ready = s.create_session().await;
    let gone = s.create_session().await;
    s.send(&ready, "m1", "/tool /slow /long 400").await;
    s.send(&gone, "m1", "/ask").await;
    s.wait_event(&format!("sessions/{gone}"), |e| {
        matches!(e.event, Event::QuestionAsked(_))
    })
    .await;
    let to_ready = send_team(&s, "team_r", &ready, "after the restart").await;
    let to_gone = send_team(&s, "team_r", &gone, "never").await;
    assert_eq!(to_ready["state"], "deferred");
    assert_eq!(to_gone["state"], "deferred");
    s.fault(json!({"kind": "provider_resume_fails", "session_id": gone}))
        .await;
    let report = restart(&s).await;
    assert_eq!(
        report["deliveries_failed"],
        json!([{"delivery_id": to_gone["delivery_id"], "to": gone, "reason": "member_ended"}]),
        "{report}"
    );
    assert_eq!(
        report["deliveries_retried"],
        json!([to_ready["delivery_id"]]),
        "{report}"
    );
    // On SQLite the member's turn was failed by the pass and the delivery
    // is made at once; on Postgres once the turn's lease ran out and it
    // ended.
    let id = to_ready["delivery_id"].as_str().unwrap().to_owned();
    s.wait_event(
        "teams/team_r",
        |e| matches!(&e.event, Event::DeliveryDelivered(d) if d.delivery_id == id),
    )
    .await;
    let gone_id = to_gone["delivery_id"].as_str().unwrap().to_owned();
    let team = s.events("teams/team_r").await;
    assert!(team.iter().any(|e| matches!(&e.event,
        Event::DeliveryFailed(d) if d.delivery_id == gone_id
            && d.reason.as_deref() == Some("member_ended"))));
}

async fn worktree(s: &Server, op: Value) -> (StatusCode, Value) {
    s.post("/v1/admin/worktrees", op).await
}

on_both!(
    worktree_body,
    startup_recovery_normalises_worktree_records_and_reports_what_it_changed,
    startup_recovery_normalises_worktree_records_and_reports_what_it_changed_pg
);

async fn worktree_body(s: Server) {
    let s1 = s.create_session().await;
    let s2 = s.create_session().await;
    let create = |path: &str, force: bool| json!({"op": "create", "path": path, "force": force});
    let (st, w1) = worktree(&s, create("/w/a", false)).await;
    assert_eq!(st, StatusCode::CREATED, "{w1}");
    let w1 = w1["worktree_id"].as_str().unwrap().to_owned();
    // The runtime's own path keeps the rules.
    let (st, _) = worktree(&s, create("/w//a/", false)).await;
    assert_eq!(st, StatusCode::CONFLICT, "a duplicate identity is refused");
    let claim = |w: &str, sid: &str, force: bool| json!({"op": "claim", "worktree_id": w, "session_id": sid, "force": force});
    let (_, w3) = worktree(&s, create("/w/b", false)).await;
    let w3 = w3["worktree_id"].as_str().unwrap().to_owned();
    let (st, _) = worktree(&s, claim(&w3, &s2, false)).await;
    assert_eq!(st, StatusCode::CREATED);
    let (st, _) = worktree(&s, claim(&w3, &s1, false)).await;
    assert_eq!(st, StatusCode::CONFLICT, "claimed by another session");
    let (st, _) = worktree(&s, json!({"op": "release", "worktree_id": w3})).await;
    assert_eq!(st, StatusCode::CREATED);
    // What an older runtime or a crash may leave (forced): a duplicate
    // identity claimed by s1, a second claim of s1, a claim of a session
    // that does not exist.
    let (_, w2) = worktree(&s, create("/w//a/", true)).await;
    let w2 = w2["worktree_id"].as_str().unwrap().to_owned();
    worktree(&s, claim(&w2, &s1, true)).await;
    worktree(&s, claim(&w3, &s1, true)).await;
    let (_, w4) = worktree(&s, create("/w/c", false)).await;
    let w4 = w4["worktree_id"].as_str().unwrap().to_owned();
    worktree(&s, claim(&w4, "ses_missing", true)).await;

    let report = restart(&s).await;
    assert_eq!(
        report["worktrees"],
        json!({
            "normalized": [{"worktree_id": w2, "from": "/w//a/", "to": "/w/a"}],
            "merged": [{"worktree_id": w2, "into": w1}],
            "claims_rewritten": [{"session_id": s1, "from": w2, "to": w1}],
            "claims_released": [
                {"worktree_id": w3, "session_id": s1, "reason": "second_claim"},
                {"worktree_id": w4, "session_id": "ses_missing", "reason": "no_such_session"},
            ],
        }),
        "{report}"
    );
    let (st, diag) = s.get("/v1/diagnostics/worktrees").await;
    assert_eq!(st, StatusCode::OK);
    let list = diag["worktrees"].as_array().unwrap();
    let of = |w: &str| list.iter().find(|x| x["worktree_id"] == w).unwrap().clone();
    assert_eq!(of(&w1)["claimed_by"], s1.as_str(), "{diag}");
    assert_eq!(of(&w2)["active"], false);
    assert!(of(&w3)["claimed_by"].is_null());
    assert!(of(&w4)["claimed_by"].is_null());
    assert_eq!(
        diag["states"],
        json!({"claimed": 1, "removed": 1, "free": 2})
    );
    let types = |evs: Vec<replay_core::protocol::Envelope>| {
        evs.iter()
            .map(|e| e.event.type_name().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        types(s.events(&format!("worktrees/{w2}")).await),
        [
            "worktree.created",
            "worktree.claimed",
            "worktree.released",
            "worktree.removed"
        ]
    );
    assert_eq!(
        types(s.events(&format!("worktrees/{w1}")).await),
        ["worktree.created", "worktree.claimed"]
    );
    // Coherent now: a second pass changes nothing.
    let again = restart(&s).await;
    assert_eq!(
        again["worktrees"],
        json!({"normalized": [], "merged": [], "claims_rewritten": [], "claims_released": []})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_diagnostics_need_the_token_like_the_others() {
    let s = server_with(|c| c.token = Some("sekret".into())).await;
    for path in [
        "/v1/diagnostics/providers",
        "/v1/diagnostics/worktrees",
        "/v1/diagnostics/team-operations",
        "/v1/diagnostics/processes",
    ] {
        let (st, _) = s.get(path).await;
        assert_eq!(st, StatusCode::UNAUTHORIZED, "{path}");
        let r = s
            .http
            .get(s.url(path))
            .bearer_auth("sekret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let body: Value = r.json().await.unwrap();
        assert!(body.is_object(), "{path}: {body}");
    }
}

on_both!(
    accepted_during_restart_body,
    a_message_accepted_while_the_worker_restarts_ends_its_turn_once,
    a_message_accepted_while_the_worker_restarts_ends_its_turn_once_pg
);

/// A message accepted while the worker restarts: its turn runs on one
/// worker or is ended by the recovery pass, never both (a turn ended
/// twice, failed by recovery and then completed by the new worker, shows a
/// client two ends and lets a waiter go on early). `slow_turn_start` holds
/// the message between its commit and its turn's start while the restart
/// comes.
async fn accepted_during_restart_body(s: Server) {
    let sid = s.create_session().await;
    let mut turns = Vec::new();
    for i in 0..3 {
        s.fault(json!({"kind": "slow_turn_start", "ms": 400})).await;
        let mid = format!("m{i}");
        let (turn, _) = tokio::join!(s.send(&sid, &mid, "hello"), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            restart(&s).await
        });
        turns.push(turn);
    }
    for turn in &turns {
        s.wait_turn_end(&sid, turn).await;
    }
    // Time for a turn that a worker ran unknown to the recovery pass to end
    // again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let events = s.events(&format!("sessions/{sid}")).await;
    for turn in &turns {
        let ends: Vec<&Event> = events
            .iter()
            .map(|e| &e.event)
            .filter(|e| match e {
                Event::TurnCompleted(x) | Event::TurnCancelled(x) => &x.turn_id == turn,
                Event::TurnFailed(x) => &x.turn_id == turn,
                _ => false,
            })
            .collect();
        assert_eq!(ends.len(), 1, "{turn} ended {} times: {ends:?}", ends.len());
    }
}
