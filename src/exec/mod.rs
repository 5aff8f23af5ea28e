//! The one drive loop of a client, over any platform ([`Io`]): deliver an
//! input to the machine, then carry out what it asks for (requests,
//! storage, the timer, animation frames and held chunks, subscriber calls,
//! write outcomes). Every decision is the machine's; this module only
//! delivers and executes. The browser runs it over `wasm::BrowserIo`; the
//! native simulations run the very same loop over a fake [`Io`].
//!
//! Borrow discipline: no `RefCell` borrow is held while the platform or user
//! code runs (`getToken`, a custom storage, subscribers, write callbacks):
//! outputs are taken under the borrow, then carried out after it is
//! released. An action may deliver an input at once (a synchronous storage
//! read, released chunks), which drives again: the machine's queues keep
//! the order.

pub mod hub;
mod io;
mod outcomes;
mod subscribers;

pub use io::{Io, Loaded};
pub use outcomes::{Done, Outcome, WriteFuture};
pub use subscribers::Subscriber;

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use crate::core::machine::{
    Action, CoreError, Frames, Lifecycle, Machine, Pace, RequestId, Response, Write,
};
use outcomes::Outcomes;
use subscribers::Subscribers;

/// Everything mutable of one client.
struct State<R> {
    machine: Machine,
    /// Set by `close()`: nothing more is carried out.
    closed: bool,
    /// The requests in flight, with the machine's ids.
    requests: Vec<(RequestId, R)>,
    subscribers: Subscribers,
    outcomes: Outcomes,
}

/// One client: its machine and the platform that executes it.
pub struct Executor<I: Io> {
    state: RefCell<State<I::Request>>,
    io: I,
}

impl<I: Io> Executor<I> {
    /// An executor for `machine` over the platform `make_io` builds (it may
    /// keep the weak handle to deliver inputs later). Nothing is carried out
    /// until [`start`](Self::start).
    pub fn new(machine: Machine, make_io: impl FnOnce(&Weak<Self>) -> I) -> Rc<Self> {
        Rc::new_cyclic(|weak| Executor {
            state: RefCell::new(State {
                machine,
                closed: false,
                requests: Vec::new(),
                subscribers: Subscribers::default(),
                outcomes: Outcomes::default(),
            }),
            io: make_io(weak),
        })
    }

    /// Carries out what the machine asked for on creation.
    pub fn start(self: &Rc<Self>) {
        self.tell_wall_clock();
        self.drive();
    }

    /// The wall clock, which the outbox's message times are on (`at`, and
    /// the age past which a queued message expires).
    fn tell_wall_clock(&self) {
        let wall = self.io.wall_clock();
        let now = self.io.now();
        self.state.borrow_mut().machine.handle_wall_clock(wall, now);
    }

    /// The platform.
    pub fn io(&self) -> &I {
        &self.io
    }

    /// Reads the machine. Do not call into the client from `f`.
    pub fn with_machine<R>(&self, f: impl FnOnce(&Machine) -> R) -> R {
        f(&self.state.borrow().machine)
    }

    /// Reads the machine mutably (its `poll_view_*` outputs). Do not call
    /// into the client from `f`.
    pub fn with_machine_mut<R>(&self, f: impl FnOnce(&mut Machine) -> R) -> R {
        f(&mut self.state.borrow_mut().machine)
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.state.borrow().closed
    }

    /// Delivers one input, then carries out what follows.
    pub fn input(self: &Rc<Self>, input: impl FnOnce(&mut Machine, u64)) {
        {
            let mut state = self.state.borrow_mut();
            if state.closed {
                return;
            }
            input(&mut state.machine, self.io.now());
        }
        self.drive();
    }

    /// One fact of the answer to request `id`. Returns whether more of it
    /// is wanted (false: stop reading it). After `End` or `Failed` the
    /// request is forgotten.
    pub fn response(self: &Rc<Self>, id: RequestId, response: Response) -> bool {
        let last = matches!(response, Response::End | Response::Failed(_));
        if last {
            if let Some(request) = self.take_request(id) {
                self.input(|m, now| m.handle_response(id, response, now));
                // Aborting a finished request is a no-op; dropped unborrowed.
                drop(request);
            }
            return false;
        }
        if !self.is_current(id) {
            return false;
        }
        let wall = match &response {
            Response::Head {
                retry_after: Some(_),
                ..
            } => Some(self.io.wall_clock()),
            _ => None,
        };
        self.input(|m, now| {
            // A `Retry-After` may be an HTTP date: the one thing the machine
            // reads on the wall clock.
            if let Some(wall) = wall {
                m.handle_wall_clock(wall, now);
            }
            m.handle_response(id, response, now)
        });
        self.is_current(id)
    }

