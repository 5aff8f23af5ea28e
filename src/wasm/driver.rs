//! The one driver loop: deliver an input to the machine, then carry out
//! what it asks for (requests, storage, the timer, subscriber calls, write
//! outcomes). Every decision is the machine's; this file only delivers and
//! executes.
//!
//! Borrow discipline: no `RefCell` borrow is held while user JS runs
//! (`getToken`, a custom storage, subscribers): outputs are taken under the
//! borrow, then carried out after it is released.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;

use super::http::{self, Http, Reports};
use super::js;
use super::lifecycle::{self, Listeners};
use super::notify::{self, Subscriber, Subscribers};
use super::options::Options;
use super::outcomes::{Done, Outcomes};
use super::requests::{self, Req};
use super::storage::{storage_key, Loaded, Store};
use super::timer::Timer;
use super::view::ViewCache;
use crate::core::machine::{
    Action, Config, CoreError, Lifecycle, Machine, NotifyAt, RequestId, Response, Settings, Target,
    Write,
};

/// Everything mutable of one client but the store and the JS view.
struct State {
    machine: Machine,
    /// Set by `close()`: nothing more is carried out.
    closed: bool,
    reqs: Vec<Req>,
    timer: Timer,
    listeners: Option<Listeners>,
    subscribers: Subscribers,
    outcomes: Outcomes,
}

/// One client: its machine and the browser resources that execute it.
pub struct Driver {
    state: RefCell<State>,
    /// Kept apart: a custom storage is user JS and may re-enter the client.
    store: RefCell<Store>,
    http: Http,
    target: Target,
    /// The JS snapshot of a `ReplayClient` (Rust clients read the core view).
    js_view: RefCell<Option<ViewCache>>,
    /// Reads a page that arrived early, queued as a microtask behind the
    /// requests just started (`has_waiting_page`).
    read_waiting_page: Function,
    /// Calls the subscribers when the pacer deferred them.
    notify_later: Function,
    /// Where an asynchronous storage answers.
    storage: StorageReports,
    /// Set while an input delivered inside an animation frame is driven;
    /// taken by the first notification it schedules, so a subscriber's own
    /// call into the client (a nested drive) is not taken for the frame's.
    in_frame: Cell<bool>,
}

/// A JS function calling `f` on the driver while it exists, made once per
/// client: a timer, a deferred notification or a queued microtask creates
/// no closure.
fn call_back(weak: &Weak<Driver>, f: fn(&Rc<Driver>)) -> Function {
    let weak = weak.clone();
    function(Closure::<dyn FnMut()>::new(move || {
        if let Some(d) = weak.upgrade() {
            f(&d);
        }
    }))
}

/// The JS functions an asynchronous storage's promises settle into.
struct StorageReports {
    /// `loaded(value)`: the stored string, `null` or `undefined`.
    loaded: Function,
    /// `failed(reason)`: a read or write was rejected.
    failed: Function,
}

impl StorageReports {
    fn new(weak: &Weak<Driver>) -> Self {
        let w = weak.clone();
        let loaded = move |v: JsValue| {
            if let Some(d) = w.upgrade() {
                d.input(|m, now| m.handle_stored(v.as_string().as_deref().map(str::as_bytes), now));
            }
        };
        let w = weak.clone();
        let failed = move |e: JsValue| {
            if let Some(d) = w.upgrade() {
                d.storage_failed(js::error_text(&e));
            }
        };
        StorageReports {
            loaded: function(Closure::<dyn FnMut(JsValue)>::new(loaded)),
            failed: function(Closure::<dyn FnMut(JsValue)>::new(failed)),
        }
    }
}

