//! The append path on Postgres: an event's log seq (its log's row lock,
//! held to commit: seqs are dense per log and commit in order), the
//! projections it moves and the fencing of turns and processes, all in the
//! caller's [`WriteTx`]; its global id comes at commit (see `tx`).

use replay_core::protocol::{Event, Scope};

use super::tx::{Staged, WriteTx};
use super::unsigned;
use crate::store::{StoreError, StoreResult};
use crate::util::{now_rfc3339, random_id};

/// The lease holder of a node's writes: its boot and lease length.
#[derive(Clone, Copy)]
pub struct Holder<'a> {
    /// The boot that holds what it writes.
    pub owner: &'a str,
    /// How long a lease lasts, in seconds.
    pub lease_secs: f64,
}

/// Takes the next seq of the event's log (creating the log, with a new
/// epoch, if needed) and moves its projections, in `tx`; the event gets its
/// id when `tx` commits. An event of a turn or process that `holder` no
/// longer holds is refused ([`StoreError::NotHeld`], see [`hold_turn`]).
pub async fn stage(
    tx: &mut WriteTx,
    scope: Scope,
    scope_id: &str,
    event: &Event,
    holder: Holder<'_>,
) -> StoreResult<Staged> {
    let ts = now_rfc3339();
    let row = tx
        .query_opt(
            "INSERT INTO logs (scope, scope_id, epoch, head, created_at) VALUES ($1, $2, $3, 1, $4)
             ON CONFLICT (scope, scope_id) DO UPDATE SET head = logs.head + 1
             RETURNING head",
            &[&scope.as_str(), &scope_id, &random_id("e"), &ts],
        )
        .await?
        .ok_or_else(|| StoreError::Backend("a log upsert returned no row".into()))?;
    let seq: i64 = row.get(0);
    project(tx, scope, scope_id, event, holder).await?;
    Ok(Staged {
        scope,
        scope_id: scope_id.to_owned(),
        seq: unsigned(seq),
        ts,
        event: event.clone(),
    })
}

/// The turn an event of a session belongs to, for the events that name one.
fn turn_of(event: &Event) -> Option<&str> {
    match event {
        Event::TurnStarted(t) => Some(&t.turn_id),
        Event::TurnCompleted(t) | Event::TurnCancelled(t) => Some(&t.turn_id),
        Event::TurnFailed(t) => Some(&t.turn_id),
        Event::MessageCommitted(m) => Some(&m.turn_id),
        Event::ToolStarted(t) => Some(&t.turn_id),
        Event::ToolCompleted(t) => Some(&t.turn_id),
        Event::QuestionAsked(q) => Some(&q.turn_id),
        _ => None,
    }
}

/// Fencing: a node writes a turn's events only while it holds the turn
/// (its `owner`, state still open), and moves it to `state` if given. A
/// lease can run out while its node is alive (Postgres unreachable longer
/// than a lease, or an end pass slower than one): another node then claims
/// the turn and ends it, and the first node's later events (a second end,
/// a reply after the end) are refused here, in the same transaction, under
/// the append lock. A turn the store does not know (an admin append) is
/// not fenced.
async fn hold_turn(
    tx: &mut WriteTx,
    turn_id: &str,
    owner: &str,
    state: Option<&str>,
) -> StoreResult<()> {
    let held = match state {
        Some(state) => {
            tx.execute(
                "UPDATE turns SET state = $3 WHERE turn_id = $1 AND owner = $2
                   AND state IN ('queued', 'running', 'failing')",
                &[&turn_id, &owner, &state],
            )
            .await?
        }
        None => {
            tx.execute(
                "SELECT 1 FROM turns WHERE turn_id = $1 AND owner = $2
                   AND state IN ('queued', 'running', 'failing') FOR UPDATE",
                &[&turn_id, &owner],
            )
            .await?
        }
    };
    fenced(tx, held, "SELECT 1 FROM turns WHERE turn_id = $1", turn_id).await
}

