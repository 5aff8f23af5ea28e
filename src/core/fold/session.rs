//! The session fold: committed items, prompts, tasks, the live overlay.

use std::mem::take;

use serde::{Deserialize, Serialize};

use super::extras::{self, Extra};
use super::hash::{IdMap, IdSet};
use super::overlay::{InterruptedTurn, Overlay};
use super::session_info::{SessionInfo, SessionState};
use super::ViewChange;
use crate::json::{FromJson, JsonError, Reader};
use crate::protocol::{
    Envelope, Event, LiveTurn, PendingPrompt, QuestionAsked, TasksSnapshot, ToolStatus, Transcript,
    TranscriptItem, REASON_WORKER_RESTART,
};

/// Reason recorded when a `hello` or replay names another runtime run.
pub const REASON_BOOT_CHANGED: &str = "boot_changed";

/// Persisted part of a [`SessionView`] (rule 1: what the log and the
/// runtime's snapshots gave): the items, the open questions as they were
/// asked, the last tasks snapshot, the runtime run that served them, what
/// the runtime said of the session, and the newest events of types the fold
/// does not know. The indices are rebuilt on load. Not part of it: the live
/// overlay and what the client saw of it (interrupted turns' partial text):
/// a restore gets the runtime's own `live_turn`.
#[derive(Deserialize)]
struct SessionData {
    items: Vec<TranscriptItem>,
    prompts: Vec<QuestionAsked>,
    tasks: TasksSnapshot,
    boot_id: String,
    session: SessionInfo,
    extras: Vec<Extra>,
}

/// A session folded for display.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "SessionData")]
pub struct SessionView {
    items: Vec<TranscriptItem>,
    /// Questions asked durably and still open, in order (in the log's own
    /// words: a `question` item takes their turn and prompt).
    prompts: Vec<QuestionAsked>,
    tasks: TasksSnapshot,
    boot_id: String,
    /// Title and state (`session.created`, `.closed`, `.failed`).
    session: SessionInfo,
    /// Durable events of types the fold does not know, newest last
    /// (at most [`extras::EXTRAS_MAX`]).
    extras: Vec<Extra>,
    // The rest is not persisted (`SessionData`).
    #[serde(skip)]
    overlay: Option<Overlay>,
    #[serde(skip)]
    interrupted: Vec<InterruptedTurn>,
    /// Questions answered or declined (a `question` item each, or ended
    /// before they were asked durably).
    #[serde(skip)]
    resolved_questions: IdSet,
    #[serde(skip)]
    tool_index: IdMap<usize>,
    #[serde(skip)]
    committed_messages: IdSet,
    #[serde(skip)]
    ended_turns: IdSet,
}

impl From<SessionData> for SessionView {
    fn from(d: SessionData) -> Self {
        let mut v = SessionView {
            items: d.items,
            prompts: d.prompts,
            tasks: d.tasks,
            boot_id: d.boot_id,
            session: d.session,
            extras: d.extras,
            ..SessionView::default()
        };
        v.index(0);
        v
    }
}

impl SessionView {
    /// Committed items in durable order.
    pub fn items(&self) -> &[TranscriptItem] {
        &self.items
    }

    /// The live overlay, if a turn is running.
    pub fn overlay(&self) -> Option<&Overlay> {
        self.overlay.as_ref()
    }

    /// Task state.
    pub fn tasks(&self) -> &TasksSnapshot {
        &self.tasks
    }

    /// Turns whose worker died, with the partial text that was shown.
    pub fn interrupted(&self) -> &[InterruptedTurn] {
        &self.interrupted
    }

    /// Whether the message `message_id` is committed.
    pub fn has_message(&self, message_id: &str) -> bool {
        self.committed_messages.contains(message_id)
    }

    /// Whether the question `question_id` ended (answered, declined, or
    /// with its turn before it was asked durably).
    pub fn question_resolved(&self, question_id: &str) -> bool {
        self.resolved_questions.contains(question_id)
    }

