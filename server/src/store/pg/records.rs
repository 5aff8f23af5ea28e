//! Postgres's answers to `store::records`.

use super::{block, PgDb};
use crate::store::StoreResult;

impl PgDb {
    pub(crate) fn put_record(&self, kind: &str, id: &str, value: &str) -> StoreResult<()> {
        let c = self.client()?;
        block(c.execute(
            "INSERT INTO records (kind, id, value) VALUES ($1, $2, $3)
             ON CONFLICT (kind, id) DO UPDATE SET value = excluded.value",
            &[&kind, &id, &value],
        ))?;
        Ok(())
    }

    pub(crate) fn records(&self, kind: &str) -> StoreResult<Vec<String>> {
        let c = self.client()?;
        let rows = block(c.query(
            "SELECT value FROM records WHERE kind = $1 ORDER BY row_no",
            &[&kind],
        ))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub(crate) fn record(&self, kind: &str, id: &str) -> StoreResult<Option<String>> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT value FROM records WHERE kind = $1 AND id = $2",
            &[&kind, &id],
        ))?;
        Ok(row.map(|r| r.get(0)))
    }

    pub(crate) fn session_ended(&self, session_id: &str) -> StoreResult<bool> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT 1 FROM events WHERE scope = 'session' AND scope_id = $1
               AND type IN ('session.closed', 'session.failed') LIMIT 1",
            &[&session_id],
        ))?;
        Ok(row.is_some())
    }

    pub(crate) fn session_busy(&self, session_id: &str) -> StoreResult<bool> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT 1 FROM turns WHERE session_id = $1
               AND state IN ('queued', 'running', 'failing') LIMIT 1",
            &[&session_id],
        ))?;
        Ok(row.is_some())
    }

    pub(crate) fn turn_input(&self, turn_id: &str) -> StoreResult<Option<(String, String)>> {
        let c = self.client()?;
        let row = block(c.query_opt(
            "SELECT message_id, text FROM turns WHERE turn_id = $1",
            &[&turn_id],
        ))?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// The turn (claimed by this node to end it) runs on this node again.
    pub(crate) fn adopt_turn(&self, turn_id: &str) -> StoreResult<()> {
        let c = self.client()?;
        block(c.execute(
            "UPDATE turns SET state = 'running' WHERE turn_id = $1 AND owner = $2",
            &[&turn_id, &&*self.owner()],
        ))?;
        Ok(())
    }
}
