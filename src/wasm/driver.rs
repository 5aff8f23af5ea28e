//! The one driver loop: feed an input to the machine, drain its actions,
//! notices and view changes, execute the actions, arm the timer, schedule
//! subscribers. The layer decides nothing; the machine does.
//!
//! Borrow discipline: no `RefCell` borrow is held while user JS runs
//! (`getToken`, a custom storage, subscribers); outputs are queued, the
//! borrow released, then they are executed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use gloo_timers::callback::Timeout;
use serde::Serialize;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use web_sys::AbortController;

use super::http::Http;
use super::js;
use super::lifecycle::{self, Listeners};
use super::options::{Notify, Options};
use super::requests;
use super::storage::{Loaded, Store};
use super::view::ViewCache;
use crate::core::fold::ViewChange;
use crate::core::machine::{
    Action, Client as Machine, Config, ErrorInfo, Lifecycle, Notice, RequestId, State, Status,
    Target,
};

/// How many notices the view keeps (oldest dropped first).
const NOTICE_CAPACITY: usize = 50;

/// Something the application should know, in the JS `Notice` shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientNotice {
    /// Stable code, e.g. `cursor_reset`, `storage_fallback`, `restored`.
    pub code: String,
    /// Human text.
    pub message: String,
    /// When (`Date.now()` ms).
    pub at: u64,
    /// HTTP status, when the notice came from an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

impl ClientNotice {
    fn new(code: &str, message: String, at: u64) -> Self {
        ClientNotice {
            code: code.to_owned(),
            message,
            at,
            status: None,
        }
    }

    fn from_error(code: &str, e: ErrorInfo, at: u64) -> Self {
        ClientNotice {
            code: code.to_owned(),
            message: e.message,
            at,
            status: e.status,
        }
    }

    /// The application-facing form of a machine notice; `None` for retries,
    /// which the status already shows.
    fn from_machine(n: Notice, at: u64) -> Option<Self> {
        Some(match n {
            Notice::Restored {
                from_cursor,
                to_cursor,
            } => Self::new("restored", range("restored", from_cursor, to_cursor), at),
            Notice::GapRepaired {
                from_cursor,
                to_cursor,
            } => Self::new(
                "gap_repaired",
                range("gap repaired", from_cursor, to_cursor),
                at,
            ),
            Notice::EpochChanged { error } => Self::from_error("epoch_changed", error, at),
            Notice::CursorRejected { error, .. } => Self::from_error("cursor_reset", error, at),
            Notice::StorageDiscarded { error } => Self::from_error("corrupt_storage", error, at),
            Notice::FrameSkipped { error } => {
                let code = error.code.clone();
                Self::from_error(&code, error, at)
            }
            Notice::TurnInterrupted { turn_id, reason } => {
                Self::new("turn_interrupted", turn_id + " interrupted: " + &reason, at)
            }
            Notice::Failed { error } => {
                let code = error.code.clone();
                Self::from_error(&code, error, at)
            }
            Notice::Retrying { .. } => return None,
        })
    }
}

fn range(what: &str, from: u64, to: u64) -> String {
    what.to_owned() + " from cursor " + &from.to_string() + " to " + &to.to_string()
}

/// An in-flight request; dropping it aborts the fetch.
struct Req {
    id: RequestId,
    ctl: AbortController,
}

impl Drop for Req {
    fn drop(&mut self) {
        self.ctl.abort();
    }
}

/// Mutable state of one client.
pub struct Inner {
    /// `None` while an asynchronous storage is read.
    pub machine: Option<Machine>,
    config: Option<Config>,
    /// Set by `close()`: nothing more is dispatched.
    pub closed: bool,
    reqs: Vec<Req>,
    timer: Option<(u64, Timeout)>,
    /// A timer that fired; dropped on the next arm, not inside its own callback.
    spent_timer: Option<Timeout>,
    listeners: Option<Listeners>,
    early: Vec<Lifecycle>,
    /// Notices for the view, oldest first.
    pub notices: VecDeque<ClientNotice>,
    /// View changes not yet consumed by the JS view cache.
    pub change: ViewChange,
    /// Bumped on every visible change; the JS view is rebuilt when it moved.
    pub version: u64,
    subscribers: Vec<(u32, Rc<dyn Fn()>)>,
    next_sub: u32,
    notify: Notify,
    notify_pending: bool,
    last_notify: u64,
    /// `RefreshCredentials` actions seen.
    pub refreshes: u64,
    fallback_noticed: bool,
    last_status: Option<Status>,
    created: u64,
}

