//! The JS `View` snapshot, built from the core view in small deltas: the
//! cached items array is copied by reference (`slice`) and only appended or
//! updated items are converted; parts the change did not touch keep their
//! JS objects (structural sharing: `live.tools`, `pendingPrompts`, `tasks`,
//! `status`, `notices`, `session`, `extras` are the same objects until their
//! value changed, so a UI can skip them by identity). The same frozen object
//! is returned until something changed. Built on `view()`, never per chunk: a streamed answer
//! costs one build per notification (one per animation frame). The view and
//! its `live` object are each made by one JS call (`viewObject`,
//! `liveObject`) from values kept as JS while unchanged, strings included:
//! a `Reflect.set` per property and a `TextDecoder` call per string were
//! 40 % of a live answer's `view()` time.

use js_sys::{Array, JsString, Object};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::error::UnauthorizedHint;
use super::items::{item_to_js, items_to_js};
use super::js;
use super::stage::Staged;
use crate::core::fold::{LogEntry, LogView, Overlay, SessionView, View, ViewChange};
use crate::core::json::RawJson;
use crate::core::machine::{Counters, ErrorInfo, Machine, PendingAnswer, State, Status, Target};
use crate::core::protocol::{LiveTurnState, PendingPrompt, TasksSnapshot};
use crate::core::share::Transport;

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    /// The frozen view object, built in one call (a `Reflect.set` per
    /// property was a fifth of a live answer's `view()` time).
    #[wasm_bindgen(js_name = viewObject)]
    #[allow(clippy::too_many_arguments)]
    fn view_object(
        scope: &JsValue,
        scope_id: &JsValue,
        epoch: &JsValue,
        cursor: f64,
        items: &JsValue,
        events: &JsValue,
        live: &JsValue,
        interrupted: &JsValue,
        pending_prompts: &JsValue,
        tasks: &JsValue,
        status: &JsValue,
        notices: &JsValue,
        session: &JsValue,
        extras: &JsValue,
        pending: &JsValue,
        has_older: bool,
    ) -> JsValue;
    /// The view's `live` object, built in one call.
    #[wasm_bindgen(js_name = liveObject)]
    #[allow(clippy::too_many_arguments)]
    fn live_object(
        turn_id: &JsValue,
        message_id: &JsValue,
        text_offset: f64,
        state: &JsValue,
        tools: &JsValue,
        pending_question: &JsValue,
        stale: bool,
        text: &JsValue,
    ) -> JsValue;
}

#[derive(Serialize)]
struct StatusJs<'a> {
    state: State,
    since: u64,
    #[serde(rename = "nextRetryAt")]
    next_retry_at: Option<u64>,
    #[serde(rename = "lastError")]
    last_error: Option<&'a ErrorInfo>,
    #[serde(rename = "historyIncomplete")]
    history_incomplete: bool,
}

/// A part of the view converted once per distinct value: the same JS
/// object is handed out while the value is unchanged. Keyed by its JSON text
/// (written in Rust, cheap; the crossing and `JSON.parse` are what cost):
/// no `Clone`/`PartialEq` code per part type, which weighed 1.3 KB gzipped.
#[derive(Default)]
struct Shared {
    key: String,
    js: Option<JsValue>,
}

impl Shared {
    /// `value` as JS (parsed from its JSON; frozen if `freeze`).
    fn json<T: Serialize + ?Sized>(&mut self, value: &T, freeze: bool) -> JsValue {
        self.text(
            &crate::core::json::to_string(value).unwrap_or_default(),
            freeze,
        )
    }

    // Not generic: one copy of the code for every part.
    fn text(&mut self, text: &str, freeze: bool) -> JsValue {
        self.get(text, &|text| {
            let js = js::parse_json(text);
            if freeze {
                Object::freeze(js.unchecked_ref::<Object>());
            }
            js
        })
    }

    /// A plain string as JS: decoded from wasm only when it changed.
    fn str(&mut self, text: &str) -> JsValue {
        self.get(text, &JsValue::from_str)
    }

    /// The JS value cached for `key`, made by `make` when the key changed.
    fn get(&mut self, key: &str, make: &dyn Fn(&str) -> JsValue) -> JsValue {
        match &self.js {
            Some(js) if self.key == key => js.clone(),
            _ => {
                let js = make(key);
                self.key.clear();
                self.key.push_str(key);
                self.js = Some(js.clone());
                js
            }
        }
    }
}