    /// How the turn `turn_id` ended (`completed`, `cancelled`, `failed`),
    /// `None` while it has not.
    pub fn turn_outcome(&self, turn_id: &str) -> Option<&str> {
        if !self.ended_turns.contains(turn_id) {
            return None;
        }
        self.items.iter().rev().find_map(|i| match i {
            TranscriptItem::TurnEnd {
                turn_id: t,
                outcome,
                ..
            } if t == turn_id => Some(outcome.as_str()),
            _ => None,
        })
    }

    /// The runtime run last seen.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// The session's title and state.
    pub fn session(&self) -> &SessionInfo {
        &self.session
    }

    /// Durable events of types the fold does not know, newest last.
    pub fn extras(&self) -> &[Extra] {
        &self.extras
    }

    /// Unanswered questions: persisted ones in order, then the live pending
    /// question (`persisted: false`) when it is not persisted yet.
    pub fn pending_prompts(&self) -> Vec<PendingPrompt> {
        let prompt = |question_id: &String, prompt: &String, options: &Vec<String>, persisted| {
            PendingPrompt {
                question_id: question_id.clone(),
                prompt: prompt.clone(),
                options: options.clone(),
                persisted,
            }
        };
        let mut out: Vec<PendingPrompt> = self
            .prompts
            .iter()
            .map(|q| prompt(&q.question_id, &q.prompt, &q.options, true))
            .collect();
        if let Some(q) = self
            .overlay
            .as_ref()
            .and_then(|o| o.pending_question.as_ref())
        {
            let known = self.resolved_questions.contains(&q.question_id)
                || out.iter().any(|p| p.question_id == q.question_id);
            if !known {
                out.push(prompt(&q.question_id, &q.prompt, &q.options, false));
            }
        }
        out
    }

    /// The canonical transcript (PROTOCOL.md §7).
    pub fn transcript(&self, epoch: &str, cursor: u64) -> Transcript {
        Transcript {
            epoch: epoch.to_owned(),
            cursor,
            items: self.items.clone(),
            pending_prompts: self.pending_prompts(),
            tasks: self.tasks.clone(),
        }
    }

    /// Indexes the items from `from` on (ids, a tool card's place).
    fn index(&mut self, from: usize) {
        for (i, item) in self.items.iter().enumerate().skip(from) {
            match item {
                TranscriptItem::Message { message_id, .. } => {
                    self.committed_messages.insert(message_id.clone());
                }
                TranscriptItem::Tool { call_id, .. } => {
                    self.tool_index.insert(call_id.clone(), i);
                }
                TranscriptItem::TurnEnd { turn_id, .. } => {
                    self.ended_turns.insert(turn_id.clone());
                }
                TranscriptItem::Question { question_id, .. } => {
                    self.resolved_questions.insert(question_id.clone());
                }
            }
        }
    }

    /// Puts `older`, the fold of the events before this view's first one
    /// alone (a page that starts at a turn boundary, docs/protocol.md
    /// §4.1), before what this view holds: the result is the fold of both
    /// in order. Every item is reported new (their indices moved).
    pub fn prepend(&mut self, older: SessionView, ch: &mut ViewChange) {
        let SessionView {
            mut items,
            mut prompts,
            session,
            mut extras,
            ..
        } = older;
        items.append(&mut self.items);
        self.items = items;
        self.tool_index.clear();
        self.index(0);
        prompts.append(&mut self.prompts);
        self.prompts = prompts;
        extras.append(&mut self.extras);
        let cut = extras.len().saturating_sub(extras::EXTRAS_MAX);
        extras.drain(..cut);
        self.extras = extras;
        // The newer events' `session.*` apply over the older ones'.
        if self.session.title.is_empty() {
            self.session.title = session.title;
        }
        if self.session.state == SessionState::Open {
            self.session.state = session.state;
            self.session.reason = session.reason;
        }
        ch.appended(0);
        (ch.prompts, ch.extras, ch.session) = (true, true, true);
    }