impl Inner {
    /// Status, `connecting` while the machine waits for the stored value.
    pub fn status(&self) -> Status {
        match &self.machine {
            Some(m) => m.status(),
            None => Status {
                state: if self.closed {
                    State::Stopped
                } else {
                    State::Connecting
                },
                since: self.created,
                next_retry_at: None,
                last_error: None,
            },
        }
    }

    fn push_notice(&mut self, n: ClientNotice) {
        if self.notices.len() == NOTICE_CAPACITY {
            self.notices.pop_front();
        }
        self.notices.push_back(n);
        self.version += 1;
    }
}

/// One client's state, shared by its tasks, timers and listeners.
pub struct Shared {
    /// Everything mutable but the store.
    pub inner: RefCell<Inner>,
    /// Kept apart: a custom storage is user JS and may re-enter the client.
    pub store: RefCell<Store>,
    /// Request addressing and credentials.
    pub http: Http,
    /// What is followed.
    pub target: Target,
    /// The JS view of a `ReplayClient` (Rust clients have none): the driver
    /// feeds it view progress so a restore's repaint is prepared early.
    pub js_view: RefCell<Option<ViewCache>>,
}

impl Shared {
    /// Creates the client and starts it (now, or once the stored value is read).
    pub fn connect(o: Options) -> Rc<Shared> {
        let now = js::now();
        let mut config = Config::new(o.target.clone());
        config.seed = o
            .seed
            .unwrap_or_else(|| (js_sys::Math::random() * 9_007_199_254_740_991.0) as u64);
        config.fetch_timeout_ms = config.fetch_timeout_ms.max(o.connect_timeout_ms as u64);
        config.prefetch_depth = o.prefetch_depth;
        let key = "replay-client:".to_owned() + &o.base_url + "|" + &o.target.key();
        let (store, unavailable) = Store::open(&o.storage, key);
        config.persist = !store.keeps_nothing();
        let shared = Rc::new(Shared {
            inner: RefCell::new(Inner {
                machine: None,
                config: Some(config),
                closed: false,
                reqs: Vec::new(),
                timer: None,
                spent_timer: None,
                listeners: None,
                early: Vec::new(),
                notices: VecDeque::new(),
                change: ViewChange::default(),
                version: 0,
                subscribers: Vec::new(),
                next_sub: 0,
                notify: o.notify,
                notify_pending: false,
                last_notify: 0,
                refreshes: 0,
                fallback_noticed: false,
                last_status: None,
                created: now,
            }),
            store: RefCell::new(store),
            http: Http::new(&o),
            target: o.target,
            js_view: RefCell::new(None),
        });
        if let Some(why) = unavailable {
            shared.storage_fallback(why);
        }
        let weak = Rc::downgrade(&shared);
        let listeners = lifecycle::install(Rc::new(move |ev| {
            if let Some(s) = weak.upgrade() {
                s.lifecycle(ev);
            }
        }));
        shared.inner.borrow_mut().listeners = Some(listeners);
        // A custom `get` is user JS: call it through a clone, unborrowed.
        let store = shared.store.borrow().clone();
        let loaded = store.load();
        match loaded {
            Ok(Loaded::Ready(v)) => shared.start(v),
            Ok(Loaded::Pending(p)) => {
                let s = shared.clone();
                js::spawn(async move {
                    match JsFuture::from(p).await {
                        Ok(v) => s.start(v.as_string()),
                        Err(e) => {
                            s.storage_fallback(js::error_text(&e));
                            s.start(None);
                        }
                    }
                });
            }
            Err(why) => {
                shared.storage_fallback(why);
                shared.start(None);
            }
        }
        shared
    }

