//! What both backends read, as typed rows, and the one builder of each
//! answer made from them: event pages within a [`Budget`], a session's
//! [`TasksSnapshot`], the processes. Each backend only runs its query and
//! copies the columns into these rows.

use replay_core::protocol::{
    BackgroundWait, Envelope, Event, Scope, Task, TaskState, TasksSnapshot,
};

use super::{ProcessState, StoreResult};

/// How much one page may hold: at most `events` events and, past the
/// first, at most `bytes` of encoded events (each counted as its data, type
/// and scope id plus [`ENVELOPE_BYTES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most events.
    pub events: usize,
    /// Most bytes; the first event is taken whatever its size, so a page
    /// always moves the cursor.
    pub bytes: usize,
}

impl Budget {
    /// The rows a page query asks for: one more than fit, to learn whether
    /// more follow.
    pub fn query_limit(self) -> i64 {
        i64::try_from(self.events.saturating_add(1)).unwrap_or(i64::MAX)
    }
}

/// What a JSON envelope adds around an event's data, type and scope id
/// (`id`, `seq`, `ts`, `critical`, field names), rounded up.
pub const ENVELOPE_BYTES: usize = 160;

/// Events within a [`Budget`], and whether more follow.
#[derive(Debug, Default, PartialEq)]
pub struct Page {
    /// Ascending.
    pub events: Vec<Envelope>,
    /// Another event follows the last one (the budget stopped the page).
    pub more: bool,
}

/// One row of the events table, its data still undecoded.
pub struct EventRow {
    /// Global id.
    pub id: u64,
    /// Seq in its log.
    pub seq: u64,
    /// Event type.
    pub ty: String,
    /// When it was appended.
    pub ts: String,
    /// Event data (JSON text).
    pub data: String,
    /// Its log.
    pub scope: Scope,
    /// Its log's id.
    pub scope_id: String,
}

impl EventRow {
    /// The event decoded, in its envelope.
    pub fn into_envelope(self) -> StoreResult<Envelope> {
        let event = Event::decode(&self.ty, Some(&self.data))?;
        Ok(Envelope::durable(
            self.id,
            self.scope,
            self.scope_id,
            self.seq,
            self.ts,
            event,
        ))
    }
}

/// Fills a [`Page`] from rows in order, decoding only those that fit.
pub struct PageBuilder {
    budget: Budget,
    bytes: usize,
    page: Page,
}

impl PageBuilder {
    /// An empty page within `budget`.
    pub fn new(budget: Budget) -> PageBuilder {
        PageBuilder {
            budget,
            bytes: 0,
            page: Page::default(),
        }
    }

    /// Takes the next row if it fits; `false` once the page is full (it
    /// then says more follow, and the caller stops reading).
    pub fn offer(&mut self, row: EventRow) -> StoreResult<bool> {
        let size = row.data.len() + row.ty.len() + row.scope_id.len() + ENVELOPE_BYTES;
        let events = &self.page.events;
        let over_bytes = !events.is_empty() && self.bytes.saturating_add(size) > self.budget.bytes;
        if events.len() >= self.budget.events || over_bytes {
            self.page.more = true;
            return Ok(false);
        }
        self.bytes = self.bytes.saturating_add(size);
        self.page.events.push(row.into_envelope()?);
        Ok(true)
    }

    /// The page.
    pub fn finish(self) -> Page {
        self.page
    }
}

/// A stored `background_wait` column (JSON of an `Option`, or NULL).
pub fn background_wait(column: Option<&str>) -> StoreResult<Option<BackgroundWait>> {
    Ok(match column {
        Some(s) => serde_json::from_str(s)?,
        None => None,
    })
}

/// A session's task state from its row (`tasks_version`, `background_wait`;
/// none for a session without one) and its tasks' JSON, in order.
pub fn tasks_snapshot<S: AsRef<str>>(
    session: Option<(u64, Option<String>)>,
    tasks: impl IntoIterator<Item = S>,
) -> StoreResult<TasksSnapshot> {
    let (version, bg) = session.unwrap_or((0, None));
    let tasks = tasks
        .into_iter()
        .map(|json| serde_json::from_str::<Task>(json.as_ref()))
        .collect::<Result<_, _>>()?;
    Ok(TasksSnapshot {
        version,
        tasks,
        background_wait: background_wait(bg.as_deref())?,
    })
}

/// True for a task still to run or running (its lease is renewed).
pub fn task_is_open(task: &Task) -> bool {
    matches!(task.state, TaskState::Queued | TaskState::Running)
}

/// The sessions, in first-seen order, of the open tasks among `(session_id,
/// task JSON)` rows.
pub fn sessions_with_open_tasks<S: AsRef<str>>(
    rows: impl IntoIterator<Item = (String, S)>,
) -> StoreResult<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for (sid, json) in rows {
        let task: Task = serde_json::from_str(json.as_ref())?;
        if task_is_open(&task) && !out.contains(&sid) {
            out.push(sid);
        }
    }
    Ok(out)
}

/// A row of the processes projection.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProcessRow {
    /// The process.
    pub process_id: String,
    /// Its command line.
    pub command: String,
    /// Where it is.
    pub state: ProcessState,
    /// Exit code once exited.
    pub exit_code: Option<i64>,
    /// Bytes of output logged.
    pub log_bytes: u64,
}

/// A process's whole output log and its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessLog {
    /// The output, as appended.
    pub log: String,
    /// Where the process is.
    pub state: ProcessState,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, data: &str) -> EventRow {
        EventRow {
            id,
            seq: id,
            ty: "session.closed".into(),
            ts: "t".into(),
            data: data.into(),
            scope: Scope::Session,
            scope_id: "s".into(),
        }
    }

    #[test]
    fn a_page_stops_at_its_event_budget_and_says_more_follow() {
        let mut b = PageBuilder::new(Budget {
            events: 2,
            bytes: usize::MAX,
        });
        assert!(b.offer(row(1, "{}")).unwrap());
        assert!(b.offer(row(2, "{}")).unwrap());
        assert!(!b.offer(row(3, "{}")).unwrap());
        let page = b.finish();
        assert_eq!(page.events.len(), 2);
        assert!(page.more);
    }

    #[test]
    fn the_first_event_is_taken_whatever_its_size() {
        let mut b = PageBuilder::new(Budget {
            events: 10,
            bytes: 1,
        });
        assert!(b.offer(row(1, "{}")).unwrap());
        assert!(!b.offer(row(2, "{}")).unwrap());
        assert_eq!(b.finish().events.len(), 1);
    }

    #[test]
    fn a_row_not_taken_is_not_decoded() {
        let mut b = PageBuilder::new(Budget {
            events: 0,
            bytes: usize::MAX,
        });
        assert!(!b.offer(row(1, "not json")).unwrap());
    }

    #[test]
    fn a_session_without_a_row_has_no_tasks() {
        let none: [&str; 0] = [];
        let snap = tasks_snapshot(None, none).unwrap();
        assert_eq!((snap.version, snap.tasks.len()), (0, 0));
        assert!(snap.background_wait.is_none());
        assert!(background_wait(Some("null")).unwrap().is_none());
    }
}
