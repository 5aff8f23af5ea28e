//! The application's side of a write: a future per [`WriteId`] that the
//! driver completes with the machine's [`WriteDone`].

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::core::machine::{CoreError, WriteDone, WriteId, WriteOutcome};

type Outcome = Result<WriteOutcome, CoreError>;

#[derive(Default)]
struct Slot {
    value: Option<Outcome>,
    waker: Option<Waker>,
}

/// Resolves to the outcome of one write.
pub struct WriteFuture {
    slot: Rc<RefCell<Slot>>,
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

/// Writes whose outcome someone awaits.
#[derive(Default)]
pub struct Outcomes {
    waiting: Vec<(WriteId, Rc<RefCell<Slot>>)>,
}

impl Outcomes {
    /// A future for `id`'s outcome.
    pub fn wait(&mut self, id: WriteId) -> WriteFuture {
        let slot = Rc::new(RefCell::new(Slot::default()));
        self.waiting.push((id, slot.clone()));
        WriteFuture { slot }
    }

    /// Completes the future of `done.id`; returns the waker to call once no
    /// borrow is held (waking runs no user code now, but stays outside).
    pub fn complete(&mut self, done: WriteDone) -> Option<Waker> {
        let i = self.waiting.iter().position(|(id, _)| *id == done.id)?;
        let (_, slot) = self.waiting.swap_remove(i);
        let mut slot = slot.borrow_mut();
        slot.value = Some(done.result);
        slot.waker.take()
    }
}
