//! Postgres as the store's [`Backend`], [`Reads`] and [`View`]: the
//! synchronous interface over [`PgDb`]'s methods and [`read`]'s queries,
//! each run to completion with [`block`]. A read on the writer begins a
//! snapshot of its own.

use std::sync::Arc;

use replay_core::protocol::{BackgroundWait, Envelope, Event, Scope, Task, TasksSnapshot};

use super::{block, read, PgDb, PgSnapshot};
use crate::store::{
    Backend, Budget, ExpiredTasks, LogInfo, OpenQuestion, OpenTool, OpenTurn, Page, ProcessLog,
    ProcessRow, QuestionState, Reads, StoreResult, TurnState, View,
};

impl Reads for PgSnapshot {
    fn page_within(
        &self,
        scope: Scope,
        scope_id: &str,
        after: u64,
        budget: Budget,
    ) -> StoreResult<Page> {
        block(read::page_within(
            self.client(),
            scope,
            scope_id,
            after,
            budget,
        ))
    }
    fn global_page_within(&self, after_id: u64, budget: Budget) -> StoreResult<Page> {
        block(read::global_page_within(self.client(), after_id, budget))
    }
    fn log_bytes(&self, scope: Scope, scope_id: &str) -> StoreResult<u64> {
        block(read::log_bytes(self.client(), scope, scope_id))
    }
    fn tasks(&self, session_id: &str) -> StoreResult<TasksSnapshot> {
        block(read::tasks(self.client(), session_id))
    }
    fn processes(&self) -> StoreResult<Vec<ProcessRow>> {
        block(read::processes(self.client()))
    }
    fn process_log(&self, process_id: &str) -> StoreResult<Option<ProcessLog>> {
        block(read::process_log(self.client(), process_id))
    }
    fn counts(&self) -> StoreResult<(u64, u64)> {
        block(read::counts(self.client()))
    }
    fn boot_count(&self) -> StoreResult<u64> {
        block(read::boot_count(self.client()))
    }
}

impl View for PgSnapshot {
    fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        block(read::log_info(self.client(), scope, scope_id))
    }
    fn global_info(&self) -> StoreResult<LogInfo> {
        block(read::global_info(self.client()))
    }
}

/// A snapshot of its own for one read on the writer.
fn fresh(db: &PgDb) -> StoreResult<PgSnapshot> {
    block(PgSnapshot::begin(db.pool()))
}

impl Reads for Arc<PgDb> {
    fn page_within(
        &self,
        scope: Scope,
        scope_id: &str,
        after: u64,
        budget: Budget,
    ) -> StoreResult<Page> {
        fresh(self)?.page_within(scope, scope_id, after, budget)
    }
    fn global_page_within(&self, after_id: u64, budget: Budget) -> StoreResult<Page> {
        fresh(self)?.global_page_within(after_id, budget)
    }
    fn log_bytes(&self, scope: Scope, scope_id: &str) -> StoreResult<u64> {
        fresh(self)?.log_bytes(scope, scope_id)
    }
    fn tasks(&self, session_id: &str) -> StoreResult<TasksSnapshot> {
        fresh(self)?.tasks(session_id)
    }
    fn processes(&self) -> StoreResult<Vec<ProcessRow>> {
        fresh(self)?.processes()
    }
    fn process_log(&self, process_id: &str) -> StoreResult<Option<ProcessLog>> {
        fresh(self)?.process_log(process_id)
    }
    fn counts(&self) -> StoreResult<(u64, u64)> {
        fresh(self)?.counts()
    }
    fn boot_count(&self) -> StoreResult<u64> {
        fresh(self)?.boot_count()
    }
}

/// The node's writer, shared with the [`crate::log::Log`] (which appends
/// through [`PgDb`] directly, without the writer's lock): its methods take
/// `&self`, so the `&mut` of the interface is not needed here.
impl Backend for Arc<PgDb> {
    fn global_info(&self) -> LogInfo {
        LogInfo {
            epoch: self.global_epoch().to_owned(),
            head: 0,
        }
    }
    fn log_info(&self, scope: Scope, scope_id: &str) -> StoreResult<Option<LogInfo>> {
        PgDb::log_info(self, scope, scope_id)
    }
    fn shared(&self) -> bool {
        true
    }
    fn fail_expired_processes(&mut self) -> StoreResult<Vec<Envelope>> {
        PgDb::fail_expired_processes(self)
    }
    fn fail_expired_tasks(&mut self) -> StoreResult<Vec<ExpiredTasks>> {
        PgDb::fail_expired_tasks(self)
    }
    fn next_number(&mut self, name: &str) -> StoreResult<u64> {
        PgDb::next_number(self, name)
    }
    fn append(&mut self, scope: Scope, scope_id: &str, event: &Event) -> StoreResult<Envelope> {
        PgDb::append(self, scope, scope_id, event)
    }
    fn insert_session(&mut self, session_id: &str, title: &str) -> StoreResult<()> {
        PgDb::insert_session(self, session_id, title)
    }
    fn turn_for_message(&self, session_id: &str, message_id: &str) -> StoreResult<Option<String>> {
        PgDb::turn_for_message(self, session_id, message_id)
    }
    fn accept_message(
        &mut self,
        session_id: &str,
        turn_id: &str,
        message_id: &str,
        text: &str,
    ) -> StoreResult<Envelope> {
        PgDb::accept_message(self, session_id, turn_id, message_id, text)
    }
    fn turn_state(&self, turn_id: &str) -> StoreResult<Option<TurnState>> {
        PgDb::turn_state(self, turn_id)
    }
    fn open_turns(&self) -> StoreResult<Vec<OpenTurn>> {
        PgDb::open_turns(self)
    }
    fn open_questions(&self) -> StoreResult<Vec<OpenQuestion>> {
        PgDb::open_questions(self)
    }
    fn question_state(&self, question_id: &str) -> StoreResult<Option<(String, QuestionState)>> {
        PgDb::question_state(self, question_id)
    }
    fn open_tools(&self) -> StoreResult<Vec<OpenTool>> {
        PgDb::open_tools(self)
    }
    fn append_process_log(&mut self, process_id: &str, text: &str) -> StoreResult<u64> {
        PgDb::append_process_log(self, process_id, text)
    }
    fn put_tasks(
        &mut self,
        session_id: &str,
        tasks: &[Task],
        background_wait: Option<&BackgroundWait>,
    ) -> StoreResult<TasksSnapshot> {
        PgDb::put_tasks(self, session_id, tasks, background_wait)
    }
    fn sessions_with_open_tasks(&self) -> StoreResult<Vec<String>> {
        PgDb::sessions_with_open_tasks(self)
    }
    fn insert_boot(&mut self, boot_id: &str) -> StoreResult<()> {
        self.set_owner(boot_id);
        PgDb::insert_boot(self, boot_id)
    }
    fn set_recovery(&mut self, boot_id: &str, report: &serde_json::Value) -> StoreResult<()> {
        PgDb::set_recovery(self, boot_id, report)
    }
    fn synchronous(&self) -> StoreResult<String> {
        PgDb::synchronous(self)
    }
}
