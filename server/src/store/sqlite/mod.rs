//! The SQLite store (`--db FILE`, `:memory:`): one writer connection
//! ([`SqliteDb`], callers hold it behind one mutex so that commit order is
//! publish order) and read transactions ([`SqliteSnapshot`]) on it or on a
//! [`ReadPool`] of read-only connections (WAL).

mod append;
mod pool;
mod read;
mod records;

use std::collections::HashMap;

use replay_core::protocol::{
    BackgroundWait, Envelope, Event, MessageCommitted, Role, Scope, Task, TasksSnapshot,
};
use rusqlite::{params, Connection, OptionalExtension};

use super::rows;
use super::{
    scope_from_str, Backend, LogInfo, OpenQuestion, OpenTool, OpenTurn, QuestionState, Reads,
    StoreResult, TurnState,
};
use crate::util::{now_rfc3339, random_id};
use append::append_in;
pub use pool::ReadPool;
use read::SqlConn;
pub use read::SqliteSnapshot;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS logs (
  scope TEXT NOT NULL, scope_id TEXT NOT NULL, epoch TEXT NOT NULL,
  head INTEGER NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (scope, scope_id));
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, scope_id TEXT NOT NULL,
  seq INTEGER NOT NULL, type TEXT NOT NULL, ts TEXT NOT NULL, data TEXT NOT NULL,
  UNIQUE (scope, scope_id, seq));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, title TEXT NOT NULL, created_at TEXT NOT NULL,
  tasks_version INTEGER NOT NULL DEFAULT 0, background_wait TEXT);
CREATE TABLE IF NOT EXISTS turns (
  turn_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, message_id TEXT NOT NULL,
  text TEXT NOT NULL, state TEXT NOT NULL, UNIQUE (session_id, message_id));
CREATE TABLE IF NOT EXISTS tools (
  call_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS questions (
  question_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS processes (
  process_id TEXT PRIMARY KEY, command TEXT NOT NULL, state TEXT NOT NULL,
  exit_code INTEGER, log TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, ord INTEGER NOT NULL, json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS boots (boot_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, recovery TEXT);
CREATE TABLE IF NOT EXISTS records (
  kind TEXT NOT NULL, id TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (kind, id));
"#;

/// How a commit reaches the disk (SQLite's `synchronous` in WAL mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// Every commit is on disk (the WAL is synced) before it is published,
    /// so a power loss cannot take back a seq that a client already applied.
    #[default]
    Full,
    /// Commits survive a killed process, but a power loss may lose the
    /// newest ones, whose seqs then come back with other content under the
    /// same epoch. For throwaway stores and bulk test fills.
    Normal,
}

impl Synchronous {
    /// The pragma's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Synchronous::Full => "full",
            Synchronous::Normal => "normal",
        }
    }
}

/// The SQLite store: a connection plus cached heads (the connection is the truth).
pub struct SqliteDb {
    conn: Connection,
    logs: HashMap<(Scope, String), LogInfo>,
    global: LogInfo,
    /// Logs created or appended to since the last [`SqliteDb::take_changed`].
    changed: Vec<(Scope, String)>,
}