    /// Builds the machine from the stored value and runs the first drive.
    fn start(self: &Rc<Self>, stored: Option<String>) {
        {
            let mut inner = self.inner.borrow_mut();
            let Some(config) = inner.config.take().filter(|_| !inner.closed) else {
                return;
            };
            let now = js::now();
            let mut m = Machine::new(config, stored.as_deref().map(str::as_bytes), now);
            for ev in std::mem::take(&mut inner.early) {
                m.handle_lifecycle(ev, now);
            }
            if lifecycle::starts_offline() {
                m.handle_lifecycle(Lifecycle::Offline, now);
            }
            inner.machine = Some(m);
            inner.version += 1;
        }
        self.drive();
    }

    fn lifecycle(self: &Rc<Self>, ev: Lifecycle) {
        {
            let mut inner = self.inner.borrow_mut();
            if inner.machine.is_none() {
                inner.early.push(ev);
                return;
            }
        }
        self.input(|m, now| m.handle_lifecycle(ev, now));
    }

    /// True once `close()` ran.
    pub fn is_closed(&self) -> bool {
        self.inner.borrow().closed
    }

    /// True while request `id` is in flight and the client open.
    pub fn is_current(&self, id: RequestId) -> bool {
        let inner = self.inner.borrow();
        !inner.closed && inner.reqs.iter().any(|r| r.id == id)
    }

    /// Feeds one input for request `id` if it is still wanted; returns
    /// whether it still is afterwards.
    pub fn feed(self: &Rc<Self>, id: RequestId, f: impl FnOnce(&mut Machine, u64)) -> bool {
        if !self.is_current(id) {
            return false;
        }
        self.input(f);
        self.is_current(id)
    }

    /// Feeds the last input of request `id` and forgets it.
    pub fn finish(self: &Rc<Self>, id: RequestId, f: impl FnOnce(&mut Machine, u64)) {
        if self.feed(id, f) {
            let done = {
                let mut inner = self.inner.borrow_mut();
                let i = inner.reqs.iter().position(|r| r.id == id);
                i.map(|i| inner.reqs.swap_remove(i))
            };
            // Aborting a finished fetch is a no-op; drop outside the borrow.
            drop(done);
        }
    }

    /// Feeds any input, then drives.
    pub fn input(self: &Rc<Self>, f: impl FnOnce(&mut Machine, u64)) {
        {
            let mut inner = self.inner.borrow_mut();
            if inner.closed {
                return;
            }
            match inner.machine.as_mut() {
                Some(m) => f(m, js::now()),
                None => return,
            }
        }
        self.drive();
    }

    /// Drains the machine's outputs and executes them.
    fn drive(self: &Rc<Self>) {
        let (actions, changed, discard) = {
            let mut inner = self.inner.borrow_mut();
            let inner = &mut *inner;
            let Some(m) = inner.machine.as_mut().filter(|_| !inner.closed) else {
                return;
            };
            let mut actions = Vec::new();
            while let Some(a) = m.poll_action() {
                actions.push(a);
            }
            let now = js::now();
            let mut notices = Vec::new();
            let mut discard = false;
            while let Some(n) = m.poll_notice() {
                discard |= matches!(n, Notice::StorageDiscarded { .. });
                notices.extend(ClientNotice::from_machine(n, now));
            }
            let change = m.poll_view_change();
            let status = m.status();
            let mut changed = !notices.is_empty();
            for n in notices {
                inner.push_notice(n);
            }
            if let Some(c) = change {
                inner.change.merge(&c);
                inner.change.normalise();
                inner.version += 1;
                changed = true;
            }
            // Status moves during a restore too, when the machine reports no
            // view change: the view always shows it, but the error-free
            // connecting/restoring steps notify nobody, so a restore is
            // still one notification (its completion, together with `live`).
            if inner.last_status.as_ref() != Some(&status) {
                let quiet = matches!(status.state, State::Connecting | State::Restoring)
                    && status.last_error.is_none();
                changed |= !quiet;
                inner.last_status = Some(status);
                inner.version += 1;
            }
            (actions, changed, discard)
        };
        if discard {
            // The machine dropped a corrupt stored value; so does the store.
            let store = self.store.borrow().clone();
            store.remove();
        }
        for a in actions {
            self.execute(a);
        }
        self.arm_timer();
        if changed {
            self.schedule_notify();
        }
        let waiting = self
            .inner
            .borrow()
            .machine
            .as_ref()
            .is_some_and(Machine::has_waiting_page);
        if waiting {
            // A page that arrived early is read once the request after it is
            // on the network (pipelined paging): spawned requests call
            // fetch() when first polled, and this task is queued behind them.
            let this = self.clone();
            js::spawn(async move { this.input(|m, now| m.handle_waiting_page(now)) });
        } else {
            // Nothing to read: prepare UI objects while the network works.
            self.stage_view();
        }
    }

