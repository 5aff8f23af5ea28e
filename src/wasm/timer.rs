//! The one timer of a client: a wake-up at the machine's `poll_timeout`.

use gloo_timers::callback::Timeout;

use super::js;

/// An armed `setTimeout` for one deadline; dropping it clears it.
#[derive(Default)]
pub struct Timer {
    armed: Option<(u64, Timeout)>,
    /// The timer that fired: dropped on the next arm, not inside its own
    /// callback.
    spent: Option<Timeout>,
}

impl Timer {
    /// Wakes `fire` at `deadline` (ms, `Date.now()` clock). A timer already
    /// armed no later is kept: the stall watchdog moves the deadline on every
    /// chunk, and an early wake-up is harmless (the machine finds nothing due
    /// and names the next deadline), so a streamed answer costs no
    /// clearTimeout/setTimeout pair per chunk.
    pub fn arm(&mut self, deadline: Option<u64>, fire: impl FnOnce() + 'static) {
        let keep = match (self.armed.as_ref(), deadline) {
            (Some(&(armed, _)), Some(at)) => armed <= at,
            (Some(_), None) => true,
            (None, at) => at.is_none(),
        };
        if keep {
            return;
        }
        self.spent = None;
        self.armed = deadline.map(|at| {
            let delay = at.saturating_sub(js::now()).min(i32::MAX as u64) as u32;
            (at, Timeout::new(delay, fire))
        });
    }

    /// Called first thing by the callback of the armed timer.
    pub fn fired(&mut self) {
        self.spent = self.armed.take().map(|t| t.1);
    }
}