impl SqliteDb {
    /// Every row of a parameterless query, mapped.
    fn all<T>(
        &self,
        sql: &str,
        map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> StoreResult<Vec<T>> {
        let mut st = self.conn.prepare(sql)?;
        let rows = st.query_map([], map)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Opens (or creates) the database at `path`; `:memory:` for a throwaway one.
    pub fn open(path: &str, sync: Synchronous) -> StoreResult<SqliteDb> {
        let conn = if path == ":memory:" {
            Connection::open_in_memory()?
        } else {
            Connection::open(path)?
        };
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // FULL by default: see `Synchronous`; what it costs is in docs/server.md.
        conn.pragma_update(None, "synchronous", sync.as_str())?;
        conn.pragma_update(None, "busy_timeout", 5000)?;
        conn.execute_batch(SCHEMA)?;
        let global_epoch: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let global_epoch = match global_epoch {
            Some(e) => e,
            None => {
                let e = random_id("e");
                conn.execute("INSERT INTO meta (key, value) VALUES ('epoch', ?1)", [&e])?;
                e
            }
        };
        let global_head: u64 =
            conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))?;
        let mut logs = HashMap::new();
        {
            let mut st = conn.prepare("SELECT scope, scope_id, epoch, head FROM logs")?;
            let rows = st.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u64>(3)?,
                ))
            })?;
            for row in rows {
                let (scope, id, epoch, head) = row?;
                logs.insert((scope_from_str(&scope), id), LogInfo { epoch, head });
            }
        }
        Ok(SqliteDb {
            conn,
            changed: logs.keys().cloned().collect(),
            logs,
            global: LogInfo {
                epoch: global_epoch,
                head: global_head,
            },
        })
    }

    /// Creates the log if needed (a new log gets a new epoch).
    fn ensure_log(&mut self, scope: Scope, scope_id: &str) -> StoreResult<LogInfo> {
        if let Some(info) = self.cached_log_info(scope, scope_id) {
            return Ok(info);
        }
        let info = LogInfo {
            epoch: random_id("e"),
            head: 0,
        };
        self.conn.execute(
            "INSERT INTO logs (scope, scope_id, epoch, head, created_at) VALUES (?1, ?2, ?3, 0, ?4)",
            params![scope.as_str(), scope_id, info.epoch, now_rfc3339()],
        )?;
        self.logs.insert((scope, scope_id.to_owned()), info.clone());
        self.changed.push((scope, scope_id.to_owned()));
        Ok(info)
    }

    /// Moves the cached heads to an event just committed.
    fn appended(&mut self, env: Envelope) -> Envelope {
        let key = (env.scope, env.scope_id.clone());
        if let Some(info) = self.logs.get_mut(&key) {
            info.head = env.seq.unwrap_or(info.head);
        }
        self.changed.push(key);
        self.global.head = env.id.unwrap_or(self.global.head);
        env
    }

    /// A read transaction on the writer's own connection (the single-connection
    /// store, `:memory:`); the caller holds the store lock while it lives.
    pub fn snapshot(&self) -> StoreResult<SqliteSnapshot<'_>> {
        SqliteSnapshot::begin(&self.conn)
    }
}

/// The writer: every method runs on its one connection, under the store
/// lock the caller holds; a write of several rows is one transaction.
impl Backend for SqliteDb {
    fn global_info(&self) -> LogInfo {
        self.global.clone()
    }

    fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        Ok(self.cached_log_info(scope, scope_id))
    }

    /// From the cached heads (no query: this connection is the only writer).
    fn cached_log_info(&self, scope: Scope, scope_id: &str) -> Option<LogInfo> {
        self.logs.get(&(scope, scope_id.to_owned())).cloned()
    }

    fn next_number(&mut self, name: &str) -> StoreResult<u64> {
        Ok(self.conn.query_row(
            "INSERT INTO counters (name, value) VALUES (?1, 1)
             ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value",
            [name],
            |r| r.get(0),
        )?)
    }

    fn append(&mut self, scope: Scope, scope_id: &str, event: &Event) -> StoreResult<Envelope> {
        self.ensure_log(scope, scope_id)?;
        let tx = self.conn.transaction()?;
        let env = append_in(&tx, scope, scope_id, event)?;
        tx.commit()?;
        Ok(self.appended(env))
    }

    fn insert_session(&mut self, session_id: &str, title: &str) -> StoreResult<()> {
        self.conn.execute(
            "INSERT INTO sessions (session_id, title, created_at) VALUES (?1, ?2, ?3)",
            params![session_id, title, now_rfc3339()],
        )?;
        Ok(())
    }

    fn turn_for_message(&self, session_id: &str, message_id: &str) -> StoreResult<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT turn_id FROM turns WHERE session_id = ?1 AND message_id = ?2",
                params![session_id, message_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn accept_message(
        &mut self,
        session_id: &str,
        turn_id: &str,
        message_id: &str,
        text: &str,
    ) -> StoreResult<Envelope> {
        self.ensure_log(Scope::Session, session_id)?;
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO turns (turn_id, session_id, message_id, text, state) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![turn_id, session_id, message_id, text, TurnState::Queued.as_str()],
        )?;
        let event = Event::MessageCommitted(MessageCommitted {
            message_id: message_id.to_owned(),
            turn_id: turn_id.to_owned(),
            role: Role::User,
            text: text.to_owned(),
        });
        let env = append_in(&tx, Scope::Session, session_id, &event)?;
        tx.commit()?;
        Ok(self.appended(env))
    }

    fn turn_state(&self, turn_id: &str) -> StoreResult<Option<TurnState>> {
        let state: Option<String> = self
            .conn
            .query_row(
                "SELECT state FROM turns WHERE turn_id = ?1",
                [turn_id],
                |r| r.get(0),
            )
            .optional()?;
        state.as_deref().map(TurnState::parse).transpose()
    }

    fn open_turns(&self) -> StoreResult<Vec<OpenTurn>> {
        self.all(
            "SELECT session_id, turn_id FROM turns WHERE state IN ('queued', 'running') ORDER BY rowid",
            |r| {
                Ok(OpenTurn {
                    session_id: r.get(0)?,
                    turn_id: r.get(1)?,
                })
            },
        )
    }

    fn open_questions(&self) -> StoreResult<Vec<OpenQuestion>> {
        self.all(
            "SELECT session_id, turn_id, question_id FROM questions WHERE state = 'pending' ORDER BY rowid",
            |r| {
                Ok(OpenQuestion {
                    session_id: r.get(0)?,
                    turn_id: r.get(1)?,
                    question_id: r.get(2)?,
                })
            },
        )
    }

    fn question_state(&self, question_id: &str) -> StoreResult<Option<(String, QuestionState)>> {
        let found: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT session_id, state FROM questions WHERE question_id = ?1",
                [question_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        found
            .map(|(sid, state)| Ok((sid, QuestionState::parse(&state)?)))
            .transpose()
    }

    fn open_tools(&self) -> StoreResult<Vec<OpenTool>> {
        self.all(
            "SELECT session_id, turn_id, call_id FROM tools WHERE state = 'running' ORDER BY rowid",
            |r| {
                Ok(OpenTool {
                    session_id: r.get(0)?,
                    turn_id: r.get(1)?,
                    call_id: r.get(2)?,
                })
            },
        )
    }

    fn append_process_log(&mut self, process_id: &str, text: &str) -> StoreResult<u64> {
        Ok(self.conn.query_row(
            "UPDATE processes SET log = log || ?2 WHERE process_id = ?1
             RETURNING length(CAST(log AS BLOB)) - length(CAST(?2 AS BLOB))",
            params![process_id, text],
            |r| r.get(0),
        )?)
    }

    fn put_tasks(
        &mut self,
        session_id: &str,
        tasks: &[Task],
        background_wait: Option<&BackgroundWait>,
    ) -> StoreResult<TasksSnapshot> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM tasks WHERE session_id = ?1", [session_id])?;
        for (i, t) in tasks.iter().enumerate() {
            tx.execute(
                "INSERT INTO tasks (task_id, session_id, ord, json) VALUES (?1, ?2, ?3, ?4)",
                params![t.task_id, session_id, i as i64, serde_json::to_string(t)?],
            )?;
        }
        let bg = serde_json::to_string(&background_wait)?;
        tx.execute(
            "UPDATE sessions SET tasks_version = tasks_version + 1, background_wait = ?2 WHERE session_id = ?1",
            params![session_id, bg],
        )?;
        tx.commit()?;
        self.tasks(session_id)
    }

    fn sessions_with_open_tasks(&self) -> StoreResult<Vec<String>> {
        let rows = self.all("SELECT DISTINCT session_id, json FROM tasks", |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        rows::sessions_with_open_tasks(rows)
    }

    fn insert_boot(&mut self, boot_id: &str) -> StoreResult<()> {
        self.conn.execute(
            "INSERT INTO boots (boot_id, started_at) VALUES (?1, ?2)",
            params![boot_id, now_rfc3339()],
        )?;
        Ok(())
    }

    fn set_recovery(&mut self, boot_id: &str, report: &serde_json::Value) -> StoreResult<()> {
        self.conn.execute(
            "UPDATE boots SET recovery = ?2 WHERE boot_id = ?1",
            params![boot_id, serde_json::to_string(report)?],
        )?;
        Ok(())
    }

    fn synchronous(&self) -> StoreResult<String> {
        let level: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        let name = match level {
            0 => "off",
            1 => "normal",
            2 => "full",
            _ => "extra",
        };
        Ok(name.to_owned())
    }

    fn take_changed(&mut self) -> Vec<((Scope, String), LogInfo)> {
        let keys = std::mem::take(&mut self.changed);
        keys.into_iter()
            .filter_map(|k| self.logs.get(&k).cloned().map(|i| (k, i)))
            .collect()
    }
}

