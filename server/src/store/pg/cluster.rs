//! What the nodes of a cluster ask of each other through Postgres: whether
//! a turn may start (turns of one session run one at a time, in the order
//! they were accepted, whichever node accepted them), which turn of a
//! session is running, and commands (`NOTIFY` on [`COMMANDS`]) for the node
//! that holds a turn's live state.

use deadpool_postgres::Pool;

use super::super::StoreResult;

/// The notification channel of commands between nodes (JSON payloads).
pub const COMMANDS: &str = "replay_commands";

/// Whether a queued turn may start now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnGate {
    /// No turn of its session accepted before it is open.
    Go,
    /// A turn of its session accepted before it is still open (queued,
    /// running or being ended) on some node.
    Wait,
    /// It is no longer queued (another node ended it: its lease ran out).
    Gone,
}

/// Whether `turn_id` of `session_id` may start (see [`TurnGate`]).
pub async fn turn_gate(pool: &Pool, session_id: &str, turn_id: &str) -> StoreResult<TurnGate> {
    let c = pool.get().await?;
    let row = c
        .query_opt(
            "SELECT t.state = 'queued',
                    EXISTS (SELECT 1 FROM turns e
                             WHERE e.session_id = $1
                               AND e.state IN ('queued', 'running', 'failing')
                               AND e.row_no < t.row_no)
               FROM turns t WHERE t.turn_id = $2",
            &[&session_id, &turn_id],
        )
        .await?;
    Ok(
        match row.map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1))) {
            Some((true, false)) => TurnGate::Go,
            Some((true, true)) => TurnGate::Wait,
            _ => TurnGate::Gone,
        },
    )
}

/// The turn of `session_id` that a node is running, if any.
pub async fn running_turn(pool: &Pool, session_id: &str) -> StoreResult<Option<String>> {
    let c = pool.get().await?;
    let row = c
        .query_opt(
            "SELECT turn_id FROM turns WHERE session_id = $1 AND state = 'running'
             ORDER BY row_no LIMIT 1",
            &[&session_id],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Sends `payload` to every node listening on [`COMMANDS`] (this one too).
pub async fn notify_nodes(pool: &Pool, payload: &str) -> StoreResult<()> {
    let c = pool.get().await?;
    c.execute("SELECT pg_notify($1, $2)", &[&COMMANDS, &payload])
        .await?;
    Ok(())
}
