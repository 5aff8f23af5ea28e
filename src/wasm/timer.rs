//! The one timer of a client: a wake-up at the machine's `poll_timeout`,
//! calling one JS function made once per client (a `setTimeout` per arm,
//! no closure per arm).

use js_sys::Function;
use wasm_bindgen::JsValue;

use super::js;

/// An armed `setTimeout` for one deadline; dropping it clears it.
pub struct Timer {
    armed: Option<(u64, JsValue)>,
    /// What the timer calls (it delivers `handle_timeout`).
    fire: Function,
}

impl Timer {
    /// A timer that calls `fire` when it goes off.
    pub fn new(fire: Function) -> Self {
        Timer { armed: None, fire }
    }

    /// Wakes at `deadline` (ms, the machine's clock: [`js::now`]). A timer already armed
    /// no later is kept: the stall watchdog moves the deadline on every
    /// chunk, and an early wake-up is harmless (the machine finds nothing due
    /// and names the next deadline), so a streamed answer costs no
    /// clearTimeout/setTimeout pair per chunk.
    pub fn arm(&mut self, deadline: Option<u64>) {
        let keep = match (self.armed.as_ref(), deadline) {
            (Some(&(armed, _)), Some(at)) => armed <= at,
            (Some(_), None) => true,
            (None, at) => at.is_none(),
        };
        if keep {
            return;
        }
        self.clear();
        self.armed = deadline.map(|at| {
            let delay = at.saturating_sub(js::now()).min(i32::MAX as u64) as i32;
            (at, js::set_timeout(&self.fire, delay))
        });
    }

    /// Called first thing when the timer went off: nothing is armed now.
    pub fn fired(&mut self) {
        self.armed = None;
    }

    /// Clears the armed timeout, if any.
    pub fn clear(&mut self) {
        if let Some((_, handle)) = self.armed.take() {
            js::clear_timeout(&handle);
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.clear();
    }
}
