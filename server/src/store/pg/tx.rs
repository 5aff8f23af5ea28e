//! A write transaction that numbers its events at commit (see the module
//! docs of `pg`): `BEGIN` goes out with the first statement, every
//! statement is prepared once per connection, and the statement that takes
//! the global counter's row lock, inserts the events and `COMMIT` (and the
//! wake-up `NOTIFY` after it) are sent together: that lock is held for one
//! statement and a commit inside Postgres, never across a round trip.

use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use replay_core::protocol::{Envelope, Event, Scope};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{big, unsigned, wakeup, CHANNEL};
use crate::store::{StoreError, StoreResult};

/// Numbers `n` events at once, in commit order: the counter's row lock is
/// taken here, in the statement pipelined with `COMMIT`.
const INSERT_EVENTS: &str = "
WITH c AS (UPDATE counters SET value = value + $1 WHERE name = '$events' RETURNING value)
INSERT INTO events (id, scope, scope_id, seq, type, ts, data)
SELECT c.value - $1 + e.ord, e.scope, e.scope_id, e.seq, e.type, e.ts, e.data
  FROM c, unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[])
       WITH ORDINALITY AS e(scope, scope_id, seq, type, ts, data, ord)
RETURNING id";

/// The wake-up sent after the commit, in a transaction of its own (see
/// [`super::wakeup`]): the tag, then the group's first id, looked up by its
/// first event's log and seq (the ids are given in this same round trip),
/// then the rest. No such row (the group did not commit): the tag alone.
const WAKE: &str = "
SELECT pg_notify($1::text, $2::text || COALESCE(' ' || (SELECT id FROM events
         WHERE scope = $3::text AND scope_id = $4::text AND seq = $5::bigint)::text || $6::text, ''))";

/// A committed event and its log's epoch.
pub type Committed = (Envelope, String);

/// An event whose log seq is taken (its log's row lock held) and whose
/// projections are written, waiting for its id at commit.
pub struct Staged {
    /// Its log.
    pub scope: Scope,
    /// Its log's id.
    pub scope_id: String,
    /// Its seq in that log.
    pub seq: u64,
    /// That log's epoch.
    pub epoch: String,
    /// When it was appended.
    pub ts: String,
    /// The event.
    pub event: Event,
}

/// One write transaction on a pooled connection. Ended by
/// [`WriteTx::commit`] or [`WriteTx::rollback`]; dropped otherwise (a
/// panic, a cancelled future), its connection is closed instead of going
/// back to the pool mid-transaction.
pub struct WriteTx {
    client: Option<Object>,
    begun: bool,
    /// The wake-up's payload: the writing node's tag (its own follower
    /// skips it: the writer publishes its own events).
    node: Arc<str>,
}

impl WriteTx {
    /// A transaction on a connection of `pool` (`BEGIN` is sent with the
    /// first statement), written by the node tagged `node`.
    pub async fn begin(pool: &Pool, node: &Arc<str>) -> StoreResult<WriteTx> {
        Ok(WriteTx {
            client: Some(pool.get().await?),
            begun: false,
            node: Arc::clone(node),
        })
    }