    fn push(&mut self, item: TranscriptItem, change: &mut ViewChange) {
        change.appended(self.items.len());
        self.items.push(item);
    }

    fn drop_overlay_if(&mut self, pred: impl Fn(&Overlay) -> bool, change: &mut ViewChange) {
        if self.overlay.as_ref().is_some_and(pred) {
            self.overlay = None;
            change.overlay = true;
        }
    }

    /// Ends an open question: it leaves `pending_prompts` and, if it was
    /// asked durably, stays in the transcript as a `question` item with its
    /// outcome (PROTOCOL.md §7). Only the first end counts.
    fn resolve_question(
        &mut self,
        question_id: &str,
        outcome: &str,
        answer: Option<String>,
        reason: Option<String>,
        change: &mut ViewChange,
    ) {
        if !self.resolved_questions.insert(question_id.to_owned()) {
            return;
        }
        change.prompts = true;
        let Some(at) = self
            .prompts
            .iter()
            .position(|p| p.question_id == question_id)
        else {
            return;
        };
        let asked = self.prompts.remove(at);
        self.push(
            TranscriptItem::Question {
                question_id: asked.question_id,
                turn_id: asked.turn_id,
                prompt: asked.prompt,
                outcome: outcome.to_owned(),
                answer,
                reason,
            },
            change,
        );
    }

    fn end_turn(
        &mut self,
        turn_id: &str,
        outcome: &str,
        reason: Option<&str>,
        ch: &mut ViewChange,
    ) {
        self.ended_turns.insert(turn_id.to_owned());
        self.push(
            TranscriptItem::TurnEnd {
                turn_id: turn_id.to_owned(),
                outcome: outcome.to_owned(),
                reason: reason.map(str::to_owned),
            },
            ch,
        );
        if reason != Some(REASON_WORKER_RESTART) {
            // Its overlay was set aside when the connection reached another
            // runtime process (`boot_changed`); the turn went on where it
            // ran and ended on its own (a cluster: boot ids are per node,
            // docs/protocol.md), so it was not interrupted.
            let before = self.interrupted.len();
            self.interrupted
                .retain(|i| i.turn_id != turn_id || i.reason != REASON_BOOT_CHANGED);
            ch.interrupted |= self.interrupted.len() != before;
        }
        let live = self.overlay.as_ref().is_some_and(|o| o.turn_id == turn_id);
        if live && reason == Some(REASON_WORKER_RESTART) {
            // Honest boundary: the partial text is kept aside, never committed.
            let o = self.overlay.take().expect("checked above");
            self.interrupted.push(o.interrupt(REASON_WORKER_RESTART));
            ch.overlay = true;
            ch.interrupted = true;
        } else {
            self.drop_overlay_if(|o| o.turn_id == turn_id, ch);
        }
    }

