//! The JS functions through which `browser.js` reports on the requests of
//! one executor (a client's, or a hub's connection), made once per
//! executor: not a future and two closures per request. They hold it
//! weakly: a report after it is gone is dropped. One set of closures for
//! both kinds (`dyn Reported`): a copy per kind was 1.4 KB of wasm.

use std::rc::{Rc, Weak};

use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;

use super::http::{Http, Reports};
use super::js;
use crate::core::machine::{RequestId, Response};

/// What the reports deliver to.
pub trait Reported {
    /// One fact of request `id`'s answer; whether more is wanted.
    fn respond(self: Rc<Self>, id: RequestId, response: Response) -> bool;
    /// Request `id` stopped with nothing to report.
    fn stopped(self: Rc<Self>, id: RequestId);
    /// A first chunk of the stream is held.
    fn chunks_held(self: Rc<Self>);
}

/// A closure handed to JS for good.
pub fn function<F: ?Sized + wasm_bindgen::closure::WasmClosure>(f: Closure<F>) -> Function {
    f.into_js_value().unchecked_into()
}

/// The report functions of `weak`.
pub fn reports(weak: Weak<dyn Reported>) -> Reports {
    let w = weak.clone();
    let opened = move |id: f64, status: u16, ct: Option<String>, retry_after: Option<String>| {
        let head = Response::Head {
            status,
            content_type: ct,
            retry_after,
        };
        w.upgrade()
            .is_some_and(|d| d.respond(RequestId(id as u64), head))
    };
    let w = weak.clone();
    // `chunks`: the body's chunks since the last delivery, read as one
    // (each copied once, straight into wasm memory).
    let chunk = move |id: f64, chunks: Array| {
        let bytes = js::concat(&chunks);
        w.upgrade()
            .is_some_and(|d| d.respond(RequestId(id as u64), Response::Body(bytes)))
    };
    let w = weak.clone();
    // `ended`: the body's end (false: stopped, nothing to report).
    let settled = move |id: f64, ended: bool| {
        if let Some(d) = w.upgrade() {
            let id = RequestId(id as u64);
            if ended {
                d.respond(id, Response::End);
            } else {
                d.stopped(id);
            }
        }
    };
    let w = weak.clone();
    let failed = move |id: f64, kind: String, message: String| {
        if let Some(d) = w.upgrade() {
            let error = Http::failure(&kind, message);
            d.respond(RequestId(id as u64), Response::Failed(error));
        }
    };
    let w = weak.clone();
    let held = move |_id: f64| {
        if let Some(d) = w.upgrade() {
            d.chunks_held();
        }
    };
    type Opened = dyn FnMut(f64, u16, Option<String>, Option<String>) -> bool;
    Reports {
        opened: function(Closure::<Opened>::new(opened)),
        chunk: function(Closure::<dyn FnMut(f64, Array) -> bool>::new(chunk)),
        settled: function(Closure::<dyn FnMut(f64, bool)>::new(settled)),
        failed: function(Closure::<dyn FnMut(f64, String, String)>::new(failed)),
        held: function(Closure::<dyn FnMut(f64)>::new(held)),
    }
}
