//! Startup recovery: a real reconciliation pass over the store at boot (and
//! at an in-process worker restart). Every durable record either goes on
//! safely or is marked clearly (docs/server.md, "Startup recovery"):
//! providers are resumed or their sessions failed, a turn waiting for an
//! answer keeps waiting (its waiter is started once the worker runs, see
//! [`Recovered::waiting`]), other open turns, processes and tasks are
//! failed, orphaned questions declined, deferred team deliveries retried,
//! worktree records normalised.

use replay_core::protocol::{
    Envelope, Event, QuestionDeclined, Scope, SystemRecovered, SystemStarted, TaskState,
    ToolCompleted, ToolStatus, TurnFailed, WithReason, REASON_WORKER_RESTART,
};
use serde_json::json;

use crate::log::Log;
use crate::provider::{self, ProviderRef};
use crate::store::{Db, ProcessState, RecordKind, StoreError, StoreResult};
use crate::util::now_rfc3339;
use crate::{deliveries, worktrees};

/// The system log's scope id.
pub const SYSTEM_ID: &str = "runtime";

/// A turn that waits for an answer and keeps waiting across a restart
/// (see [`end_orphans`]).
#[derive(Clone, Debug)]
pub struct Waiting {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The persisted question it waits on.
    pub question_id: String,
}

impl Waiting {
    /// As the recovery report lists it.
    pub fn to_json(&self) -> serde_json::Value {
        json!({"session_id": self.session_id, "turn_id": self.turn_id,
               "question_id": self.question_id})
    }
}

/// What a recovery pass did, and what the worker goes on with.
pub struct Recovered {
    /// The report stored for `/v1/diagnostics/recovery` (also the
    /// `system.recovered` summary).
    pub report: serde_json::Value,
    /// Turns that keep waiting for an answer: the worker starts a waiter
    /// for each (`resume`).
    pub waiting: Vec<Waiting>,
    /// Deferred team deliveries whose recipient may take them: the worker
    /// retries them once it runs (`resume`).
    pub deliveries: Vec<String>,
}