    /// Applies one durable event, moving its strings into the view (a
    /// restore folds thousands: no copy of each text).
    pub fn apply_durable(&mut self, env: &mut Envelope, ch: &mut ViewChange) {
        match &mut env.event {
            Event::MessageCommitted(m) => {
                self.committed_messages.insert(m.message_id.clone());
                self.drop_overlay_if(|o| o.message_id == m.message_id, ch);
                self.push(
                    TranscriptItem::Message {
                        message_id: take(&mut m.message_id),
                        turn_id: take(&mut m.turn_id),
                        role: m.role,
                        text: take(&mut m.text),
                    },
                    ch,
                );
            }
            // PROTOCOL.md §7: one card per call, at its first `tool.started`;
            // only `tool.completed` updates it, and one without a card has
            // nothing to update.
            Event::ToolStarted(t) => {
                if self.tool_index.contains_key(&t.call_id) {
                    return;
                }
                self.tool_index.insert(t.call_id.clone(), self.items.len());
                if let Some(o) = self.overlay.as_mut() {
                    ch.overlay |= drop_durable_tools(o, &self.tool_index);
                }
                self.push(
                    TranscriptItem::Tool {
                        call_id: take(&mut t.call_id),
                        turn_id: take(&mut t.turn_id),
                        name: take(&mut t.name),
                        status: "running".to_owned(),
                        output: None,
                        input: take(&mut t.input),
                    },
                    ch,
                );
            }
            Event::ToolCompleted(t) => {
                let Some(&i) = self.tool_index.get(&t.call_id) else {
                    return;
                };
                if let TranscriptItem::Tool { status, output, .. } = &mut self.items[i] {
                    *status = match t.status {
                        ToolStatus::Ok => "ok",
                        ToolStatus::Error => "error",
                    }
                    .to_owned();
                    *output = Some(take(&mut t.output));
                    ch.updated(i);
                }
            }
            Event::QuestionAsked(q) => {
                let known = self.resolved_questions.contains(&q.question_id)
                    || self.prompts.iter().any(|p| p.question_id == q.question_id);
                if !known {
                    self.prompts.push(take(q));
                    ch.prompts = true;
                }
            }
            Event::QuestionAnswered(q) => {
                let answer = Some(take(&mut q.answer));
                self.resolve_question(&q.question_id, "answered", answer, None, ch);
            }
            Event::QuestionDeclined(q) => {
                let reason = Some(take(&mut q.reason));
                self.resolve_question(&q.question_id, "declined", None, reason, ch);
            }
            Event::TurnCompleted(t) => self.end_turn(&t.turn_id, "completed", None, ch),
            Event::TurnCancelled(t) => self.end_turn(&t.turn_id, "cancelled", None, ch),
            Event::TurnFailed(t) => self.end_turn(&t.turn_id, "failed", Some(&t.reason), ch),
            // Kept as received for the app: a runtime's own types (plans,
            // artifacts, usage). Read as text: the client types only the
            // fold's vocabulary.
            Event::Unknown { type_name, data } => {
                let extra = Extra {
                    seq: env.seq.unwrap_or_default(),
                    type_name: take(type_name),
                    data: take(data),
                };
                extras::push(&mut self.extras, extra);
                ch.extras = true;
            }
            event => ch.session |= self.session.apply(event),
        }
    }

    /// Applies one transient event.
    pub fn apply_transient(&mut self, env: &Envelope, ch: &mut ViewChange) {
        match &env.event {
            Event::TurnDelta(d) => {
                // An overlay showing text of this turn's message proves both
                // alive without the two lookups: a commit or a turn's end
                // drops it, and a snapshot of a committed message shows no
                // text. A stream's deltas all take this path but the first.
                if let Some(o) = self.overlay.as_mut().filter(|o| {
                    o.text_len > 0 && o.turn_id == d.turn_id && o.message_id == d.message_id
                }) {
                    ch.overlay |= o.apply_delta(d);
                    return;
                }
                if self.committed_messages.contains(&d.message_id)
                    || self.ended_turns.contains(&d.turn_id)
                {
                    return;
                }
                match &mut self.overlay {
                    Some(o) if o.turn_id == d.turn_id => ch.overlay |= o.apply_delta(d),
                    _ => {
                        self.overlay = Some(Overlay::from_delta(d, &self.boot_id));
                        ch.overlay = true;
                    }
                }
            }
            Event::ToolProgress(p) => {
                if let Some(o) = self.overlay.as_mut().filter(|o| o.turn_id == p.turn_id) {
                    ch.overlay |= o.apply_progress(&p.call_id, &p.progress);
                }
            }
            Event::LiveTurnSnapshot(s) => self.apply_live_turn(s.live_turn.as_ref(), ch),
            Event::TasksSnapshot(t) => self.apply_tasks(t, ch),
            _ => {}
        }
    }

    fn apply_tasks(&mut self, t: &TasksSnapshot, ch: &mut ViewChange) {
        if t.version >= self.tasks.version && *t != self.tasks {
            self.tasks = t.clone();
            ch.tasks = true;
        }
    }

