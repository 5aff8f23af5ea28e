//! Subscribers and their calls, paced as the core's [`NotifyPacer`] says:
//! now, at the next animation frame (`setTimeout(0)` where there is none),
//! or after a delay.

use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::prelude::*;

use super::http;
use super::js;
use crate::core::machine::{Notify, NotifyAt, NotifyPacer};

/// A subscriber callback.
pub type Subscriber = Rc<dyn Fn()>;

/// The subscribers of one client.
pub struct Subscribers {
    list: Vec<(u32, Subscriber)>,
    next_id: u32,
    pacer: NotifyPacer,
}

impl Subscribers {
    /// No subscribers yet, calls paced by `mode`.
    pub fn new(mode: Notify) -> Self {
        Subscribers {
            list: Vec::new(),
            next_id: 0,
            pacer: NotifyPacer::new(mode),
        }
    }

    /// Adds `f`; returns its id for [`remove`](Self::remove).
    pub fn add(&mut self, f: Subscriber) -> u32 {
        self.next_id += 1;
        self.list.push((self.next_id, f));
        self.next_id
    }

    /// Removes a subscriber (idempotent); returns it, to drop unborrowed.
    pub fn remove(&mut self, id: u32) -> Option<Subscriber> {
        let i = self.list.iter().position(|s| s.0 == id)?;
        Some(self.list.remove(i).1)
    }

    /// Forgets every subscriber.
    pub fn clear(&mut self) -> Vec<(u32, Subscriber)> {
        std::mem::take(&mut self.list)
    }

    /// A change is due: when to call, per the pacer; `in_frame`: it was
    /// made by an input delivered inside an animation frame.
    pub fn schedule(&mut self, now: u64, in_frame: bool) -> Option<NotifyAt> {
        if in_frame {
            self.pacer.schedule_in_frame(now)
        } else {
            self.pacer.schedule(now)
        }
    }

    /// Whether stream chunks are to be held for the next frame, given
    /// whether animation frames run now.
    pub fn holds_chunks(&self, frames_run: bool) -> bool {
        self.pacer.holds_chunks(frames_run)
    }

    /// The subscribers to call now (call them with no borrow held).
    pub fn deliver(&mut self, now: u64) -> Vec<Subscriber> {
        self.pacer.delivered(now);
        self.list.iter().map(|s| s.1.clone()).collect()
    }
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[wasm_bindgen(js_name = nextFrame)]
    fn next_frame(f: &Function, wait_ms: u32);
}

/// Calls `f` at `at` (never synchronously: `NotifyAt::Now` is the caller's):
/// the next frame, while frames should run, at most
/// [`NotifyPacer::FRAME_WAIT_MS`] late ([`NotifyPacer::frame_wait`]); on a
/// hidden page, the frame that comes when it shows; where no frames exist
/// (a Worker), a timer.
pub fn defer(at: NotifyAt, f: &Function) {
    if at == NotifyAt::NextFrame {
        if let Some(ms) = NotifyPacer::frame_wait(http::frames_run()) {
            return next_frame(f, ms);
        }
        if let Some(raf) = js::global_fn("requestAnimationFrame") {
            return drop(raf.call1(&JsValue::UNDEFINED, f));
        }
    }
    let delay = match at {
        NotifyAt::After(ms) => ms.min(i32::MAX as u64) as i32,
        _ => 0,
    };
    let _ = js::set_timeout(f, delay);
}