#[derive(Serialize)]
struct InterruptedJs<'a> {
    turn_id: &'a str,
    partial_text: &'a str,
    reason: &'a str,
}

#[derive(Serialize)]
struct LogEntryJs<'a> {
    seq: u64,
    #[serde(rename = "type")]
    type_name: &'a str,
    ts: &'a str,
    data: &'a RawJson,
}

#[derive(Serialize)]
struct DiagnosticsJs<'a> {
    status: StatusJs<'a>,
    counters: &'a Counters,
    epoch: Option<&'a str>,
    cursor: u64,
    #[serde(rename = "bootId")]
    boot_id: Option<&'a str>,
    storage: &'a str,
    /// `multiplexed`, `scoped` or `polling` (a string: a serde enum costs
    /// more wasm).
    transport: &'static str,
}

impl<'a> StatusJs<'a> {
    fn of(s: &'a Status) -> Self {
        StatusJs {
            state: s.state,
            since: s.since,
            next_retry_at: s.next_retry_at,
            last_error: s.last_error.as_ref(),
            history_incomplete: s.history_incomplete,
        }
    }
}

/// The JS form of a status.
pub fn status_js(s: &Status) -> JsValue {
    js::to_js(&StatusJs::of(s))
}

/// The JS `Diagnostics` object; `storage` is the label of the storage in use.
pub fn diagnostics_js(
    m: &Machine,
    storage: &str,
    transport: Transport,
    hint: &UnauthorizedHint,
) -> JsValue {
    let status = hint.status(m.status());
    let boot = m
        .view()
        .as_session()
        .map(SessionView::boot_id)
        .filter(|b| !b.is_empty());
    js::to_js(&DiagnosticsJs {
        status: StatusJs::of(&status),
        counters: m.counters(),
        epoch: m.epoch(),
        cursor: m.cursor(),
        boot_id: boot,
        storage,
        transport: match transport {
            // The machine's own choice comes first: a muted stream is
            // followed by polling, on the page and in a shared host alike.
            _ if m.polling() => "polling",
            Transport::Multiplexed => "multiplexed",
            Transport::Scoped => "scoped",
        },
    })
}

fn frozen(a: Array) -> Array {
    Object::freeze(&a);
    a
}

fn empty_array() -> JsValue {
    frozen(Array::new()).into()
}

fn log_entry(e: &LogEntry) -> JsValue {
    js::to_js(&LogEntryJs {
        seq: e.seq.or(e.id).unwrap_or(0),
        type_name: &e.type_name,
        ts: &e.ts,
        data: &e.data,
    })
}

/// The cached JS view of one client.
pub struct ViewCache {
    /// The machine's revision the view reflects; `None` before the first build.
    revision: Option<u64>,
    /// View changes since the last build.
    change: ViewChange,
    view: JsValue,
    items: Array,
    /// Log views: absolute position of `items[0]`.
    log_first: u64,
    /// A restore's items, converted while it runs.
    staged: Staged,
    live: JsValue,
    /// The live text last handed to JS, and that JS string: a streaming
    /// answer grows by appends, so only the new tail crosses.
    live_text: String,
    live_text_js: JsString,
    /// The frozen `[]` of the list a target does not have (`items` or `events`).
    empty: JsValue,
    /// Strings handed out on every build, decoded only when they changed
    /// (each decode is a `TextDecoder` call).
    scope: Shared,
    scope_id: Shared,
    epoch: Shared,
    turn_id: Shared,
    message_id: Shared,
    state: Shared,
    /// `live` parts that keep their objects while the text streams.
    tools: Shared,
    question: Shared,
    interrupted: JsValue,
    /// `session` (`null` on a log view) and `extras` (`[]` there).
    session: JsValue,
    session_json: Shared,
    extras: JsValue,
    extras_json: Shared,
    prompts: Shared,
    tasks: Shared,
    status: Shared,
    notices: Shared,
    /// The outbox's messages (current even behind a restore: nothing
    /// leaves it before the repaint that shows its item).
    pending: Shared,
    /// The parts read from the machine, as of the last build outside a restore.
    painted: Painted,
}

/// An open question as the view shows it: with the answer the outbox
/// holds for it, if any (current even behind a restore, as `pending`).
#[derive(Serialize)]
struct PromptJs<'a> {
    question_id: &'a str,
    prompt: &'a str,
    options: &'a [String],
    persisted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<PendingAnswer>,
}