/// Ends a process as `state`, fenced like a turn (see [`hold_turn`]): only
/// the node holding a running process ends it, so a process failed by
/// another node (its lease ran out) is never ended twice. A process the
/// store does not know (an admin append) is not fenced.
async fn end_process(
    tx: &mut WriteTx,
    process_id: &str,
    owner: &str,
    state: &str,
    code: Option<i64>,
) -> StoreResult<()> {
    let ended = tx
        .execute(
            "UPDATE processes SET state = $3, exit_code = COALESCE($4, exit_code)
             WHERE process_id = $1 AND owner = $2 AND state = 'running'",
            &[&process_id, &owner, &state, &code],
        )
        .await?;
    fenced(
        tx,
        ended,
        "SELECT 1 FROM processes WHERE process_id = $1",
        process_id,
    )
    .await
}

/// The fence's verdict on a fenced statement that touched `rows` rows: none
/// touched while the row exists (`exists_sql`, with `id` as `$1`, finds
/// it) means another node holds it ([`StoreError::NotHeld`]); none touched
/// and no such row means the store does not know it (an admin append), not
/// fenced.
async fn fenced(tx: &mut WriteTx, rows: u64, exists_sql: &str, id: &str) -> StoreResult<()> {
    if rows == 0 && tx.query_opt(exists_sql, &[&id]).await?.is_some() {
        return Err(StoreError::NotHeld(id.to_owned()));
    }
    Ok(())
}

/// Keeps the projections in step with the event just inserted (and fences
/// the events of turns, see [`hold_turn`]).
async fn project(
    tx: &mut WriteTx,
    scope: Scope,
    scope_id: &str,
    event: &Event,
    holder: Holder<'_>,
) -> StoreResult<()> {
    let owner = holder.owner;
    if scope == Scope::Session {
        if let Some(turn_id) = turn_of(event) {
            let state = match event {
                Event::TurnStarted(_) => Some("running"),
                Event::TurnCompleted(_) => Some("completed"),
                Event::TurnCancelled(_) => Some("cancelled"),
                Event::TurnFailed(_) => Some("failed"),
                _ => None,
            };
            hold_turn(tx, turn_id, owner, state).await?;
        }
    }
    let question = |state: &'static str| {
        (
            "UPDATE questions SET state = $2 WHERE question_id = $1",
            Some(state),
        )
    };
    // (statement, its $1 key, its $2), or a statement of its own.
    let ((sql, second), key): ((&str, Option<&str>), &str) = match event {
        Event::QuestionAnswered(q) => (question("answered"), &q.question_id),
        Event::QuestionDeclined(q) => (question("declined"), &q.question_id),
        Event::ToolCompleted(t) => (
            (
                "UPDATE tools SET state = 'completed' WHERE call_id = $1",
                None,
            ),
            &t.call_id,
        ),
        Event::ProcessFailed(_) if scope == Scope::Process => {
            return end_process(tx, scope_id, owner, "failed", None).await;
        }
        Event::ToolStarted(t) => {
            tx.execute(
                "INSERT INTO tools (call_id, session_id, turn_id, state)
                 VALUES ($1, $2, $3, 'running') ON CONFLICT DO NOTHING",
                &[&t.call_id, &scope_id, &t.turn_id],
            )
            .await?;
            return Ok(());
        }
        Event::QuestionAsked(q) => {
            tx.execute(
                "INSERT INTO questions (question_id, session_id, turn_id, state)
                 VALUES ($1, $2, $3, 'pending') ON CONFLICT DO NOTHING",
                &[&q.question_id, &scope_id, &q.turn_id],
            )
            .await?;
            return Ok(());
        }
        Event::ProcessStarted(p) if scope == Scope::Process => {
            tx.execute(
                "INSERT INTO processes (process_id, command, state, owner, lease_until)
                 VALUES ($1, $2, 'running', $3, now() + make_interval(secs => $4))
                 ON CONFLICT DO NOTHING",
                &[&scope_id, &p.command, &owner, &holder.lease_secs],
            )
            .await?;
            return Ok(());
        }
        Event::ProcessExited(p) if scope == Scope::Process => {
            return end_process(tx, scope_id, owner, "exited", Some(p.code)).await;
        }
        _ => return Ok(()),
    };
    match second {
        Some(v) => tx.execute(sql, &[&key, &v]).await?,
        None => tx.execute(sql, &[&key]).await?,
    };
    Ok(())
}