/// The JS functions through which `browser.js` reports on this client's
/// requests, made once per client (not a future and two closures per
/// request). They hold the driver weakly: a report after it is gone is
/// dropped.
fn reports(weak: &Weak<Driver>) -> Reports {
    let w = weak.clone();
    let opened = move |id: f64, status: u16, ct: Option<String>, retry_after: Option<String>| {
        let id = RequestId(id as u64);
        w.upgrade().is_some_and(|d| {
            d.feed(id, |m, now| {
                wall_clock_for(m, retry_after.as_deref(), now);
                let head = Response::Head {
                    status,
                    content_type: ct.as_deref(),
                    retry_after: retry_after.as_deref(),
                };
                m.handle_response(id, head, now)
            })
        })
    };
    let w = weak.clone();
    // `chunks`: the body's chunks since the last delivery, read as one
    // (each copied once, straight into wasm memory). `in_frame`: a stream's
    // chunks waited for, and are delivered in, an animation frame
    // (`Http::hold_chunks`): subscribers are called in it.
    let chunk = move |id: f64, chunks: Array, in_frame: bool| {
        let id = RequestId(id as u64);
        let bytes = js::concat(&chunks);
        w.upgrade().is_some_and(|d| {
            d.in_frame.set(in_frame);
            let wanted = d.feed(id, |m, now| {
                m.handle_response(id, Response::Body(&bytes), now)
            });
            d.in_frame.set(false);
            wanted
        })
    };
    let w = weak.clone();
    // `ended`: the body's end (false: stopped, nothing to report).
    let settled = move |id: f64, ended: bool| {
        if let Some(d) = w.upgrade() {
            let id = RequestId(id as u64);
            if ended {
                d.finish(id, |m, now| m.handle_response(id, Response::End, now));
            } else {
                drop(d.take_request(id));
            }
        }
    };
    let w = weak.clone();
    let failed = move |id: f64, kind: String, message: String| {
        if let Some(d) = w.upgrade() {
            let id = RequestId(id as u64);
            let error = CoreError::from(Http::failure(&kind, message));
            d.finish(id, |m, now| {
                m.handle_response(id, Response::Failed(error), now)
            });
        }
    };
    type Opened = dyn FnMut(f64, u16, Option<String>, Option<String>) -> bool;
    Reports {
        opened: function(Closure::<Opened>::new(opened)),
        chunk: function(Closure::<dyn FnMut(f64, Array, bool) -> bool>::new(chunk)),
        settled: function(Closure::<dyn FnMut(f64, bool)>::new(settled)),
        failed: function(Closure::<dyn FnMut(f64, String, String)>::new(failed)),
    }
}

/// Reports the wall clock before an answer whose `Retry-After` may be an
/// HTTP date: the only thing the machine reads on it.
fn wall_clock_for(m: &mut Machine, retry_after: Option<&str>, now: u64) {
    if retry_after.is_some() {
        m.handle_wall_clock(js::wall_clock(), now);
    }
}

/// A closure handed to JS for good (it holds the driver weakly).
fn function<F: ?Sized + wasm_bindgen::closure::WasmClosure>(f: Closure<F>) -> Function {
    f.into_js_value().unchecked_into()
}

impl Driver {
    /// Creates the client and starts it: the machine first asks for the
    /// stored value (read at once from a synchronous storage). `get_token`
    /// is the JS function awaited before every request, or null
    /// (`o.get_token` is not read).
    pub fn connect(o: Options, get_token: &JsValue, with_js_view: bool) -> Rc<Driver> {
        let now = js::now();
        let key = storage_key(&o.base_url, &o.target);
        let (store, unavailable) = Store::open(&o.storage, key);
        let config = Config::from_settings(Settings {
            target: o.target.clone(),
            connect_timeout_ms: u64::from(o.connect_timeout_ms),
            prefetch_depth: o.prefetch_depth,
            seed: o
                .seed
                .unwrap_or_else(|| (js_sys::Math::random() * 9_007_199_254_740_991.0) as u64),
            // Nothing to persist into: the machine need not encode its state.
            persist: !store.keeps_nothing(),
        });
        let driver = Rc::new_cyclic(|weak: &Weak<Driver>| {
            let fire = call_back(weak, |d| {
                d.state.borrow_mut().timer.fired();
                d.input(|m, now| m.handle_timeout(now));
            });
            Driver {
                state: RefCell::new(State {
                    machine: Machine::load(config, now),
                    closed: false,
                    reqs: Vec::new(),
                    timer: Timer::new(fire),
                    listeners: None,
                    subscribers: Subscribers::new(o.notify),
                    outcomes: Outcomes::default(),
                }),
                store: RefCell::new(store),
                http: Http::new(&o, get_token, reports(weak)),
                target: o.target,
                js_view: RefCell::new(with_js_view.then(ViewCache::default)),
                read_waiting_page: call_back(weak, |d| {
                    d.input(|m, now| m.handle_waiting_page(now))
                }),
                notify_later: call_back(weak, |d| d.notify_now()),
                storage: StorageReports::new(weak),
                in_frame: Cell::new(false),
            }
        });
        driver.frames();
        let weak = Rc::downgrade(&driver);
        let listeners = lifecycle::install(Rc::new(move |ev| {
            if let Some(d) = weak.upgrade() {
                d.frames();
                d.input(|m, now| m.handle_lifecycle(ev, now));
            }
        }));
        driver.state.borrow_mut().listeners = Some(listeners);
        if let Some(why) = unavailable {
            driver.input(|m, now| m.handle_storage_failed(&why, now));
        }
        if lifecycle::starts_offline() {
            driver.input(|m, now| m.handle_lifecycle(Lifecycle::Offline, now));
        }
        driver.drive();
        driver
    }