/// Runs the pass for a new `boot_id`.
pub fn recover(log: &Log, boot_id: &str) -> StoreResult<Recovered> {
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

    let providers = resume_providers(&mut db, boot_id, &mut envs)?;
    let orphans = end_orphans(&mut db, &mut envs)?;
    // On a shared store processes and background tasks are leased: another
    // node may be running them; those of a gone node are failed by
    // [`reap`] once their lease runs out (docs/cluster.md).
    let shared = db.shared();

    let mut processes = Vec::new();
    for p in db.processes()? {
        if shared || p.state != ProcessState::Running {
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
    let open_tasks = if shared {
        Vec::new()
    } else {
        db.sessions_with_open_tasks()?
    };
    for session_id in open_tasks {
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

    let deferred = deliveries::recover(&mut db, &mut envs)?;
    let worktrees = worktrees::normalize(&mut db, &mut envs)?;

    let report = json!({
        "boot_id": boot_id,
        "recovered_at": now_rfc3339(),
        "providers_resumed": providers.resumed,
        "sessions_failed": providers.failed,
        "turns_waiting": orphans.waiting.iter().map(Waiting::to_json).collect::<Vec<_>>(),
        "turns_failed": orphans.turns,
        "questions_declined": orphans.questions,
        "tools_failed": orphans.tools,
        "processes_failed": processes,
        "tasks_failed": tasks_failed,
        "deliveries_retried": deferred.retry,
        "deliveries_failed": deferred.failed,
        "worktrees": worktrees,
    });
    envs.push(db.append(
        Scope::System,
        SYSTEM_ID,
        &Event::SystemRecovered(SystemRecovered {
            summary: report.clone().into(),
        }),
    )?);
    db.set_recovery(boot_id, &report)?;
    log.publish_committed(envs);
    for (session_id, snap) in snapshots {
        log.publish_tasks(&db, &session_id, &snap);
    }
    Ok(Recovered {
        report,
        waiting: orphans.waiting,
        deliveries: deferred.retry,
    })
}

/// What [`resume_providers`] did.
struct Providers {
    /// How many provider references resumed.
    resumed: u64,
    /// `{session_id, reason}` of each session failed.
    failed: Vec<serde_json::Value>,
}

/// Resumes the provider of every session that has one and has not ended;
/// a session whose provider does not resume is failed with the reason
/// (`session.failed {reason}`), before its turns are looked at: its open
/// turns are then failed and its questions declined (no owner is left).
fn resume_providers(
    db: &mut Db,
    boot_id: &str,
    envs: &mut Vec<Envelope>,
) -> StoreResult<Providers> {
    let mut out = Providers {
        resumed: 0,
        failed: Vec::new(),
    };
    for record in db.records::<ProviderRef>(RecordKind::Provider)? {
        if record.state != "active" || db.session_ended(&record.session_id)? {
            continue;
        }
        let session_id = record.session_id.clone();
        match provider::resume(db, record, boot_id)? {
            Ok(()) => out.resumed += 1,
            Err(reason) => {
                envs.push(db.append(
                    Scope::Session,
                    &session_id,
                    &Event::SessionFailed(WithReason {
                        reason: reason.clone(),
                    }),
                )?);
                out.failed
                    .push(json!({"session_id": session_id, "reason": reason}));
            }
        }
    }
    Ok(out)
}

/// What [`end_orphans`] ended.
#[derive(Default)]
pub struct Orphans {
    /// `{session_id, turn_id}` of each turn failed.
    pub turns: Vec<serde_json::Value>,
    /// `{session_id, turn_id, question_id}` of each question declined.
    pub questions: Vec<serde_json::Value>,
    /// `{session_id, turn_id, call_id}` of each tool call failed.
    pub tools: Vec<serde_json::Value>,
    /// Turns waiting for an answer, kept (this node runs them now).
    pub waiting: Vec<Waiting>,
}

/// Settles every turn no live worker runs (SQLite: every open turn, at
/// boot; Postgres: turns whose lease ran out, claimed by this node so that
/// one node settles each). A turn waiting for an answer in a session that
/// has not ended keeps waiting: this node adopts it (see
/// [`Orphans::waiting`]). Every other turn is ended honestly: its questions
/// declined (`orphaned`: no owner is left to take the answer), its tool
/// calls failed, then `turn.failed`, in that order per session.
pub fn end_orphans(db: &mut Db, envs: &mut Vec<Envelope>) -> StoreResult<Orphans> {
    let mut out = Orphans::default();
    let turns = db.open_turns()?;
    let questions = db.open_questions()?;
    for q in &questions {
        let open = turns.iter().any(|t| t.turn_id == q.turn_id);
        let taken = out.waiting.iter().any(|w| w.turn_id == q.turn_id);
        if open && !taken && !db.session_ended(&q.session_id)? {
            db.adopt_turn(&q.turn_id)?;
            out.waiting.push(Waiting {
                session_id: q.session_id.clone(),
                turn_id: q.turn_id.clone(),
                question_id: q.question_id.clone(),
            });
        }
    }
    let waiting = std::mem::take(&mut out.waiting);
    let kept = |turn_id: &str| waiting.iter().any(|w| w.turn_id == turn_id);
    for q in questions {
        if waiting.iter().any(|w| w.question_id == q.question_id) {
            continue;
        }
        let declined = Event::QuestionDeclined(QuestionDeclined {
            question_id: q.question_id.clone(),
            reason: "orphaned".into(),
        });
        if !held(db.append(Scope::Session, &q.session_id, &declined), envs)? {
            continue;
        }
        out.questions.push(
            json!({"session_id": q.session_id, "turn_id": q.turn_id, "question_id": q.question_id}),
        );
    }
    for t in db.open_tools()? {
        let failed = Event::ToolCompleted(ToolCompleted {
            turn_id: t.turn_id.clone(),
            call_id: t.call_id.clone(),
            status: ToolStatus::Error,
            output: "interrupted by worker restart".into(),
        });
        if !held(db.append(Scope::Session, &t.session_id, &failed), envs)? {
            continue;
        }
        out.tools
            .push(json!({"session_id": t.session_id, "turn_id": t.turn_id, "call_id": t.call_id}));
    }
    for t in turns {
        if kept(&t.turn_id) {
            continue;
        }
        let failed = Event::TurnFailed(TurnFailed {
            turn_id: t.turn_id.clone(),
            reason: REASON_WORKER_RESTART.into(),
        });
        if !held(db.append(Scope::Session, &t.session_id, &failed), envs)? {
            continue;
        }
        out.turns
            .push(json!({"session_id": t.session_id, "turn_id": t.turn_id}));
    }
    out.waiting = waiting;
    Ok(out)
}

/// Keeps an append of [`end_orphans`]; `false` when its turn was claimed
/// by another node meanwhile (this pass outlived its own claim): that node
/// writes the end instead.
fn held(appended: StoreResult<Envelope>, envs: &mut Vec<Envelope>) -> StoreResult<bool> {
    match appended {
        Ok(env) => {
            envs.push(env);
            Ok(true)
        }
        Err(StoreError::NotHeld(turn)) => {
            tracing::warn!(%turn, "another node ends this turn");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// On a shared store, ends what nodes whose lease ran out left open (run
/// periodically by every node): their turns (see [`end_orphans`]), running
/// processes (`process.failed`) and open background tasks (`failed` in
/// the session's next `tasks.snapshot`, `background_wait` cleared), each
/// once; a turn of theirs waiting for an answer is adopted (returned: the
/// caller starts its waiter). Returns what it did, in the shape of the
/// recovery report, if anything.
pub fn reap(log: &Log) -> StoreResult<(Option<serde_json::Value>, Vec<Waiting>)> {
    let mut db = log.db();
    let mut envs = Vec::new();
    let mut orphans = end_orphans(&mut db, &mut envs)?;
    let waiting = std::mem::take(&mut orphans.waiting);
    let processes = db.fail_expired_processes()?;
    let expired_tasks = db.fail_expired_tasks()?;
    let processes_failed: Vec<serde_json::Value> =
        processes.iter().map(|e| json!(e.scope_id)).collect();
    envs.extend(processes);
    log.publish_committed(envs);
    let mut tasks_failed = Vec::new();
    for t in &expired_tasks {
        log.publish_tasks(&db, &t.session_id, &t.snapshot);
        for task_id in &t.failed {
            tasks_failed.push(json!({"session_id": t.session_id, "task_id": task_id}));
        }
    }
    let nothing = orphans.turns.is_empty()
        && orphans.questions.is_empty()
        && orphans.tools.is_empty()
        && processes_failed.is_empty()
        && tasks_failed.is_empty()
        && waiting.is_empty();
    if nothing {
        return Ok((None, waiting));
    }
    let report = json!({
        "turns_waiting": waiting.iter().map(Waiting::to_json).collect::<Vec<_>>(),
        "turns_failed": orphans.turns,
        "questions_declined": orphans.questions,
        "tools_failed": orphans.tools,
        "processes_failed": processes_failed,
        "tasks_failed": tasks_failed,
    });
    tracing::warn!(%report, "ended what a node whose lease ran out left open");
    Ok((Some(report), waiting))
}
