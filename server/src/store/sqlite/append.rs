//! The append path on SQLite: an event's seq, its row and the projection
//! ops it moves (see `model`), in the caller's transaction.

use replay_core::protocol::{Envelope, Event, Scope};
use rusqlite::params;

use crate::store::model::{self, Op};
use crate::store::{ProcessState, QuestionState, StoreResult, ToolState};
use crate::util::now_rfc3339;

/// Inserts one event (the next seq of an existing log) and its projections
/// inside the caller's transaction.
pub(super) fn append_in(
    tx: &rusqlite::Transaction<'_>,
    scope: Scope,
    scope_id: &str,
    event: &Event,
) -> StoreResult<Envelope> {
    let ts = now_rfc3339();
    let seq: u64 = tx.query_row(
        "UPDATE logs SET head = head + 1 WHERE scope = ?1 AND scope_id = ?2 RETURNING head",
        params![scope.as_str(), scope_id],
        |r| r.get(0),
    )?;
    tx.prepare_cached(
        "INSERT INTO events (scope, scope_id, seq, type, ts, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        scope.as_str(),
        scope_id,
        seq,
        event.type_name(),
        ts,
        event.data_json()
    ])?;
    let id = tx.last_insert_rowid() as u64;
    for op in model::project(scope, scope_id, event) {
        apply(tx, op)?;
    }
    Ok(Envelope::durable(
        id,
        scope,
        scope_id.to_owned(),
        seq,
        ts,
        event.clone(),
    ))
}

/// Runs one projection [`Op`] in SQLite's dialect. Nothing is fenced: this
/// process is the store's one writer.
fn apply(tx: &rusqlite::Transaction<'_>, op: Op<'_>) -> rusqlite::Result<()> {
    let run = |sql: &str, args: &[&dyn rusqlite::ToSql]| {
        tx.prepare_cached(sql)?.execute(args).map(|_| ())
    };
    match op {
        Op::Turn { to: None, .. } => Ok(()),
        Op::Turn {
            turn_id,
            to: Some(to),
        } => run(
            "UPDATE turns SET state = ?2 WHERE turn_id = ?1",
            params![turn_id, to.as_str()],
        ),
        Op::ToolStarted {
            session_id,
            turn_id,
            call_id,
        } => run(
            "INSERT OR IGNORE INTO tools (call_id, session_id, turn_id, state) VALUES (?1, ?2, ?3, ?4)",
            params![call_id, session_id, turn_id, ToolState::Running.as_str()],
        ),
        Op::ToolCompleted { call_id } => run(
            "UPDATE tools SET state = ?2 WHERE call_id = ?1",
            params![call_id, ToolState::Completed.as_str()],
        ),
        Op::QuestionAsked {
            session_id,
            turn_id,
            question_id,
        } => run(
            "INSERT OR IGNORE INTO questions (question_id, session_id, turn_id, state) VALUES (?1, ?2, ?3, ?4)",
            params![question_id, session_id, turn_id, QuestionState::Pending.as_str()],
        ),
        Op::QuestionClosed { question_id, to } => run(
            "UPDATE questions SET state = ?2 WHERE question_id = ?1",
            params![question_id, to.as_str()],
        ),
        Op::ProcessStarted {
            process_id,
            command,
        } => run(
            "INSERT OR IGNORE INTO processes (process_id, command, state) VALUES (?1, ?2, ?3)",
            params![process_id, command, ProcessState::Running.as_str()],
        ),
        Op::ProcessEnded {
            process_id,
            to,
            exit_code,
        } => run(
            "UPDATE processes SET state = ?2, exit_code = COALESCE(?3, exit_code) WHERE process_id = ?1",
            params![process_id, to.as_str(), exit_code],
        ),
    }
}