    /// Converts view progress (a restore's items) for the JS view ahead of
    /// its repaint.
    fn stage_view(&self) {
        let progress = {
            let mut inner = self.inner.borrow_mut();
            inner.machine.as_mut().and_then(Machine::poll_view_progress)
        };
        if let Some(p) = progress {
            if let Some(view) = self.js_view.borrow_mut().as_mut() {
                if let Some(m) = self.inner.borrow().machine.as_ref() {
                    view.track(m, p);
                }
            }
        }
    }

    fn execute(self: &Rc<Self>, action: Action) {
        match action {
            Action::OpenStream {
                id,
                path_and_query,
                last_event_id,
            } => {
                if let Some(ctl) = self.register(id) {
                    js::spawn(requests::run_stream(
                        self.clone(),
                        id,
                        path_and_query,
                        last_event_id,
                        ctl,
                    ));
                }
            }
            Action::Fetch {
                id,
                path_and_query,
                kind,
            } => {
                if let Some(ctl) = self.register(id) {
                    js::spawn(requests::run_fetch(
                        self.clone(),
                        id,
                        path_and_query,
                        kind,
                        ctl,
                    ));
                }
            }
            Action::Abort { id } => {
                let gone = {
                    let mut inner = self.inner.borrow_mut();
                    let i = inner.reqs.iter().position(|r| r.id == id);
                    i.map(|i| inner.reqs.swap_remove(i))
                };
                drop(gone);
            }
            Action::Persist(bytes) => self.persist(bytes),
            // getToken() is awaited before every request, so the requests
            // that follow this action already use fresh credentials.
            Action::RefreshCredentials => self.inner.borrow_mut().refreshes += 1,
        }
    }

    fn register(&self, id: RequestId) -> Option<AbortController> {
        let ctl = AbortController::new().ok()?;
        self.inner.borrow_mut().reqs.push(Req {
            id,
            ctl: ctl.clone(),
        });
        Some(ctl)
    }

    fn persist(self: &Rc<Self>, bytes: Vec<u8>) {
        // The machine persists JSON, which is always UTF-8.
        let Ok(value) = String::from_utf8(bytes) else {
            return;
        };
        // Clone the handle: a custom `set` is user JS and must run unborrowed.
        let store = self.store.borrow().clone();
        match store.save(&value) {
            Ok(None) => {}
            Ok(Some(pending)) => {
                let s = self.clone();
                js::spawn(async move {
                    if let Err(e) = JsFuture::from(pending).await {
                        s.storage_fallback(js::error_text(&e));
                    }
                });
            }
            Err(why) => self.storage_fallback(why),
        }
    }

    /// Switches to memory with a `storage_fallback` notice (once).
    pub fn storage_fallback(self: &Rc<Self>, why: String) {
        self.store.borrow_mut().fall_back();
        {
            let mut inner = self.inner.borrow_mut();
            if inner.closed || inner.fallback_noticed {
                return;
            }
            inner.fallback_noticed = true;
            let msg = "storage unavailable, keeping state in memory: ".to_owned() + &why;
            inner.push_notice(ClientNotice::new("storage_fallback", msg, js::now()));
        }
        self.schedule_notify();
    }