    /// Request `id` stopped with nothing to report (its reader was told to
    /// stop): forgotten.
    pub fn stopped(&self, id: RequestId) {
        drop(self.take_request(id));
    }

    /// A request failed before any answer (`Response::Failed`).
    pub fn failed(self: &Rc<Self>, id: RequestId, error: CoreError) {
        self.response(id, Response::Failed(error));
    }

    /// The timer asked for went off.
    pub fn timeout(self: &Rc<Self>) {
        self.tell_wall_clock();
        self.input(|m, now| m.handle_timeout(now));
    }

    /// An animation frame began.
    pub fn frame(self: &Rc<Self>) {
        self.input(|m, now| m.handle_frame(now));
    }

    /// The body reader holds a first chunk of the live stream.
    pub fn chunks_held(self: &Rc<Self>) {
        self.input(|m, now| m.handle_chunks_held(now));
    }

    /// Whether frames run now (at start and after lifecycle events).
    pub fn frames(self: &Rc<Self>, frames: Frames) {
        self.input(|m, now| m.handle_frames(frames, now));
    }

    /// A page lifecycle or connectivity event.
    pub fn lifecycle(self: &Rc<Self>, event: Lifecycle) {
        self.input(|m, now| m.handle_lifecycle(event, now));
    }

    /// The stored value, answering [`Loaded::Pending`].
    pub fn stored(self: &Rc<Self>, value: Option<&str>) {
        self.input(|m, now| m.handle_stored(value.map(str::as_bytes), now));
    }

    /// The storage failed (a read or a write).
    pub fn storage_failed(self: &Rc<Self>, why: &str) {
        self.input(|m, now| m.handle_storage_failed(why, now));
    }

    /// Reads a page that arrived early ([`Io::after_requests`]).
    pub fn read_waiting_page(self: &Rc<Self>) {
        self.input(|m, now| m.handle_waiting_page(now));
    }

    /// Starts a write; `done` gets its outcome.
    pub fn write(self: &Rc<Self>, write: Write, done: Done) {
        {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            state.machine.handle_wall_clock(self.io.wall_clock(), now);
            // Even after close(): the machine ends it with `closed`.
            let id = state.machine.handle_write(write, now);
            state.outcomes.wait(id, done);
        }
        self.drive();
    }

    /// `loadOlder()`: `done` gets its outcome (`Machine::load_older`).
    pub fn load_older(self: &Rc<Self>, done: Done) {
        {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            let id = state.machine.load_older(now);
            state.outcomes.wait(id, done);
        }
        self.drive();
    }

    /// `retry(id)`: `done` gets the outcome of the message (the answer)
    /// sent again; false (and `done` dropped) when it is not pending.
    pub fn retry_pending(self: &Rc<Self>, id: &str, done: Done) -> bool {
        let started = {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            state.machine.handle_wall_clock(self.io.wall_clock(), now);
            match state.machine.retry_pending(id, now) {
                Some(id) => {
                    state.outcomes.wait(id, done);
                    true
                }
                None => false,
            }
        };
        self.drive();
        started
    }

    /// `discard(id)`: whether the message (the answer) left the outbox
    /// unsent.
    pub fn discard_pending(self: &Rc<Self>, id: &str) -> bool {
        let discarded = {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            state.machine.discard_pending(id, now)
        };
        self.drive();
        discarded
    }

    /// Adds a subscriber; returns its id for [`unsubscribe`](Self::unsubscribe).
    pub fn subscribe(&self, f: Subscriber) -> u32 {
        self.state.borrow_mut().subscribers.add(f)
    }

    /// Removes a subscriber (idempotent).
    pub fn unsubscribe(&self, id: u32) {
        let gone = self.state.borrow_mut().subscribers.remove(id);
        drop(gone);
    }

    /// True while request `id` is in flight and the client open.
    fn is_current(&self, id: RequestId) -> bool {
        let state = self.state.borrow();
        !state.closed && state.requests.iter().any(|r| r.0 == id)
    }

    /// Removes request `id` from those in flight (`None` once closed).
    fn take_request(&self, id: RequestId) -> Option<I::Request> {
        let mut state = self.state.borrow_mut();
        let i = state.requests.iter().position(|r| r.0 == id)?;
        Some(state.requests.swap_remove(i).1)
    }

