//! The multiplexed stream of a browser context (PROTOCOL §4.6): the
//! browser's platform of [`Hub`] (`crate::exec::hub`), one per base URL,
//! shared by every client connected with `multiplex: true`. The shared host
//! (`serveShared`) connects every tab's clients so, so that a browser holds
//! one connection to a runtime however many tabs and scopes it shows.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use js_sys::Function;
use wasm_bindgen::prelude::*;

use super::http::{Http, Request};
use super::js;
use super::options::{Credentials, Options};
use super::reports::{self, Reported};
use super::requests::{self, Fetch};
use super::timer::Timer;
use crate::core::machine::{RequestId, Response};
use crate::core::share::ShareConfig;
use crate::exec::hub::{Hub, MuxIo};

/// The browser platform of a hub: its connection's `fetch`, its timer, a
/// microtask.
pub struct BrowserMux {
    http: Http,
    timer: RefCell<Timer>,
    drive: Function,
}

impl MuxIo for BrowserMux {
    type Request = Fetch;

    fn now(&self) -> u64 {
        js::now()
    }

    fn start(&self, id: RequestId, path_and_query: &str) -> Option<Fetch> {
        let request = Request {
            stream: true,
            ..Request::get(path_and_query, "text/event-stream")
        };
        Some(requests::fetch(&self.http, id, request))
    }

    fn arm_timer(&self, at: Option<u64>) {
        let mut timer = self.timer.borrow_mut();
        match at {
            Some(_) => timer.arm(at),
            None => timer.clear(),
        }
    }

    fn soon(&self) {
        js::queue_microtask(&self.drive);
    }
}

/// The hub of a browser context.
pub type BrowserHub = Hub<BrowserMux>;

impl Reported for BrowserHub {
    fn respond(self: Rc<Self>, id: RequestId, response: Response) -> bool {
        self.response(id, response)
    }

    fn stopped(self: Rc<Self>, _id: RequestId) {}

    fn chunks_held(self: Rc<Self>) {}
}

fn call_back(weak: &Weak<BrowserHub>, f: fn(&Rc<BrowserHub>)) -> Function {
    let weak = weak.clone();
    reports::function(Closure::<dyn FnMut()>::new(move || {
        if let Some(h) = weak.upgrade() {
            f(&h);
        }
    }))
}

thread_local! {
    /// The hubs of this context by base URL and credentials mode (clients
    /// share a stream only with the same credentials identity: protocol
    /// §6 rule 12), alive while a client holds one.
    static HUBS: RefCell<Vec<(String, Credentials, Weak<BrowserHub>)>> = const { RefCell::new(Vec::new()) };
}

/// The hub of `o.base_url` and `o.credentials`, made (with `o`'s headers,
/// `get_token` and `fetch`) for
/// the first client that asks; dropped, and its connection closed, with the
/// last client.
pub fn hub_for(o: &Options, get_token: &JsValue) -> Rc<BrowserHub> {
    let found = HUBS.with_borrow_mut(|hubs| {
        hubs.retain(|h| h.2.strong_count() > 0);
        let hub = hubs
            .iter()
            .find(|h| h.0 == o.base_url && h.1 == o.credentials);
        hub.and_then(|h| h.2.upgrade())
    });
    if let Some(hub) = found {
        return hub;
    }
    let seed = (js_sys::Math::random() * 9_007_199_254_740_991.0) as u64;
    let config = ShareConfig::new(seed);
    let hub = Hub::new(config, |weak| {
        let timer = Timer::new(call_back(weak, |h| {
            h.io().timer.borrow_mut().fired();
            h.timeout();
        }));
        BrowserMux {
            http: Http::new(o, get_token, reports::reports(weak.clone())),
            timer: RefCell::new(timer),
            drive: call_back(weak, |h| h.drive()),
        }
    });
    let key = (o.base_url.clone(), o.credentials);
    HUBS.with_borrow_mut(|hubs| hubs.push((key.0, key.1, Rc::downgrade(&hub))));
    hub
}
