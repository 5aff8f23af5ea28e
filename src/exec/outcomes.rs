//! The application's side of a write: a callback per [`WriteId`] that the
//! executor calls with the machine's [`WriteDone`]. The JS API settles a
//! Promise from it, the Rust API a [`WriteFuture`]: no Rust future runs
//! for a write made from JS.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::core::machine::{CoreError, WriteDone, WriteId, WriteOutcome};

/// What a write ends with.
pub type Outcome = Result<WriteOutcome, CoreError>;

/// Called once with a write's outcome, with no borrow held.
pub type Done = Box<dyn FnOnce(Outcome)>;

#[derive(Default)]
struct Slot {
    value: Option<Outcome>,
    waker: Option<Waker>,
}

/// Resolves to the outcome of one write.
pub struct WriteFuture {
    slot: Rc<RefCell<Slot>>,
}

impl WriteFuture {
    /// The future, and the callback that completes it.
    pub fn new() -> (WriteFuture, Done) {
        let slot = Rc::new(RefCell::new(Slot::default()));
        let filled = slot.clone();
        let done = Box::new(move |outcome| {
            let waker = {
                let mut slot = filled.borrow_mut();
                slot.value = Some(outcome);
                slot.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        });
        (WriteFuture { slot }, done)
    }
}

impl Future for WriteFuture {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let mut slot = self.slot.borrow_mut();
        match slot.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Writes whose outcome someone waits for.
#[derive(Default)]
pub struct Outcomes {
    waiting: Vec<(WriteId, Done)>,
}

impl Outcomes {
    /// Calls `done` with `id`'s outcome.
    pub fn wait(&mut self, id: WriteId, done: Done) {
        self.waiting.push((id, done));
    }

    /// The callback of `done.id` and its outcome, to call once no borrow is
    /// held.
    pub fn complete(&mut self, done: WriteDone) -> Option<(Done, Outcome)> {
        let i = self.waiting.iter().position(|(id, _)| *id == done.id)?;
        Some((self.waiting.swap_remove(i).1, done.result))
    }
}