    /// Tells the body reader whether to hold stream chunks for the next
    /// animation frame, as the pacer says for whether frames run now.
    fn frames(&self) {
        let frames_run = http::frames_run();
        let hold = self.state.borrow().subscribers.holds_chunks(frames_run);
        self.http.hold_chunks(hold);
    }

    /// What is followed.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Reads the machine. Do not call into the client from `f`.
    pub fn with_machine<R>(&self, f: impl FnOnce(&Machine) -> R) -> R {
        f(&self.state.borrow().machine)
    }

    /// `local`, `session`, `indexeddb`, `memory`, `custom`, or
    /// `memory-fallback` once the machine gave the storage up.
    pub fn storage_label(&self) -> &'static str {
        if self.with_machine(Machine::storage_fell_back_to_memory) {
            "memory-fallback"
        } else {
            self.store.borrow().label()
        }
    }

    /// The JS snapshot (`ReplayClient.view()`): the same object until the
    /// machine's revision moved.
    pub fn js_view(&self) -> wasm_bindgen::JsValue {
        let mut state = self.state.borrow_mut();
        let mut view = self.js_view.borrow_mut();
        let view = view.get_or_insert_with(ViewCache::default);
        view.get(&mut state.machine, &self.target)
    }

    /// Starts a write; `done` gets its outcome.
    pub fn write(self: &Rc<Self>, write: Write, done: Done) {
        {
            let mut state = self.state.borrow_mut();
            let id = state.machine.handle_write(write, js::now());
            state.outcomes.wait(id, done);
        }
        self.drive();
    }

    /// Adds a subscriber; returns its id for [`unsubscribe`](Self::unsubscribe).
    pub fn subscribe(&self, f: Subscriber) -> u32 {
        self.state.borrow_mut().subscribers.add(f)
    }

    /// Removes a subscriber (idempotent).
    pub fn unsubscribe(&self, id: u32) {
        let gone = self.state.borrow_mut().subscribers.remove(id);
        drop(gone);
    }

    /// True while request `id` is in flight and the client open.
    fn is_current(&self, id: RequestId) -> bool {
        let state = self.state.borrow();
        !state.closed && state.reqs.iter().any(|r| r.id == id)
    }

    fn feed(self: &Rc<Self>, id: RequestId, input: impl FnOnce(&mut Machine, u64)) -> bool {
        if !self.is_current(id) {
            return false;
        }
        self.input(input);
        self.is_current(id)
    }

    /// Delivers the last input about request `id`, if it is still wanted,
    /// and forgets the request.
    fn finish(self: &Rc<Self>, id: RequestId, input: impl FnOnce(&mut Machine, u64)) {
        if let Some(req) = self.take_request(id) {
            self.input(input);
            // Aborting a finished fetch is a no-op; dropped unborrowed.
            drop(req);
        }
    }

    /// Removes request `id` from those in flight (`None` once closed).
    fn take_request(&self, id: RequestId) -> Option<Req> {
        let mut state = self.state.borrow_mut();
        let i = state.reqs.iter().position(|r| r.id == id)?;
        Some(state.reqs.swap_remove(i))
    }

    /// Delivers one input, then carries out what follows.
    fn input(self: &Rc<Self>, input: impl FnOnce(&mut Machine, u64)) {
        {
            let mut state = self.state.borrow_mut();
            if state.closed {
                return;
            }
            input(&mut state.machine, js::now());
        }
        self.drive();
    }

    /// Carries out the machine's outputs, in order. An action may deliver an
    /// input at once (a synchronous storage read), which drives again: the
    /// machine's queue keeps the order.
    fn drive(self: &Rc<Self>) {
        loop {
            let action = {
                let mut state = self.state.borrow_mut();
                if state.closed {
                    break;
                }
                state.machine.poll_action()
            };
            match action {
                Some(a) => self.execute(a),
                None => break,
            }
        }
        let (dones, notify_at, waiting) = {
            let mut state = self.state.borrow_mut();
            let state = &mut *state;
            let m = &mut state.machine;
            let mut dones = Vec::new();
            // Even after close(): a write started then ends with `closed`.
            while let Some(done) = m.poll_write_done() {
                dones.extend(state.outcomes.complete(done));
            }
            if state.closed {
                (dones, None, None)
            } else {
                // Notices are kept by the machine for the snapshot.
                while m.poll_notice().is_some() {}
                if let Some(change) = m.poll_view_change() {
                    if let Some(view) = self.js_view.borrow_mut().as_mut() {
                        view.pending(change);
                    }
                }
                let notify_at = if m.take_notify() {
                    state
                        .subscribers
                        .schedule(js::now(), self.in_frame.replace(false))
                } else {
                    None
                };
                state.timer.arm(m.poll_timeout());
                (dones, notify_at, Some(m.has_waiting_page()))
            }
        };
        for (done, outcome) in dones {
            done(outcome);
        }
        let Some(waiting) = waiting else {
            return;
        };
        if let Some(at) = notify_at {
            self.notify(at);
        }
        if waiting {
            // A page that arrived early is read once the request after it is
            // on its way (pipelined paging): requests start in the microtasks
            // `request` queued, and this one comes after them (with a
            // `getToken`, their fetch() waits for its promise: the page may
            // then be read first).
            js::queue_microtask(&self.read_waiting_page);
        } else {
            // Nothing to read: prepare UI objects while the network works.
            self.stage_view();
        }
    }

    /// Hands a restore's progress to the JS view, to convert its items
    /// ahead of the one repaint at the end.
    fn stage_view(&self) {
        let mut view = self.js_view.borrow_mut();
        let Some(view) = view.as_mut() else { return };
        let mut state = self.state.borrow_mut();
        let m = &mut state.machine;
        if let Some(p) = m.poll_view_progress() {
            view.stage(m, p);
        }
    }

    fn execute(self: &Rc<Self>, action: Action) {
        match action {
            Action::Abort { id } => drop(self.take_request(id)),
            Action::Persist(bytes) => self.save(bytes),
            Action::LoadStored => self.load(),
            Action::RemoveStored => {
                let store = self.store.borrow().clone();
                store.remove();
            }
            // getToken() is awaited before every request: the next one is
            // asked for a fresh token, so the requests after this action
            // use it (a provider that caches would hand back the refused one).
            Action::RefreshCredentials => self.http.refresh_credentials(),
            request @ (Action::OpenStream { .. } | Action::Fetch { .. } | Action::Post { .. }) => {
                if let Some(req) = requests::start(&self.http, &request) {
                    self.state.borrow_mut().reqs.push(req);
                }
            }
        }
    }

    /// `Action::LoadStored`: the value goes back to the machine, now or when
    /// an asynchronous storage answers.
    fn load(self: &Rc<Self>) {
        // A custom `get` is user JS: call it through a clone, unborrowed.
        let store = self.store.borrow().clone();
        match store.load() {
            Ok(Loaded::Ready(v)) => {
                self.input(|m, now| m.handle_stored(v.as_deref().map(str::as_bytes), now))
            }
            Ok(Loaded::Pending(p)) => {
                js::settle(&p, &self.storage.loaded, &self.storage.failed);
            }
            Err(why) => self.storage_failed(why),
        }
    }

    /// `Action::Persist`: stores the value; a failure goes back to the machine.
    fn save(self: &Rc<Self>, bytes: Vec<u8>) {
        // The machine persists JSON, which is always UTF-8.
        let Ok(value) = String::from_utf8(bytes) else {
            return;
        };
        // Clone the handle: a custom `set` is user JS and must run unborrowed.
        let store = self.store.borrow().clone();
        match store.save(&value) {
            Ok(None) => {}
            Ok(Some(pending)) => {
                js::settle(&pending, &JsValue::UNDEFINED, &self.storage.failed);
            }
            Err(why) => self.storage_failed(why),
        }
    }

    fn storage_failed(self: &Rc<Self>, why: String) {
        self.input(|m, now| m.handle_storage_failed(&why, now));
    }

    /// Calls the subscribers at `at`, with no borrow held.
    fn notify(self: &Rc<Self>, at: NotifyAt) {
        if at == NotifyAt::Now {
            return self.notify_now();
        }
        notify::defer(at, &self.notify_later);
    }

    fn notify_now(&self) {
        let subs = {
            let mut state = self.state.borrow_mut();
            if state.closed {
                return;
            }
            state.subscribers.deliver(js::now())
        };
        for f in subs {
            f();
        }
    }

    /// Stops everything: aborts requests, ends pending writes with `closed`,
    /// clears the timer and listeners, flushes the last state; nothing is
    /// carried out afterwards.
    pub fn close(self: &Rc<Self>) {
        let (reqs, persist, dones, rest) = {
            let mut state = self.state.borrow_mut();
            let state = &mut *state;
            if state.closed {
                return;
            }
            state.machine.close(js::now());
            let mut persist = Vec::new();
            while let Some(a) = state.machine.poll_action() {
                // The requests are dropped (aborted) below.
                if let Action::Persist(b) = a {
                    persist.push(b);
                }
            }
            let mut dones = Vec::new();
            while let Some(done) = state.machine.poll_write_done() {
                dones.extend(state.outcomes.complete(done));
            }
            state.closed = true;
            state.timer.clear();
            let rest = (state.listeners.take(), state.subscribers.clear());
            (std::mem::take(&mut state.reqs), persist, dones, rest)
        };
        drop((reqs, rest));
        for (done, outcome) in dones {
            done(outcome);
        }
        for b in persist {
            self.save(b);
        }
    }
}
