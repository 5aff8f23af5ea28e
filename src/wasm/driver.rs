//! The one driver loop: deliver an input to the machine, then carry out
//! what it asks for (requests, storage, the timer, subscriber calls, write
//! outcomes). Every decision is the machine's; this file only delivers and
//! executes.
//!
//! Borrow discipline: no `RefCell` borrow is held while user JS runs
//! (`getToken`, a custom storage, subscribers): outputs are taken under the
//! borrow, then carried out after it is released.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use wasm_bindgen_futures::JsFuture;
use web_sys::AbortController;

use super::http::Http;
use super::js;
use super::lifecycle::{self, Listeners};
use super::notify::{self, Subscriber, Subscribers};
use super::options::Options;
use super::outcomes::{Outcomes, WriteFuture};
use super::port::Port;
use super::requests::{self, Exchange};
use super::storage::{Loaded, Store};
use super::timer::Timer;
use super::view::ViewCache;
use crate::core::machine::{
    Action, Client as Machine, Config, Lifecycle, NotifyAt, RequestId, Target, Write,
};

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
}

/// The handle a request runner delivers through.
#[derive(Clone)]
struct DriverPort(Weak<Driver>);

impl Port for DriverPort {
    fn feed(&self, id: RequestId, input: impl FnOnce(&mut Machine, u64)) -> bool {
        self.0.upgrade().is_some_and(|d| d.feed(id, input))
    }

    fn finish(&self, id: RequestId, input: impl FnOnce(&mut Machine, u64)) {
        if let Some(d) = self.0.upgrade() {
            d.finish(id, input);
        }
    }
}