/// What [`ViewCache::assemble`] reads from the machine besides the status.
#[derive(Default)]
struct Painted {
    cursor: f64,
    epoch: JsValue,
    prompts: Vec<PendingPrompt>,
    tasks: JsValue,
    has_older: bool,
}

impl Default for ViewCache {
    fn default() -> Self {
        ViewCache {
            revision: None,
            change: ViewChange::default(),
            view: JsValue::NULL,
            items: frozen(Array::new()),
            log_first: 0,
            staged: Staged::default(),
            live: JsValue::NULL,
            live_text: String::new(),
            live_text_js: JsString::from(""),
            empty: empty_array(),
            scope: Shared::default(),
            scope_id: Shared::default(),
            epoch: Shared::default(),
            turn_id: Shared::default(),
            message_id: Shared::default(),
            state: Shared::default(),
            tools: Shared::default(),
            question: Shared::default(),
            interrupted: empty_array(),
            session: JsValue::NULL,
            session_json: Shared::default(),
            extras: empty_array(),
            extras_json: Shared::default(),
            prompts: Shared::default(),
            tasks: Shared::default(),
            status: Shared::default(),
            notices: Shared::default(),
            pending: Shared::default(),
            painted: Painted::default(),
        }
    }
}

impl ViewCache {
    /// The current snapshot: the same object until the machine's revision
    /// moved.
    pub fn get(&mut self, m: &mut Machine, target: &Target, hint: &UnauthorizedHint) -> JsValue {
        if self.revision == Some(m.revision()) {
            return self.view.clone();
        }
        let change = std::mem::take(&mut self.change);
        let full = self.revision.is_none() || change.reset || change.restore_completed;
        if let Some(p) = m.poll_view_progress() {
            self.staged.track(m.view(), p);
        }
        match m.view() {
            View::Session(s) => {
                // Staged items are used by the repaint that completes a restore.
                let done = change.restore_completed;
                let staged = done.then(|| self.staged.take(s.items().len()));
                self.session(s, &change, full, staged.flatten());
            }
            View::Log(l) => self.log(l, &change, full),
        }
        self.view = self.assemble(m, target, hint, full);
        self.revision = Some(m.revision());
        self.view.clone()
    }

    /// A view change of the machine (`poll_view_change`), for the next build.
    pub fn pending(&mut self, change: ViewChange) {
        self.change.merge(&change);
        self.change.normalise();
    }

    /// A restore's progress (`poll_view_progress`), converted ahead of its
    /// repaint (see [`Staged`]).
    pub fn stage(&mut self, m: &Machine, p: ViewChange) {
        self.staged.track(m.view(), p);
    }

    fn session(&mut self, s: &SessionView, ch: &ViewChange, full: bool, staged: Option<Array>) {
        let items = s.items();
        if let Some(staged) = staged {
            // A whole repaint whose items were converted while they arrived.
            self.items = frozen(staged);
        } else if full || ch.items_appended_from.is_some() || !ch.items_updated.is_empty() {
            let keep = if full {
                0
            } else {
                ch.items_appended_from
                    .unwrap_or(items.len())
                    .min(self.items.length() as usize)
                    .min(items.len())
            };
            let next = self.items.slice(0, keep as u32);
            for &i in ch.items_updated.iter().filter(|&&i| i < keep && !full) {
                next.set(i as u32, item_to_js(&items[i]));
            }
            // One crossing for all appended items: a restore appends
            // thousands, and per-item crossings dominate.
            if keep < items.len() {
                let appended = items_to_js(&items[keep..]);
                self.items = frozen(next.concat(&appended));
            } else {
                self.items = frozen(next);
            }
        }
        if full || ch.overlay {
            self.live = match s.overlay() {
                Some(o) => self.live_js(o),
                None => JsValue::NULL,
            };
        }
        if full || ch.interrupted {
            let list: Vec<InterruptedJs> = s
                .interrupted()
                .iter()
                .map(|t| InterruptedJs {
                    turn_id: &t.turn_id,
                    partial_text: &t.text,
                    reason: &t.reason,
                })
                .collect();
            self.interrupted = frozen(js::to_js(&list).into()).into();
        }
        if full || ch.session {
            self.session = self.session_json.json(s.session(), true);
        }
        if full || ch.extras {
            self.extras = self.extras_json.json(s.extras(), true);
        }
    }