    fn arm_timer(self: &Rc<Self>) {
        let mut inner = self.inner.borrow_mut();
        let deadline = inner.machine.as_ref().and_then(|m| m.poll_timeout());
        // The stall watchdog moves the deadline later on every chunk; keeping
        // a timer that fires no later than needed saves a clearTimeout and a
        // setTimeout per chunk. An early wake-up is harmless: nothing is due,
        // and the timer is re-armed for the new deadline then.
        let keep = match (inner.timer.as_ref(), deadline) {
            (Some(&(armed, _)), Some(at)) => armed <= at,
            (Some(_), None) => true,
            (None, at) => at.is_none(),
        };
        if inner.closed || keep {
            return;
        }
        inner.spent_timer = None;
        inner.timer = deadline.map(|at| {
            let delay = at.saturating_sub(js::now()).min(i32::MAX as u64) as u32;
            let weak = Rc::downgrade(self);
            let t = Timeout::new(delay, move || {
                if let Some(s) = weak.upgrade() {
                    {
                        let mut inner = s.inner.borrow_mut();
                        inner.spent_timer = inner.timer.take().map(|t| t.1);
                    }
                    s.input(|m, now| m.handle_timeout(now));
                }
            });
            (at, t)
        });
    }

    /// Adds a subscriber; returns its id for [`unsubscribe`](Self::unsubscribe).
    pub fn subscribe(&self, f: Rc<dyn Fn()>) -> u32 {
        let mut inner = self.inner.borrow_mut();
        inner.next_sub += 1;
        let id = inner.next_sub;
        inner.subscribers.push((id, f));
        id
    }

    /// Removes a subscriber (idempotent).
    pub fn unsubscribe(&self, id: u32) {
        let gone = {
            let mut inner = self.inner.borrow_mut();
            let i = inner.subscribers.iter().position(|s| s.0 == id);
            i.map(|i| inner.subscribers.remove(i))
        };
        drop(gone);
    }

    fn schedule_notify(self: &Rc<Self>) {
        let (mode, delay) = {
            let mut inner = self.inner.borrow_mut();
            if inner.closed || inner.notify_pending {
                return;
            }
            let delay = match inner.notify {
                Notify::Sync => None,
                Notify::Frame => Some(0),
                Notify::Every(ms) => {
                    Some((inner.last_notify + ms as u64).saturating_sub(js::now()) as i32)
                }
            };
            inner.notify_pending = delay.is_some();
            (inner.notify, delay)
        };
        let Some(delay) = delay else {
            return self.notify_now();
        };
        let weak: Weak<Shared> = Rc::downgrade(self);
        let cb = Closure::once_into_js(move || {
            if let Some(s) = weak.upgrade() {
                s.notify_now();
            }
        });
        let raf = match mode {
            Notify::Frame => js::global_fn("requestAnimationFrame"),
            _ => None,
        };
        match raf {
            Some(raf) => {
                let _ = raf.call1(&JsValue::UNDEFINED, &cb);
            }
            None => {
                let _ = js::set_timeout(wasm_bindgen::JsCast::unchecked_ref(&cb), delay);
            }
        }
    }

    fn notify_now(&self) {
        let subs: Vec<Rc<dyn Fn()>> = {
            let mut inner = self.inner.borrow_mut();
            inner.notify_pending = false;
            if inner.closed {
                return;
            }
            inner.last_notify = js::now();
            inner.subscribers.iter().map(|s| s.1.clone()).collect()
        };
        for f in subs {
            f();
        }
    }

    /// Stops everything: aborts requests, clears the timer and listeners,
    /// flushes the last state; nothing is dispatched afterwards.
    pub fn close(self: &Rc<Self>) {
        let (reqs, persist, timers, listeners) = {
            let mut inner = self.inner.borrow_mut();
            if inner.closed {
                return;
            }
            let mut persist = Vec::new();
            if let Some(m) = inner.machine.as_mut() {
                m.close(js::now());
                while let Some(a) = m.poll_action() {
                    if let Action::Persist(b) = a {
                        persist.push(b);
                    }
                }
            }
            inner.closed = true;
            inner.config = None;
            inner.subscribers.clear();
            inner.version += 1;
            (
                std::mem::take(&mut inner.reqs),
                persist,
                (inner.timer.take(), inner.spent_timer.take()),
                inner.listeners.take(),
            )
        };
        drop((reqs, timers, listeners));
        for b in persist {
            self.persist(b);
        }
    }
}
