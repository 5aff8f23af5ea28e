//! The runtime's records beside the logs: one JSON value per kind and id
//! (provider references, team deliveries, worktrees), kept in creation
//! order, plus the few lookups of the turns and sessions that startup
//! recovery and the team and worktree services need. Each backend answers
//! them in its own SQL (`sqlite::records`, `pg::records`); [`Db`] picks one.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Db, StoreResult};

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A session's provider reference (`provider::ProviderRef`).
    Provider,
    /// A team delivery (`team::DeliveryRecord`).
    Delivery,
    /// A worktree and its claim (`worktrees::WorktreeRecord`).
    Worktree,
}

impl RecordKind {
    /// The `kind` column's value.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Provider => "provider",
            RecordKind::Delivery => "delivery",
            RecordKind::Worktree => "worktree",
        }
    }
}

impl Db {
    /// Stores `value` as the record `(kind, id)`, replacing one there (it
    /// keeps its place in the creation order).
    pub fn put_record<T: Serialize>(
        &self,
        kind: RecordKind,
        id: &str,
        value: &T,
    ) -> StoreResult<()> {
        let json = serde_json::to_string(value)?;
        match self {
            Db::Sqlite(d) => d.put_record(kind.as_str(), id, &json),
            Db::Pg(d) => d.put_record(kind.as_str(), id, &json),
        }
    }

    /// Every record of `kind`, oldest first.
    pub fn records<T: DeserializeOwned>(&self, kind: RecordKind) -> StoreResult<Vec<T>> {
        let raw = match self {
            Db::Sqlite(d) => d.records(kind.as_str())?,
            Db::Pg(d) => d.records(kind.as_str())?,
        };
        raw.iter().map(|v| Ok(serde_json::from_str(v)?)).collect()
    }

    /// The record `(kind, id)`, if stored.
    pub fn record<T: DeserializeOwned>(
        &self,
        kind: RecordKind,
        id: &str,
    ) -> StoreResult<Option<T>> {
        let raw = match self {
            Db::Sqlite(d) => d.record(kind.as_str(), id)?,
            Db::Pg(d) => d.record(kind.as_str(), id)?,
        };
        raw.map(|v| Ok(serde_json::from_str(&v)?)).transpose()
    }

    /// True when the session's log holds `session.closed` or `session.failed`.
    pub fn session_ended(&self, session_id: &str) -> StoreResult<bool> {
        match self {
            Db::Sqlite(d) => d.session_ended(session_id),
            Db::Pg(d) => d.session_ended(session_id),
        }
    }

    /// True when the session has a turn not ended (queued, running, or
    /// being ended), on any node.
    pub fn session_busy(&self, session_id: &str) -> StoreResult<bool> {
        match self {
            Db::Sqlite(d) => d.session_busy(session_id),
            Db::Pg(d) => d.session_busy(session_id),
        }
    }

    /// The `message_id` and text of the user message that started a turn.
    pub fn turn_input(&self, turn_id: &str) -> StoreResult<Option<(String, String)>> {
        match self {
            Db::Sqlite(d) => d.turn_input(turn_id),
            Db::Pg(d) => d.turn_input(turn_id),
        }
    }

    /// Makes a turn that recovery claimed to end a running turn of this
    /// node again (it goes on: it waits for an answer). On SQLite recovery
    /// claims nothing: the turn is still `running`.
    pub fn adopt_turn(&self, turn_id: &str) -> StoreResult<()> {
        match self {
            Db::Sqlite(_) => Ok(()),
            Db::Pg(d) => d.adopt_turn(turn_id),
        }
    }
}