    /// Rows of `sql` (prepared once per connection).
    pub async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        let c = self.client.as_ref().expect("a transaction not ended");
        let stmt = c.prepare_cached(sql).await?;
        after_begin(c, &mut self.begun, c.query(&stmt, params)).await
    }

    /// The one row of `sql`, if any.
    pub async fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Option<Row>> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Rows changed by `sql`.
    pub async fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
        let c = self.client.as_ref().expect("a transaction not ended");
        let stmt = c.prepare_cached(sql).await?;
        after_begin(c, &mut self.begun, c.execute(&stmt, params)).await
    }

    /// Rolls back (writes nothing).
    pub async fn rollback(mut self) {
        if let Some(c) = self.client.take() {
            if !self.begun || c.batch_execute("ROLLBACK").await.is_ok() {
                drop(c); // clean: back to the pool
            } else {
                drop(Object::take(c)); // unknown state: closed
            }
        }
    }

    /// Numbers `staged` with the next ids, inserts them and commits, in
    /// one round trip, then wakes every node (`NOTIFY` after the commit,
    /// outside the transaction: the instance-wide notify lock is never
    /// held with the append locks). Returns the envelopes, in order.
    pub async fn commit(self, staged: Vec<Staged>) -> StoreResult<Vec<Envelope>> {
        Ok(self
            .commit_with_epochs(staged)
            .await?
            .into_iter()
            .map(|(env, _)| env)
            .collect())
    }

    /// [`WriteTx::commit`], each envelope with its log's epoch (what a
    /// node needs to publish it without reading it back).
    pub async fn commit_with_epochs(mut self, staged: Vec<Staged>) -> StoreResult<Vec<Committed>> {
        let c = self.client.take().expect("a transaction not ended");
        match commit_on(&c, self.begun, &staged, &self.node).await {
            Ok(first) => Ok(staged
                .into_iter()
                .zip(0u64..)
                .map(|(s, k)| {
                    let env =
                        Envelope::durable(first + k, s.scope, s.scope_id, s.seq, s.ts, s.event);
                    (env, s.epoch)
                })
                .collect()),
            Err(e) => {
                // Whether it committed is unknown: the connection is not reused.
                drop(Object::take(c));
                Err(e)
            }
        }
    }
}

/// Runs `request`, with `BEGIN` sent before it in the same round trip if
/// the transaction has not begun yet.
async fn after_begin<T>(
    c: &Object,
    begun: &mut bool,
    request: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> StoreResult<T> {
    if *begun {
        return Ok(request.await?);
    }
    *begun = true;
    let (begin, out) = tokio::join!(c.batch_execute("BEGIN"), request);
    begin?;
    Ok(out?)
}

/// [`WriteTx::commit`]'s round trip; returns the first id.
async fn commit_on(c: &Object, begun: bool, staged: &[Staged], node: &str) -> StoreResult<u64> {
    let insert = c.prepare_cached(INSERT_EVENTS).await?;
    let notify = c.prepare_cached(WAKE).await?;
    let n = big(staged.len() as u64);
    let scopes: Vec<&str> = staged.iter().map(|s| s.scope.as_str()).collect();
    let ids: Vec<&str> = staged.iter().map(|s| s.scope_id.as_str()).collect();
    let seqs: Vec<i64> = staged.iter().map(|s| big(s.seq)).collect();
    let types: Vec<&str> = staged.iter().map(|s| s.event.type_name()).collect();
    let tss: Vec<&str> = staged.iter().map(|s| s.ts.as_str()).collect();
    let datas: Vec<String> = staged.iter().map(|s| s.event.data_json()).collect();
    let params: [&(dyn ToSql + Sync); 7] = [&n, &scopes, &ids, &seqs, &types, &tss, &datas];
    let body = wakeup::body(node, staged, &datas);
    let (scope, scope_id, seq) = staged.first().map_or(("", "", 0), |s| {
        (s.scope.as_str(), s.scope_id.as_str(), big(s.seq))
    });
    let wake: [&(dyn ToSql + Sync); 6] = [&CHANNEL, &node, &scope, &scope_id, &seq, &body];
    let begin = async {
        if !begun {
            c.batch_execute("BEGIN").await?;
        }
        Ok::<_, tokio_postgres::Error>(())
    };
    // Sent together; Postgres runs them in order. After a failed INSERT
    // the COMMIT only ends the aborted transaction.
    let (begin, rows, commit, _woken) = tokio::join!(
        begin,
        c.query(&insert, &params),
        c.batch_execute("COMMIT"),
        c.execute(&notify, &wake),
    );
    begin?;
    let rows = rows?;
    commit?;
    let first = rows
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .min()
        .ok_or_else(|| StoreError::Backend("an append inserted no event".into()))?;
    Ok(unsigned(first))
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            if self.begun {
                drop(Object::take(c));
            }
        }
    }
}