    /// The JS `live` object: a new object per change (its text grew), whose
    /// unchanged parts are the objects and strings handed out before.
    fn live_js(&mut self, o: &Overlay) -> JsValue {
        let state = o.state.unwrap_or(LiveTurnState::Sampling);
        live_object(
            &self.turn_id.str(&o.turn_id),
            &self.message_id.str(&o.message_id),
            o.text_offset as f64,
            &self.state.str(state.as_str()),
            &self.tools.json(&o.tools, true),
            &self.question.json(&o.pending_question, false),
            o.stale,
            &self.live_text(&o.text),
        )
    }

    /// The live text as a JS string; when it only grew, the old string is
    /// extended by the new tail (V8 concatenates without copying).
    fn live_text(&mut self, text: &str) -> JsValue {
        if text != self.live_text {
            self.live_text_js = match text.strip_prefix(self.live_text.as_str()) {
                Some(tail) if !self.live_text.is_empty() => {
                    self.live_text_js.concat(&JsValue::from_str(tail))
                }
                _ => JsString::from(text),
            };
            self.live_text.clear();
            self.live_text.push_str(text);
        }
        self.live_text_js.clone().into()
    }

    fn log(&mut self, l: &LogView, ch: &ViewChange, full: bool) {
        if !full && ch.items_appended_from.is_none() {
            return;
        }
        let first = l.first_position();
        let events = l.events();
        let cached_end = self.log_first + self.items.length() as u64;
        // Entries still kept keep their JS objects; only new ones are converted.
        let reuse = !full && first >= self.log_first && first <= cached_end;
        let (next, from) = if reuse {
            let end = cached_end.min(first + events.len() as u64);
            let a = (first - self.log_first) as u32;
            let b = (end - self.log_first) as u32;
            (self.items.slice(a, b), (end - first) as usize)
        } else {
            (Array::new(), 0)
        };
        for env in events.iter().skip(from) {
            next.push(&log_entry(env));
        }
        self.items = frozen(next);
        self.log_first = first;
    }

    fn assemble(
        &mut self,
        m: &Machine,
        target: &Target,
        hint: &UnauthorizedHint,
        full: bool,
    ) -> JsValue {
        let (scope, scope_id) = match target {
            Target::Scoped { scope, scope_id } => (scope.as_str(), scope_id.as_str()),
            Target::Global => ("global", ""),
        };
        let session = m.view().as_session();
        let (items, events) = if session.is_some() {
            (self.items.clone().into(), self.empty.clone())
        } else {
            (self.empty.clone(), self.items.clone().into())
        };
        // A restore's changes are withheld until its one repaint (rule 2),
        // so the parts read from the machine stay as last painted too: the
        // stored cursor beside items built before the state was read would
        // show a moment that never was. A whole repaint (the first, the
        // stored view's, a reset) reads them with the items. The status and
        // notices are current.
        if full || !m.withheld() {
            let no_tasks = TasksSnapshot::default();
            let (prompts, tasks) = match session {
                Some(s) => (s.pending_prompts(), s.tasks()),
                None => (Vec::new(), &no_tasks),
            };
            self.painted = Painted {
                cursor: m.cursor() as f64,
                epoch: m.epoch().map_or(JsValue::NULL, |e| self.epoch.str(e)),
                prompts,
                tasks: self.tasks.json(tasks, false),
                has_older: m.position().older > 0,
            };
        }
        let status = hint.status(m.status());
        let notices: Vec<_> = m.recent_notices().iter().map(|n| hint.notice(n)).collect();
        let pending = self.pending.json(&m.pending_messages(), true);
        let prompts: Vec<PromptJs> = (self.painted.prompts.iter())
            .map(|p| PromptJs {
                question_id: &p.question_id,
                prompt: &p.prompt,
                options: &p.options,
                persisted: p.persisted,
                answer: m.pending_answer(&p.question_id),
            })
            .collect();
        let prompts = self.prompts.json(&prompts, true);
        let p = &self.painted;
        view_object(
            &self.scope.str(scope),
            &self.scope_id.str(scope_id),
            &p.epoch,
            p.cursor,
            &items,
            &events,
            &self.live,
            &self.interrupted,
            &prompts,
            &p.tasks,
            &self.status.json(&StatusJs::of(&status), false),
            &self.notices.json(&notices, true),
            &self.session,
            &self.extras,
            &pending,
            p.has_older,
        )
    }
}