    fn apply_live_turn(&mut self, live: Option<&LiveTurn>, ch: &mut ViewChange) {
        let Some(lt) = live else {
            self.drop_overlay_if(|_| true, ch);
            return;
        };
        if self.ended_turns.contains(&lt.turn_id) {
            return;
        }
        if let Some(o) = &self.overlay {
            // Of two snapshots of one turn in one run, the higher rev wins.
            if o.turn_id == lt.turn_id && o.boot_id == self.boot_id && o.rev >= lt.rev && o.rev > 0
            {
                return;
            }
        }
        let mut o = Overlay::from_live(lt, &self.boot_id);
        if self.committed_messages.contains(&lt.message_id) {
            o.text.clear();
            o.text_len = 0;
        }
        // A snapshot lists every call of the turn.
        drop_durable_tools(&mut o, &self.tool_index);
        self.overlay = Some(o);
        ch.overlay = true;
    }

    /// Notes the runtime run serving the view; an overlay of another run is
    /// removed and recorded as interrupted (rule 7).
    pub fn set_boot(&mut self, boot_id: &str, ch: &mut ViewChange) {
        if boot_id.is_empty() || boot_id == self.boot_id {
            return;
        }
        self.boot_id = boot_id.to_owned();
        if self.overlay.as_ref().is_some_and(|o| o.boot_id != boot_id) {
            let o = self.overlay.take().expect("checked above");
            self.interrupted.push(o.interrupt(REASON_BOOT_CHANGED));
            ch.overlay = true;
            ch.interrupted = true;
        }
    }

    /// Applies the `live_turn` and `tasks` of a replay's last page.
    pub fn apply_replay_tail(
        &mut self,
        boot_id: &str,
        live_turn: Option<&LiveTurn>,
        tasks: Option<&TasksSnapshot>,
        ch: &mut ViewChange,
    ) {
        self.set_boot(boot_id, ch);
        if let Some(t) = tasks {
            self.apply_tasks(t, ch);
        }
        self.apply_live_turn(live_turn, ch);
    }
}

/// One place per tool call (PROTOCOL.md §7): the live section shows a call
/// only until its `tool.started` is durable, then it is an item. Whether
/// any went.
fn drop_durable_tools(o: &mut Overlay, durable: &IdMap<usize>) -> bool {
    let before = o.tools.len();
    o.tools.retain(|t| !durable.contains_key(&t.call_id));
    o.tools.len() != before
}

crate::json_struct!(SessionData {
    items: req,
    prompts: req,
    tasks: req,
    boot_id: req,
    session: req,
    extras: req,
});

