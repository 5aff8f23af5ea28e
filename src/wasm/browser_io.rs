//! The browser's [`Io`]: each method hands one action to the file of the
//! Web API that carries it out (`http.rs` fetch, `storage.rs`, `timer.rs`,
//! `frames.rs`, `lifecycle.rs`), plus the JS snapshot (`view.rs`), which
//! follows the machine's view changes. It decides nothing.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::JsValue;

use super::error::UnauthorizedHint;
use super::frames;
use super::http::Http;
use super::hub::{BrowserHub, BrowserMux};
use super::js;
use super::lifecycle::Listeners;
use super::requests::{self, Fetch};
use super::storage::{self, Store};
use super::timer::Timer;
use super::view::ViewCache;
use crate::core::fold::ViewChange;
use crate::core::machine::{Action, Machine, Target};
use crate::core::share::Transport;
use crate::exec::hub::VirtualStream;
use crate::exec::{Io, Loaded};

/// A request in flight; dropping it aborts it.
pub enum Req {
    /// Its own `fetch`.
    Http(Fetch),
    /// A stream served by the hub's multiplexed connection.
    Shared(VirtualStream<BrowserMux>),
}

/// The JS functions an executor's inputs are reached through, made once
/// per client (a timer, a frame or a microtask creates no closure).
pub struct Callbacks {
    /// Delivers the timer's wake-up.
    pub timeout: Function,
    /// Delivers an animation frame.
    pub frame: Function,
    /// Reads a page that arrived early.
    pub read_waiting_page: Function,
    /// `loaded(value)`: an asynchronous storage read the value (a string,
    /// `null` or `undefined`).
    pub loaded: Function,
    /// `failed(reason)`: an asynchronous storage read or write was rejected.
    pub storage_failed: Function,
}

/// The browser platform of one client.
pub struct BrowserIo {
    http: Http,
    /// Cloned before each call: a custom storage is user JS.
    store: RefCell<Store>,
    timer: RefCell<Timer>,
    listeners: RefCell<Option<Listeners>>,
    callbacks: Callbacks,
    target: Target,
    /// The JS snapshot of a `ReplayClient` (Rust clients read the core view).
    js_view: RefCell<Option<ViewCache>>,
    /// The hub serving this client's live stream, and its key there.
    shared: RefCell<Option<(Rc<BrowserHub>, u64)>>,
    /// What a 401's message adds for the application.
    hint: UnauthorizedHint,
}

impl BrowserIo {
    /// The platform of a client following `target`.
    pub fn new(
        http: Http,
        store: Store,
        callbacks: Callbacks,
        target: Target,
        with_js_view: bool,
        hint: UnauthorizedHint,
    ) -> Self {
        BrowserIo {
            http,
            store: RefCell::new(store),
            timer: RefCell::new(Timer::new(callbacks.timeout.clone())),
            listeners: RefCell::new(None),
            callbacks,
            target,
            js_view: RefCell::new(with_js_view.then(ViewCache::default)),
            shared: RefCell::new(None),
            hint,
        }
    }

    /// What a 401's message adds for the application.
    pub fn hint(&self) -> &UnauthorizedHint {
        &self.hint
    }

    /// The live stream comes from `hub` (this client is `key` there).
    pub fn share(&self, hub: Rc<BrowserHub>, key: u64) {
        *self.shared.borrow_mut() = Some((hub, key));
    }

    /// How the live stream comes: the hub's transport when a hub serves
    /// it (it may have found no multiplexed stream), else `Scoped`.
    pub fn transport(&self) -> Transport {
        match &*self.shared.borrow() {
            Some((hub, _)) => hub.transport(),
            None => Transport::Scoped,
        }
    }

    /// Keeps the page lifecycle listeners until close.
    pub fn keep_listeners(&self, listeners: Listeners) {
        *self.listeners.borrow_mut() = Some(listeners);
    }

    /// The timer went off: nothing is armed now.
    pub fn timer_fired(&self) {
        self.timer.borrow_mut().fired();
    }

    /// What is followed.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// `local`, `session`, `indexeddb`, `memory` or `custom`.
    pub fn storage_label(&self) -> &'static str {
        self.store.borrow().label()
    }

    /// The JS snapshot: the same object until the machine's revision moved.
    pub fn js_view(&self, m: &mut Machine) -> JsValue {
        let mut view = self.js_view.borrow_mut();
        let view = view.get_or_insert_with(ViewCache::default);
        view.get(m, &self.target, &self.hint)
    }
}

impl Io for BrowserIo {
    type Request = Req;

    fn now(&self) -> u64 {
        js::now()
    }

    fn wall_clock(&self) -> u64 {
        js::wall_clock()
    }

    fn start(&self, request: &Action) -> Option<Req> {
        let shared = self.shared.borrow().clone();
        if let Some((hub, key)) = shared {
            if let Some(stream) = hub.open(key, &self.target, request) {
                return Some(Req::Shared(stream));
            }
        }
        requests::start(&self.http, request).map(Req::Http)
    }

    fn refresh_credentials(&self) {
        self.http.refresh_credentials();
    }

    fn release(&self, claim: &str) {
        self.http.release(Some(claim));
    }

    fn load(&self) -> Result<Loaded, String> {
        let store = self.store.borrow().clone();
        Ok(match store.load()? {
            storage::Loaded::Ready(v) => Loaded::Ready(v),
            storage::Loaded::Pending(p) => {
                js::settle(&p, &self.callbacks.loaded, &self.callbacks.storage_failed);
                Loaded::Pending
            }
        })
    }

    fn save(&self, value: &str) -> Result<(), String> {
        let store = self.store.borrow().clone();
        if let Some(pending) = store.save(value)? {
            js::settle(
                &pending,
                &JsValue::UNDEFINED,
                &self.callbacks.storage_failed,
            );
        }
        Ok(())
    }

    fn remove(&self) {
        let store = self.store.borrow().clone();
        store.remove();
    }

    fn arm_timer(&self, at: Option<u64>) {
        self.timer.borrow_mut().arm(at);
    }

    fn request_frame(&self) {
        frames::request(&self.callbacks.frame);
    }

    fn hold_chunks(&self, max_bytes: usize) {
        self.http.hold_chunks(max_bytes);
    }

    fn release_chunks(&self) {
        self.http.release_chunks();
    }

    fn after_requests(&self) {
        // Requests start in the microtasks `request` queued; this one comes
        // after them (with a `getToken`, their fetch() waits for its
        // promise: the page may then be read first).
        js::queue_microtask(&self.callbacks.read_waiting_page);
    }

    fn view_changed(&self, change: ViewChange) {
        if let Some(view) = self.js_view.borrow_mut().as_mut() {
            view.pending(change);
        }
    }

    fn idle(&self, m: &mut Machine) {
        let mut view = self.js_view.borrow_mut();
        let Some(view) = view.as_mut() else { return };
        if let Some(p) = m.poll_view_progress() {
            view.stage(m, p);
        }
    }

    fn close(&self) {
        self.http.release(None);
        self.timer.borrow_mut().clear();
        let listeners = self.listeners.borrow_mut().take();
        drop(listeners);
        let shared = self.shared.borrow_mut().take();
        if let Some((hub, key)) = shared {
            hub.detach(key);
        }
    }
}

impl Drop for BrowserIo {
    fn drop(&mut self) {
        if let Some((hub, key)) = self.shared.get_mut().take() {
            hub.detach(key);
        }
    }
}
