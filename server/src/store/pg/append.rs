//! The append path on Postgres: an event's log seq (its log's row lock,
//! held to commit: seqs are dense per log and commit in order), the
//! projections it moves and the fencing of turns and processes, all in the
//! caller's [`WriteTx`]; its global id comes at commit (see `tx`).

use replay_core::protocol::{Event, Scope};
use tokio_postgres::types::ToSql;

use super::tx::{Staged, WriteTx};
use super::unsigned;
use crate::store::model::{project, Op};
use crate::store::{ProcessState, QuestionState, StoreError, StoreResult, ToolState, TurnState};
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
             RETURNING head, epoch",
            &[&scope.as_str(), &scope_id, &random_id("e"), &ts],
        )
        .await?
        .ok_or_else(|| StoreError::Backend("a log upsert returned no row".into()))?;
    let seq: i64 = row.get(0);
    for op in project(scope, scope_id, event) {
        apply(tx, op, holder).await?;
    }
    Ok(Staged {
        scope,
        scope_id: scope_id.to_owned(),
        seq: unsigned(seq),
        epoch: row.get(1),
        ts,
        event: event.clone(),
    })
}

/// One append of a group (see `group`): its log, its event, who holds it.
pub struct Item<'a> {
    /// The event's log.
    pub scope: Scope,
    /// That log's id.
    pub scope_id: &'a str,
    /// The event.
    pub event: &'a Event,
    /// Whose turns and processes it may move.
    pub holder: Holder<'a>,
}

/// [`stage`] for several appends in one transaction: every log's seqs are
/// taken in one statement (each log's row locked once, the logs in key
/// order, so two groups never wait for each other in a cycle), then each
/// event's projections. Staged in `items`' order, which callers sort by
/// log (a log's events keep their order: seqs ascend with ids).
pub async fn stage_many(tx: &mut WriteTx, items: &[Item<'_>]) -> StoreResult<Vec<Staged>> {
    let ts = now_rfc3339();
    // Events per log, in the order the logs first appear.
    let mut logs: Vec<(Scope, &str, i64)> = Vec::new();
    for it in items {
        match logs
            .iter_mut()
            .find(|(s, id, _)| *s == it.scope && *id == it.scope_id)
        {
            Some(log) => log.2 += 1,
            None => logs.push((it.scope, it.scope_id, 1)),
        }
    }
    let scopes: Vec<&str> = logs.iter().map(|l| l.0.as_str()).collect();
    let ids: Vec<&str> = logs.iter().map(|l| l.1).collect();
    let epochs: Vec<String> = logs.iter().map(|_| random_id("e")).collect();
    let counts: Vec<i64> = logs.iter().map(|l| l.2).collect();
    let rows = tx
        .query(
            "INSERT INTO logs (scope, scope_id, epoch, head, created_at)
             SELECT u.scope, u.scope_id, u.epoch, u.n, $5
               FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
                    WITH ORDINALITY AS u(scope, scope_id, epoch, n, ord)
              ORDER BY u.ord
             ON CONFLICT (scope, scope_id) DO UPDATE SET head = logs.head + EXCLUDED.head
             RETURNING scope, scope_id, head, epoch",
            &[&scopes, &ids, &epochs, &counts, &ts],
        )
        .await?;
    // Each log's next seq in this group: its new head minus its count.
    let mut next: Vec<(Scope, &str, i64, String)> = Vec::with_capacity(rows.len());
    for r in &rows {
        let (scope, id): (&str, &str) = (r.get(0), r.get(1));
        let (scope, head): (Scope, i64) = (crate::store::scope_from_str(scope), r.get(2));
        let Some(log) = logs.iter().find(|l| l.0 == scope && l.1 == id) else {
            return Err(StoreError::Backend(
                "a log upsert returned another log".into(),
            ));
        };
        next.push((log.0, log.1, head - log.2 + 1, r.get(3)));
    }
    let mut staged = Vec::with_capacity(items.len());
    for it in items {
        let log = next
            .iter_mut()
            .find(|l| l.0 == it.scope && l.1 == it.scope_id)
            .ok_or_else(|| StoreError::Backend("a log upsert returned no row".into()))?;
        let seq = log.2;
        log.2 += 1;
        for op in project(it.scope, it.scope_id, it.event) {
            apply(tx, op, it.holder).await?;
        }
        staged.push(Staged {
            scope: it.scope,
            scope_id: it.scope_id.to_owned(),
            seq: unsigned(seq),
            epoch: log.3.clone(),
            ts: ts.clone(),
            event: it.event.clone(),
        });
    }
    Ok(staged)
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
    state: Option<TurnState>,
) -> StoreResult<()> {
    let held = match state {
        Some(state) => {
            tx.execute(
                "UPDATE turns SET state = $3 WHERE turn_id = $1 AND owner = $2
                   AND state IN ('queued', 'running', 'failing')",
                &[&turn_id, &owner, &state.as_str()],
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
    state: ProcessState,
    code: Option<i64>,
) -> StoreResult<()> {
    let ended = tx
        .execute(
            "UPDATE processes SET state = $3, exit_code = COALESCE($4, exit_code)
             WHERE process_id = $1 AND owner = $2 AND state = 'running'",
            &[&process_id, &owner, &state.as_str(), &code],
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

/// Runs one projection [`Op`] in Postgres's dialect, fenced: a turn's
/// events and a process's end are written only by the node holding them
/// (see [`hold_turn`], [`end_process`]).
async fn apply(tx: &mut WriteTx, op: Op<'_>, holder: Holder<'_>) -> StoreResult<()> {
    let owner = holder.owner;
    match op {
        Op::Turn { turn_id, to } => hold_turn(tx, turn_id, owner, to).await,
        Op::ProcessEnded {
            process_id,
            to,
            exit_code,
        } => end_process(tx, process_id, owner, to, exit_code).await,
        Op::ToolStarted {
            session_id,
            turn_id,
            call_id,
        } => {
            let sql = "INSERT INTO tools (call_id, session_id, turn_id, state)
                       VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";
            let running = ToolState::Running.as_str();
            tx.execute(sql, &[&call_id, &session_id, &turn_id, &running])
                .await
                .map(drop)
        }
        Op::ToolCompleted { call_id } => {
            let sql = "UPDATE tools SET state = $2 WHERE call_id = $1";
            let completed = ToolState::Completed.as_str();
            tx.execute(sql, &[&call_id, &completed]).await.map(drop)
        }
        Op::QuestionAsked {
            session_id,
            turn_id,
            question_id,
        } => {
            let sql = "INSERT INTO questions (question_id, session_id, turn_id, state)
                       VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";
            let pending = QuestionState::Pending.as_str();
            tx.execute(sql, &[&question_id, &session_id, &turn_id, &pending])
                .await
                .map(drop)
        }
        Op::QuestionClosed { question_id, to } => {
            let sql = "UPDATE questions SET state = $2 WHERE question_id = $1";
            tx.execute(sql, &[&question_id, &to.as_str()])
                .await
                .map(drop)
        }
        Op::ProcessStarted {
            process_id,
            command,
        } => {
            let sql = "INSERT INTO processes (process_id, command, state, owner, lease_until)
                       VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
                       ON CONFLICT DO NOTHING";
            let running = ProcessState::Running.as_str();
            let args: [&(dyn ToSql + Sync); 5] =
                [&process_id, &command, &running, &owner, &holder.lease_secs];
            tx.execute(sql, &args).await.map(drop)
        }
    }
}