impl FromJson for SessionView {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        SessionData::read(r).map(SessionView::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{SessionState, EXTRAS_MAX};
    use crate::json::RawJson;
    use crate::protocol::Scope;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A durable event as a client reads it off the wire (the types the
    /// fold does not know stay text).
    fn durable(seq: u64, ty: &str, data: &str) -> Envelope {
        let event = Event::read_client_data(ty, Some(data)).unwrap();
        Envelope::durable(seq, Scope::Session, "s".into(), seq, String::new(), event)
    }

    fn apply(v: &mut SessionView, seq: u64, ty: &str, data: &str) -> ViewChange {
        let mut ch = ViewChange::default();
        v.apply_durable(&mut durable(seq, ty, data), &mut ch);
        ch
    }

    #[test]
    fn the_session_lifecycle_reaches_the_view_and_notifies() {
        let mut v = SessionView::default();
        assert_eq!(v.session().state, SessionState::Open);
        let ch = apply(&mut v, 1, "session.created", r#"{"title":"Trip plan"}"#);
        assert!(ch.session, "{ch:?}");
        assert_eq!(v.session().title, "Trip plan");
        assert_eq!(v.session().state, SessionState::Open);
        let ch = apply(&mut v, 2, "session.failed", r#"{"reason":"worker_lost"}"#);
        assert!(ch.session && !ch.extras, "{ch:?}");
        assert_eq!(v.session().state, SessionState::Failed);
        assert_eq!(v.session().reason.as_deref(), Some("worker_lost"));
        assert_eq!(v.session().title, "Trip plan", "the title stays");
        let ch = apply(&mut v, 3, "session.closed", "{}");
        assert!(ch.session);
        assert_eq!(v.session().state, SessionState::Closed);
        assert_eq!(v.session().reason, None);
        assert_eq!(
            crate::json::to_string(v.session()).unwrap(),
            r#"{"title":"Trip plan","state":"closed"}"#
        );
    }

    #[test]
    fn unknown_durable_types_are_kept_newest_last_within_the_bound() {
        let mut v = SessionView::default();
        let ch = apply(&mut v, 1, "plan.updated", r#"{"steps": ["a", {"b": 1}]}"#);
        assert!(ch.extras && ch.items_appended_from.is_none(), "{ch:?}");
        assert_eq!(v.extras().len(), 1);
        let e = &v.extras()[0];
        assert_eq!((e.seq, e.type_name.as_str()), (1, "plan.updated"));
        assert_eq!(
            e.data,
            RawJson::parse(r#"{"steps":["a",{"b":1}]}"#).unwrap()
        );
        // Another scope's type on a session is not the fold's either.
        apply(&mut v, 2, "process.started", r#"{"process_id":"p"}"#);
        assert_eq!(v.extras()[1].type_name, "process.started");
        // A known type the fold shows elsewhere is not an extra.
        apply(&mut v, 3, "turn.started", r#"{"turn_id":"t"}"#);
        assert_eq!(v.extras().len(), 2);
        for seq in 4..4 + EXTRAS_MAX as u64 {
            apply(&mut v, seq, "usage", &format!(r#"{{"tokens":{seq}}}"#));
        }
        assert_eq!(v.extras().len(), EXTRAS_MAX);
        assert_eq!(v.extras()[0].seq, 4, "the two oldest went");
        let last = v.extras().last().unwrap();
        assert_eq!(last.seq, 3 + EXTRAS_MAX as u64);
        assert_eq!(
            crate::json::to_string(last).unwrap(),
            format!(
                r#"{{"seq":{0},"type":"usage","data":{{"tokens":{0}}}}}"#,
                last.seq
            )
        );
    }

    #[test]
    fn a_tool_card_keeps_its_input() {
        let mut v = SessionView::default();
        let input = r#"{"cmd":"ls -la","env":{"A":"1"}}"#;
        apply(
            &mut v,
            1,
            "tool.started",
            &format!(r#"{{"turn_id":"t","call_id":"c","name":"shell","input":{input}}}"#),
        );
        apply(
            &mut v,
            2,
            "tool.completed",
            r#"{"turn_id":"t","call_id":"c","status":"ok","output":"x"}"#,
        );
        let TranscriptItem::Tool {
            status, input: got, ..
        } = &v.items()[0]
        else {
            panic!("{:?}", v.items());
        };
        assert_eq!((status.as_str(), got.as_str()), ("ok", input));
    }

    #[test]
    fn session_extras_and_inputs_are_in_the_stored_form() {
        let mut v = SessionView::default();
        apply(&mut v, 1, "session.created", r#"{"title":"T"}"#);
        apply(
            &mut v,
            2,
            "tool.started",
            r#"{"turn_id":"t","call_id":"c","name":"n","input":[1,"two"]}"#,
        );
        apply(&mut v, 3, "artifact.saved", r#"{"name":"a.txt"}"#);
        apply(&mut v, 4, "session.failed", r#"{"reason":"r"}"#);
        let text = crate::json::to_string(&v).unwrap();
        let back: SessionView = crate::json::from_str(&text).unwrap();
        assert_eq!(back, v);
        assert_eq!(back.session().reason.as_deref(), Some("r"));
        assert_eq!(back.extras().len(), 1);
        let TranscriptItem::Tool { input, .. } = &back.items()[0] else {
            panic!("{:?}", back.items());
        };
        assert_eq!(input.as_str(), r#"[1,"two"]"#);
    }
}
