//! SQLite's answers to `store::records`.

use rusqlite::{params, OptionalExtension};

use super::SqliteDb;
use crate::store::StoreResult;

impl SqliteDb {
    pub(crate) fn put_record(&self, kind: &str, id: &str, value: &str) -> StoreResult<()> {
        // An upsert keeps the row (and its rowid: the creation order).
        self.conn.execute(
            "INSERT INTO records (kind, id, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (kind, id) DO UPDATE SET value = excluded.value",
            params![kind, id, value],
        )?;
        Ok(())
    }

    pub(crate) fn records(&self, kind: &str) -> StoreResult<Vec<String>> {
        let mut st = self
            .conn
            .prepare("SELECT value FROM records WHERE kind = ?1 ORDER BY rowid")?;
        let rows = st.query_map([kind], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub(crate) fn record(&self, kind: &str, id: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT value FROM records WHERE kind = ?1 AND id = ?2",
                [kind, id],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub(crate) fn session_ended(&self, session_id: &str) -> StoreResult<bool> {
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM events WHERE scope = 'session' AND scope_id = ?1
                   AND type IN ('session.closed', 'session.failed') LIMIT 1",
                [session_id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    pub(crate) fn session_busy(&self, session_id: &str) -> StoreResult<bool> {
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM turns WHERE session_id = ?1
                   AND state IN ('queued', 'running', 'failing') LIMIT 1",
                [session_id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    pub(crate) fn turn_input(&self, turn_id: &str) -> StoreResult<Option<(String, String)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT message_id, text FROM turns WHERE turn_id = ?1",
                [turn_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }
}