/// The writer's own connection answers reads too (a `:memory:` store has
/// no other).
impl SqlConn for SqliteDb {
    fn conn(&self) -> &Connection {
        &self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Db, ProcessState};
    use replay_core::protocol::{ProcessStarted, SessionCreated, TurnRef};

    #[test]
    fn seq_is_dense_per_scope_and_ids_global() {
        let mut db = Db::Sqlite(SqliteDb::open(":memory:", Synchronous::Full).unwrap());
        let a1 = db
            .append(
                Scope::Session,
                "s1",
                &Event::SessionCreated(SessionCreated::default()),
            )
            .unwrap();
        let b1 = db
            .append(
                Scope::Session,
                "s2",
                &Event::SessionCreated(SessionCreated::default()),
            )
            .unwrap();
        let a2 = db
            .append(
                Scope::Session,
                "s1",
                &Event::TurnCompleted(TurnRef {
                    turn_id: "t".into(),
                }),
            )
            .unwrap();
        assert_eq!((a1.seq, b1.seq, a2.seq), (Some(1), Some(1), Some(2)));
        assert!(a1.id < b1.id && b1.id < a2.id);
        let page = db.page(Scope::Session, "s1", 0, 10).unwrap();
        assert_eq!(page, vec![a1, a2.clone()]);
        assert_eq!(db.page(Scope::Session, "s1", 1, 10).unwrap(), vec![a2]);
        assert_eq!(db.global_page(0, 10).unwrap().len(), 3);
        assert_eq!(db.log_info(Scope::Session, "s1").unwrap().unwrap().head, 2);
    }

    #[test]
    fn process_log_offsets_count_bytes() {
        let mut db = Db::Sqlite(SqliteDb::open(":memory:", Synchronous::Full).unwrap());
        db.append(
            Scope::Process,
            "p1",
            &Event::ProcessStarted(ProcessStarted {
                process_id: "p1".into(),
                command: "x".into(),
            }),
        )
        .unwrap();
        assert_eq!(db.append_process_log("p1", "é\n").unwrap(), 0);
        assert_eq!(db.append_process_log("p1", "ab").unwrap(), 3);
        assert_eq!(db.process_log("p1").unwrap().unwrap().log, "é\nab");
        assert_eq!(db.processes().unwrap()[0].state, ProcessState::Running);
    }

    #[test]
    fn heads_and_epochs_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("replay-store-{}", crate::util::entropy()));
        let path = dir.to_str().unwrap().to_owned();
        let epoch = {
            let mut db = Db::Sqlite(SqliteDb::open(&path, Synchronous::Full).unwrap());
            db.append(Scope::Team, "t", &Event::SessionClosed(Default::default()))
                .unwrap();
            db.log_info(Scope::Team, "t").unwrap().unwrap().epoch
        };
        let db = SqliteDb::open(&path, Synchronous::Full).unwrap();
        assert_eq!(
            db.cached_log_info(Scope::Team, "t"),
            Some(LogInfo { epoch, head: 1 })
        );
        drop(db);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
}
