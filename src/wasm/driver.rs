//! A browser client: the generic [`Executor`] over [`BrowserIo`], and the
//! JS functions through which the browser reports back (request facts,
//! storage answers, the timer, animation frames, lifecycle events). Every
//! decision is the machine's; the drive loop is `crate::exec`'s.

use std::rc::{Rc, Weak};

use js_sys::Function;
use wasm_bindgen::prelude::*;

use super::browser_io::{BrowserIo, Callbacks};
use super::error::UnauthorizedHint;
use super::frames;
use super::http::Http;
use super::hub::hub_for;
use super::js;
use super::lifecycle;
use super::options::Options;
use super::reports::{function, reports, Reported};
use super::storage::Store;
use crate::core::machine::{Config, Lifecycle, Machine, RequestId, Response, Settings, Target};
use crate::core::share::Transport;
use crate::exec::Executor;

/// One browser client.
pub type Driver = Executor<BrowserIo>;

/// A JS function calling `f` on the driver while it exists.
fn call_back(weak: &Weak<Driver>, f: fn(&Rc<Driver>)) -> Function {
    let weak = weak.clone();
    function(Closure::<dyn FnMut()>::new(move || {
        if let Some(d) = weak.upgrade() {
            f(&d);
        }
    }))
}

fn callbacks(weak: &Weak<Driver>) -> Callbacks {
    let w = weak.clone();
    let loaded = move |v: JsValue| {
        if let Some(d) = w.upgrade() {
            d.stored(v.as_string().as_deref());
        }
    };
    let w = weak.clone();
    let storage_failed = move |e: JsValue| {
        if let Some(d) = w.upgrade() {
            d.storage_failed(&js::error_text(&e));
        }
    };
    Callbacks {
        timeout: call_back(weak, |d| {
            d.io().timer_fired();
            d.timeout();
        }),
        frame: call_back(weak, |d| d.frame()),
        read_waiting_page: call_back(weak, |d| d.read_waiting_page()),
        loaded: function(Closure::<dyn FnMut(JsValue)>::new(loaded)),
        storage_failed: function(Closure::<dyn FnMut(JsValue)>::new(storage_failed)),
    }
}

impl Reported for Driver {
    fn respond(self: Rc<Self>, id: RequestId, response: Response) -> bool {
        self.response(id, response)
    }

    fn stopped(self: Rc<Self>, id: RequestId) {
        Executor::stopped(&self, id);
    }

    fn chunks_held(self: Rc<Self>) {
        Executor::chunks_held(&self);
    }
}

impl Executor<BrowserIo> {
    /// Creates the client and starts it: the machine first asks for the
    /// stored value (read at once from a synchronous storage). `get_token`
    /// is the JS function awaited before every request, or null
    /// (`o.get_token` is not read). With `o.multiplex`, the live stream is
    /// the context's multiplexed one (`hub.rs`).
    pub fn connect(o: Options, get_token: &JsValue, with_js_view: bool) -> Rc<Driver> {
        let now = js::now();
        let key = o.target.storage_key(&o.base_url);
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
            notify: o.notify,
            outbox_max_age_ms: o.outbox_max_age_ms,
            tail: o.tail,
        });
        let driver = Executor::new(Machine::load(config, now), |weak| {
            let http = Http::new(&o, get_token, reports(weak.clone()));
            let has_token = !get_token.is_null() && !get_token.is_undefined();
            let hint = UnauthorizedHint(o.unauthorized_hint(has_token));
            let target = o.target.clone();
            let io = BrowserIo::new(http, store, callbacks(weak), target, with_js_view, hint);
            if o.multiplex {
                let hub = hub_for(&o, get_token);
                let key = hub.attach(weak);
                io.share(hub, key);
            }
            io
        });
        driver.frames(frames::now());
        let weak = Rc::downgrade(&driver);
        let listeners = lifecycle::install(Rc::new(move |ev| {
            if let Some(d) = weak.upgrade() {
                // A lifecycle event may start or stop animation frames.
                d.frames(frames::now());
                d.lifecycle(ev);
            }
        }));
        driver.io().keep_listeners(listeners);
        if let Some(why) = unavailable {
            driver.storage_failed(&why);
        }
        if lifecycle::starts_offline() {
            driver.lifecycle(Lifecycle::Offline);
        }
        driver.start();
        driver
    }

    /// What is followed.
    pub fn target(&self) -> &Target {
        self.io().target()
    }

    /// `local`, `session`, `indexeddb`, `memory`, `custom`, or
    /// `memory-fallback` once the machine gave the storage up.
    pub fn storage_label(&self) -> &'static str {
        if self.with_machine(Machine::storage_fell_back_to_memory) {
            "memory-fallback"
        } else {
            self.io().storage_label()
        }
    }

    /// How the live stream reaches this client: `Scoped` (its own) unless
    /// a hub serves it over the multiplexed stream.
    pub fn transport(&self) -> Transport {
        self.io().transport()
    }

    /// The JS snapshot (`ReplayClient.view()`): the same object until the
    /// machine's revision moved.
    pub fn js_view(&self) -> JsValue {
        self.with_machine_mut(|m| self.io().js_view(m))
    }
}
