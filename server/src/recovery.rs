//! Startup recovery: a real reconciliation pass over the store at boot (and
//! at an in-process worker restart). Whatever was live in the previous run
//! is marked clearly: nothing is resumed, nothing is left half alive.

use replay_core::protocol::{
    Event, QuestionDeclined, Scope, SystemRecovered, SystemStarted, TaskState, ToolCompleted,
    ToolStatus, TurnFailed, WithReason, REASON_WORKER_RESTART,
};
use serde_json::json;

use crate::log::Log;
use crate::store::{Reads, StoreResult};
use crate::util::now_rfc3339;

/// The system log's scope id.
pub const SYSTEM_ID: &str = "runtime";

/// Runs the pass for a new `boot_id`; returns the report stored for
/// `/v1/diagnostics/recovery` (also the `system.recovered` summary).
pub fn recover(log: &Log, boot_id: &str) -> StoreResult<serde_json::Value> {
    let mut db = log.db();
    db.insert_boot(boot_id)?;
    let mut envs = Vec::new();
    envs.push(db.append(
        Scope::System,
        SYSTEM_ID,
        &Event::SystemStarted(SystemStarted {
            boot_id: boot_id.to_owned(),
        }),
    )?);

    let mut questions = Vec::new();
    for q in db.open_questions()? {
        envs.push(db.append(
            Scope::Session,
            &q.session_id,
            &Event::QuestionDeclined(QuestionDeclined {
                question_id: q.question_id.clone(),
                reason: "orphaned".into(),
            }),
        )?);
        questions.push(
            json!({"session_id": q.session_id, "turn_id": q.turn_id, "question_id": q.question_id}),
        );
    }

    let mut tools = Vec::new();
    for t in db.open_tools()? {
        envs.push(db.append(
            Scope::Session,
            &t.session_id,
            &Event::ToolCompleted(ToolCompleted {
                turn_id: t.turn_id.clone(),
                call_id: t.call_id.clone(),
                status: ToolStatus::Error,
                output: "interrupted by worker restart".into(),
            }),
        )?);
        tools.push(json!({"session_id": t.session_id, "turn_id": t.turn_id, "call_id": t.call_id}));
    }

    let mut turns = Vec::new();
    for t in db.open_turns()? {
        envs.push(db.append(
            Scope::Session,
            &t.session_id,
            &Event::TurnFailed(TurnFailed {
                turn_id: t.turn_id.clone(),
                reason: REASON_WORKER_RESTART.into(),
            }),
        )?);
        turns.push(json!({"session_id": t.session_id, "turn_id": t.turn_id}));
    }

    let mut processes = Vec::new();
    for p in db.processes()? {
        if p.state != "running" {
            continue;
        }
        envs.push(db.append(
            Scope::Process,
            &p.process_id,
            &Event::ProcessFailed(WithReason {
                reason: REASON_WORKER_RESTART.into(),
            }),
        )?);
        processes.push(json!(p.process_id));
    }

    let mut tasks_failed = Vec::new();
    let mut snapshots = Vec::new();
    for session_id in db.sessions_with_open_tasks()? {
        let mut snap = db.tasks(&session_id)?;
        let now = now_rfc3339();
        for t in &mut snap.tasks {
            if matches!(t.state, TaskState::Queued | TaskState::Running) {
                t.state = TaskState::Failed;
                t.ended_at = Some(now.clone());
                t.detail = Some(REASON_WORKER_RESTART.into());
                tasks_failed.push(json!({"session_id": session_id, "task_id": t.task_id}));
            }
        }
        let snap = db.put_tasks(&session_id, &snap.tasks, None)?;
        snapshots.push((session_id, snap));
    }

    let report = json!({
        "boot_id": boot_id,
        "recovered_at": now_rfc3339(),
        "turns_failed": turns,
        "questions_declined": questions,
        "tools_failed": tools,
        "processes_failed": processes,
        "tasks_failed": tasks_failed,
    });
    envs.push(db.append(
        Scope::System,
        SYSTEM_ID,
        &Event::SystemRecovered(SystemRecovered {
            summary: report.clone().into(),
        }),
    )?);
    db.set_recovery(boot_id, &report)?;
    for env in envs {
        log.hub.publish(&crate::hub::Frame::new(env));
    }
    for (session_id, snap) in snapshots {
        log.publish_tasks(&db, &session_id, &snap);
    }
    Ok(report)
}