    /// Carries out the machine's outputs, in order.
    fn drive(self: &Rc<Self>) {
        loop {
            let action = {
                let mut state = self.state.borrow_mut();
                if state.closed {
                    break;
                }
                state.machine.poll_action()
            };
            match action {
                Some(a) => self.execute(a),
                None => break,
            }
        }
        let (dones, open) = {
            let mut state = self.state.borrow_mut();
            let state = &mut *state;
            let m = &mut state.machine;
            let mut dones = Vec::new();
            // Even after close(): a write started then ends with `closed`.
            while let Some(done) = m.poll_write_done() {
                dones.extend(state.outcomes.complete(done));
            }
            if !state.closed {
                // Notices are kept by the machine for the snapshot.
                while m.poll_notice().is_some() {}
                if let Some(change) = m.poll_view_change() {
                    self.io.view_changed(change);
                }
            }
            (dones, !state.closed)
        };
        for (done, outcome) in dones {
            done(outcome);
        }
        if !open {
            return;
        }
        self.pace();
        let waiting = {
            let mut state = self.state.borrow_mut();
            if state.closed {
                return;
            }
            self.io.arm_timer(state.machine.poll_timeout());
            let waiting = state.machine.has_waiting_page();
            if !waiting {
                // Nothing to read: prepare UI objects while the network works.
                self.io.idle(&mut state.machine);
            }
            waiting
        };
        if waiting {
            // A page that arrived early is read once the request after it
            // is on its way (pipelined paging).
            self.io.after_requests();
        }
    }

    /// Carries out the pacing steps, each before the next is asked for.
    fn pace(self: &Rc<Self>) {
        loop {
            let step = {
                let mut state = self.state.borrow_mut();
                if state.closed {
                    return;
                }
                let now = self.io.now();
                state.machine.poll_pace(now)
            };
            match step {
                None => return,
                Some(Pace::HoldChunks(max)) => self.io.hold_chunks(max),
                Some(Pace::RequestFrame) => self.io.request_frame(),
                Some(Pace::ReleaseChunks) => self.io.release_chunks(),
                Some(Pace::Notify) => {
                    let subscribers = self.state.borrow().subscribers.all();
                    for f in subscribers {
                        f();
                    }
                }
            }
        }
    }

    fn execute(self: &Rc<Self>, action: Action) {
        match action {
            Action::Abort { id } => drop(self.take_request(id)),
            Action::Persist(bytes) => self.save(bytes),
            Action::LoadStored => self.load(),
            Action::RemoveStored => self.io.remove(),
            Action::RefreshCredentials => self.io.refresh_credentials(),
            Action::Release { claim } => self.io.release(&claim),
            request @ (Action::OpenStream { .. } | Action::Fetch { .. } | Action::Post { .. }) => {
                let started = self.io.start(&request);
                if let (Some(id), Some(r)) = (request_id(&request), started) {
                    self.state.borrow_mut().requests.push((id, r));
                }
            }
        }
    }

    /// `Action::LoadStored`: the value goes back to the machine, now or when
    /// an asynchronous storage answers.
    fn load(self: &Rc<Self>) {
        match self.io.load() {
            Ok(Loaded::Ready(v)) => {
                let v = v.as_deref().map(str::as_bytes);
                self.input(|m, now| m.handle_stored_at_once(v, now));
            }
            Ok(Loaded::Pending) => {}
            Err(why) => self.storage_failed(&why),
        }
    }

    /// `Action::Persist`: stores the value; a failure goes back to the machine.
    fn save(self: &Rc<Self>, bytes: Vec<u8>) {
        // The machine persists JSON, which is always UTF-8.
        let Ok(value) = String::from_utf8(bytes) else {
            return;
        };
        if let Err(why) = self.io.save(&value) {
            self.storage_failed(&why);
        }
    }

    /// Stops everything: aborts requests, ends pending writes with `closed`,
    /// releases the platform's listeners and timer, flushes the last state;
    /// nothing is carried out afterwards.
    pub fn close(self: &Rc<Self>) {
        let (requests, persist, dones, subscribers) = {
            let mut state = self.state.borrow_mut();
            let state = &mut *state;
            if state.closed {
                return;
            }
            state.machine.close(self.io.now());
            let mut persist = Vec::new();
            while let Some(a) = state.machine.poll_action() {
                // The requests are dropped (aborted) below.
                if let Action::Persist(b) = a {
                    persist.push(b);
                }
            }
            let mut dones = Vec::new();
            while let Some(done) = state.machine.poll_write_done() {
                dones.extend(state.outcomes.complete(done));
            }
            state.closed = true;
            let subscribers = state.subscribers.clear();
            (
                std::mem::take(&mut state.requests),
                persist,
                dones,
                subscribers,
            )
        };
        self.io.close();
        drop((requests, subscribers));
        for (done, outcome) in dones {
            done(outcome);
        }
        for b in persist {
            self.save(b);
        }
    }
}

/// The id of a request action.
fn request_id(request: &Action) -> Option<RequestId> {
    match request {
        Action::OpenStream { id, .. } | Action::Fetch { id, .. } | Action::Post { id, .. } => {
            Some(*id)
        }
        _ => None,
    }
}
