//! A fake platform for the executor (`replay_client::exec::Io`): it records
//! what it is asked in an outbox that the simulation hands to the fake
//! server, and reads the clock the simulation sets. The simulation then
//! drives the very loop the browser runs.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use replay_client::core::machine::{Action, RequestId};
use replay_client::exec::{Io, Loaded};

/// What the executor asked of the platform, in order.
#[derive(Default)]
pub struct Outbox {
    /// Requests started, aborts (a request dropped before its end),
    /// persisted values.
    pub actions: Vec<Action>,
    /// The executor asked to read a page that arrived early.
    pub read_waiting_page: bool,
    /// The timer's deadline, as last armed.
    pub timer: Option<u64>,
    /// Animation frames asked for.
    pub frames_asked: u32,
}

/// The fake platform; clones share the outbox and the clock.
#[derive(Clone, Default)]
pub struct SimIo {
    pub outbox: Rc<RefCell<Outbox>>,
    pub clock: Rc<Cell<u64>>,
}

/// A request in flight: its abort is recorded when it is dropped before it
/// ended.
pub struct SimRequest {
    id: RequestId,
    outbox: Rc<RefCell<Outbox>>,
}

impl Drop for SimRequest {
    fn drop(&mut self) {
        // An abort of a request that already ended is a no-op for the
        // server, as for `fetch`.
        self.outbox
            .borrow_mut()
            .actions
            .push(Action::Abort { id: self.id });
    }
}

impl SimIo {
    /// Takes what was asked since the last call.
    pub fn take(&self) -> Vec<Action> {
        std::mem::take(&mut self.outbox.borrow_mut().actions)
    }
}

impl Io for SimIo {
    type Request = SimRequest;

    fn now(&self) -> u64 {
        self.clock.get()
    }

    fn wall_clock(&self) -> u64 {
        self.clock.get()
    }

    fn start(&self, request: &Action) -> Option<SimRequest> {
        let id = match request {
            Action::OpenStream { id, .. } | Action::Fetch { id, .. } | Action::Post { id, .. } => {
                *id
            }
            _ => return None,
        };
        self.outbox.borrow_mut().actions.push(request.clone());
        Some(SimRequest {
            id,
            outbox: self.outbox.clone(),
        })
    }

    fn refresh_credentials(&self) {
        self.outbox
            .borrow_mut()
            .actions
            .push(Action::RefreshCredentials);
    }

    fn load(&self) -> Result<Loaded, String> {
        Ok(Loaded::Ready(None))
    }

    fn save(&self, value: &str) -> Result<(), String> {
        self.outbox
            .borrow_mut()
            .actions
            .push(Action::Persist(value.as_bytes().to_vec()));
        Ok(())
    }

    fn remove(&self) {
        self.outbox.borrow_mut().actions.push(Action::RemoveStored);
    }

    fn arm_timer(&self, at: Option<u64>) {
        self.outbox.borrow_mut().timer = at;
    }

    fn request_frame(&self) {
        self.outbox.borrow_mut().frames_asked += 1;
    }

    fn hold_chunks(&self, _max_bytes: usize) {}

    fn release_chunks(&self) {}

    fn after_requests(&self) {
        self.outbox.borrow_mut().read_waiting_page = true;
    }
}