impl Driver {
    /// Creates the client and starts it: the machine first asks for the
    /// stored value (read at once from a synchronous storage).
    pub fn connect(o: Options, with_js_view: bool) -> Rc<Driver> {
        let now = js::now();
        let mut config = Config::new(o.target.clone());
        config.seed = o
            .seed
            .unwrap_or_else(|| (js_sys::Math::random() * 9_007_199_254_740_991.0) as u64);
        let connect_timeout = u64::from(o.connect_timeout_ms);
        config.fetch_timeout_ms = config.fetch_timeout_ms.max(connect_timeout);
        config.storage_timeout_ms = connect_timeout;
        config.prefetch_depth = o.prefetch_depth;
        let key = "replay-client:".to_owned() + &o.base_url + "|" + &o.target.key();
        let (store, unavailable) = Store::open(&o.storage, key);
        // Nothing to persist into: the machine need not encode its state.
        config.persist = !store.keeps_nothing();
        let driver = Rc::new(Driver {
            state: RefCell::new(State {
                machine: Machine::load(config, now),
                closed: false,
                reqs: Vec::new(),
                timer: Timer::default(),
                listeners: None,
                subscribers: Subscribers::new(o.notify),
                outcomes: Outcomes::default(),
            }),
            store: RefCell::new(store),
            http: Http::new(&o),
            target: o.target,
            js_view: RefCell::new(with_js_view.then(ViewCache::default)),
        });
        let weak = Rc::downgrade(&driver);
        let listeners = lifecycle::install(Rc::new(move |ev| {
            if let Some(d) = weak.upgrade() {
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

    /// Starts a write; resolves to its outcome.
    pub fn write(self: &Rc<Self>, write: Write) -> WriteFuture {
        let future = {
            let mut state = self.state.borrow_mut();
            let id = state.machine.handle_write(write, js::now());
            state.outcomes.wait(id)
        };
        self.drive();
        future
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

    fn finish(self: &Rc<Self>, id: RequestId, input: impl FnOnce(&mut Machine, u64)) {
        if self.feed(id, input) {
            let done = {
                let mut state = self.state.borrow_mut();
                let i = state.reqs.iter().position(|r| r.id == id);
                i.map(|i| state.reqs.swap_remove(i))
            };
            // Aborting a finished fetch is a no-op; drop outside the borrow.
            drop(done);
        }
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
        let (wakers, notify_at, waiting) = {
            let mut state = self.state.borrow_mut();
            let state = &mut *state;
            let m = &mut state.machine;
            let mut wakers = Vec::new();
            // Even after close(): a write started then ends with `closed`.
            while let Some(done) = m.poll_write_done() {
                wakers.extend(state.outcomes.complete(done));
            }
            if state.closed {
                (wakers, None, None)
            } else {
                // Notices are kept by the machine for the snapshot.
                while m.poll_notice().is_some() {}
                if let Some(change) = m.poll_view_change() {
                    if let Some(view) = self.js_view.borrow_mut().as_mut() {
                        view.pending(change);
                    }
                }
                let notify_at = if m.take_notify() {
                    state.subscribers.schedule(js::now())
                } else {
                    None
                };
                let weak = Rc::downgrade(self);
                state.timer.arm(m.poll_timeout(), move || {
                    if let Some(d) = weak.upgrade() {
                        d.state.borrow_mut().timer.fired();
                        d.input(|m, now| m.handle_timeout(now));
                    }
                });
                (wakers, notify_at, Some(m.has_waiting_page()))
            }
        };
        for w in wakers {
            w.wake();
        }
        let Some(waiting) = waiting else {
            return;
        };
        if let Some(at) = notify_at {
            self.notify(at);
        }
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
            Action::OpenStream {
                id,
                path_and_query,
                last_event_id,
            } => {
                if let Some(ctl) = self.register(id) {
                    let this = self.clone();
                    js::spawn(async move {
                        let port = DriverPort(Rc::downgrade(&this));
                        let run = requests::run_stream(
                            port,
                            &this.http,
                            id,
                            path_and_query,
                            last_event_id,
                            ctl,
                        );
                        run.await
                    });
                }
            }
            Action::Fetch {
                id,
                path_and_query: path,
                kind,
            } => self.exchange(id, Exchange::Page { path, kind }),
            Action::Post {
                id,
                path_and_query: path,
                body,
            } => self.exchange(id, Exchange::Post { path, body }),
            Action::Abort { id } => {
                let gone = {
                    let mut state = self.state.borrow_mut();
                    let i = state.reqs.iter().position(|r| r.id == id);
                    i.map(|i| state.reqs.swap_remove(i))
                };
                drop(gone);
            }
            Action::Persist(bytes) => self.save(bytes),
            Action::LoadStored => self.load(),
            Action::RemoveStored => {
                let store = self.store.borrow().clone();
                store.remove();
            }
            // getToken() is awaited before every request, so the requests
            // after this action already use fresh credentials.
            Action::RefreshCredentials => {}
        }
    }

    /// A page or a write attempt, its whole answer delivered.
    fn exchange(self: &Rc<Self>, id: RequestId, exchange: Exchange) {
        if let Some(ctl) = self.register(id) {
            let this = self.clone();
            js::spawn(async move {
                let port = DriverPort(Rc::downgrade(&this));
                requests::run_exchange(port, &this.http, id, exchange, ctl).await
            });
        }
    }

    fn register(&self, id: RequestId) -> Option<AbortController> {
        let ctl = AbortController::new().ok()?;
        self.state.borrow_mut().reqs.push(Req {
            id,
            ctl: ctl.clone(),
        });
        Some(ctl)
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
                let this = self.clone();
                js::spawn(async move {
                    match JsFuture::from(p).await {
                        Ok(v) => this.input(|m, now| {
                            m.handle_stored(v.as_string().as_deref().map(str::as_bytes), now)
                        }),
                        Err(e) => this.storage_failed(js::error_text(&e)),
                    }
                });
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
                let this = self.clone();
                js::spawn(async move {
                    if let Err(e) = JsFuture::from(pending).await {
                        this.storage_failed(js::error_text(&e));
                    }
                });
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
        let weak = Rc::downgrade(self);
        notify::defer(at, move || {
            if let Some(d) = weak.upgrade() {
                d.notify_now();
            }
        });
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
        let (reqs, persist, wakers, rest) = {
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
            let mut wakers = Vec::new();
            while let Some(done) = state.machine.poll_write_done() {
                wakers.extend(state.outcomes.complete(done));
            }
            state.closed = true;
            let rest = (
                std::mem::take(&mut state.timer),
                state.listeners.take(),
                state.subscribers.clear(),
            );
            (std::mem::take(&mut state.reqs), persist, wakers, rest)
        };
        drop((reqs, rest));
        for w in wakers {
            w.wake();
        }
        for b in persist {
            self.save(b);
        }
    }
}
