//! One multiplexed stream (PROTOCOL §4.6) for many clients: the executor of
//! the core's [`Share`] hub. Every client attached to a [`Hub`] sends its
//! scoped `OpenStream` and its `Abort` of it here instead of to the
//! network; the hub holds one connection per base URL carrying every
//! followed scope, and delivers each client's scope to it as a virtual
//! stream, through the client's own [`Executor::response`]. What is
//! subscribed, when the set changes (new connection first, §4.6), how a
//! lost connection is retried and what each client is told are the core's
//! decisions; this file only delivers and carries out.
//!
//! [`Executor::response`]: super::Executor::response

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use crate::core::machine::{Action, RequestId, Response, Target};
use crate::core::share::{Output, Share, ShareConfig, ShareDiagnostics, Transport};

use super::{Executor, Io};

/// What a hub needs of its platform: the connection's request, its timer,
/// a later turn of the event loop, and the clock.
pub trait MuxIo {
    /// The connection in flight; dropping it aborts it.
    type Request;

    /// The clock of the machines (monotonic ms).
    fn now(&self) -> u64;
    /// Starts `GET base + path_and_query` (`Accept: text/event-stream`);
    /// its facts go to [`Hub::response`].
    fn start(&self, id: RequestId, path_and_query: &str) -> Option<Self::Request>;
    /// Calls [`Hub::timeout`] at `at`, replacing the wake-up asked before.
    fn arm_timer(&self, at: Option<u64>);
    /// Calls [`Hub::drive`] soon, never inside this call: a client's
    /// subscription is answered after the call that made it returned.
    fn soon(&self);
}

/// Where a client's deliveries go: its executor, held weakly.
type Sink = Box<dyn Fn(RequestId, Response)>;

struct State<R> {
    share: Share,
    /// The connections in flight.
    connections: Vec<(RequestId, R)>,
    /// The attached clients, by key.
    clients: Vec<(u64, Sink)>,
    next_client: u64,
    closed: bool,
}

/// The hub of one base URL. See the module docs.
pub struct Hub<M: MuxIo> {
    state: RefCell<State<M::Request>>,
    io: M,
}

/// A client's stream as the hub serves it: dropping it aborts it (a machine
/// that aborts its stream, or an executor that closes or goes away).
pub struct VirtualStream<M: MuxIo + 'static> {
    hub: Weak<Hub<M>>,
    client: u64,
    id: RequestId,
}

impl<M: MuxIo + 'static> Drop for VirtualStream<M> {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.abort(self.client, self.id);
        }
    }
}

impl<M: MuxIo + 'static> Hub<M> {
    /// A hub over the platform `make_io` builds (it may keep the weak
    /// handle to deliver inputs later).
    pub fn new(config: ShareConfig, make_io: impl FnOnce(&Weak<Self>) -> M) -> Rc<Self> {
        Rc::new_cyclic(|weak| {
            let io = make_io(weak);
            Hub {
                state: RefCell::new(State {
                    share: Share::new(config),
                    connections: Vec::new(),
                    clients: Vec::new(),
                    next_client: 0,
                    closed: false,
                }),
                io,
            }
        })
    }

    /// The platform.
    pub fn io(&self) -> &M {
        &self.io
    }

    /// Attaches a client: returns its key for [`open`](Self::open). Its
    /// streams are delivered to `client` while it exists.
    pub fn attach<I: Io + 'static>(&self, client: &Weak<Executor<I>>) -> u64 {
        let weak = client.clone();
        let sink: Sink = Box::new(move |id, what| {
            if let Some(exec) = weak.upgrade() {
                exec.response(id, what);
            }
        });
        let mut state = self.state.borrow_mut();
        state.next_client += 1;
        let key = state.next_client;
        state.clients.push((key, sink));
        key
    }

    /// Client `client` went away: its streams are dropped.
    pub fn detach(self: &Rc<Self>, client: u64) {
        let sink = {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            state.share.handle_machine_gone(client, now);
            let i = state.clients.iter().position(|c| c.0 == client);
            i.map(|i| state.clients.swap_remove(i))
        };
        drop(sink);
        self.io.soon();
    }

    /// A client's `OpenStream`: served by the hub when its target is a
    /// scope (a [`VirtualStream`]); `None` when the client must open it
    /// itself (the global list).
    pub fn open(
        self: &Rc<Self>,
        client: u64,
        target: &Target,
        request: &Action,
    ) -> Option<VirtualStream<M>> {
        let Action::OpenStream { id, .. } = request else {
            return None;
        };
        let taken = {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            !state.closed
                && state
                    .share
                    .handle_machine_action(client, target, request, now)
        };
        if !taken {
            return None;
        }
        self.io.soon();
        Some(VirtualStream {
            hub: Rc::downgrade(self),
            client,
            id: *id,
        })
    }

    fn abort(&self, client: u64, id: RequestId) {
        {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            state.share.handle_abort(client, id, now);
        }
        self.io.soon();
    }

    /// One fact of the connection `id`'s answer; returns whether more of it
    /// is wanted.
    pub fn response(self: &Rc<Self>, id: RequestId, what: Response) -> bool {
        let last = matches!(what, Response::End | Response::Failed(_));
        let request = {
            let mut state = self.state.borrow_mut();
            let Some(i) = state.connections.iter().position(|c| c.0 == id) else {
                return false;
            };
            let request = last.then(|| state.connections.swap_remove(i).1);
            let now = self.io.now();
            state.share.handle_mux(id, what, now);
            request
        };
        drop(request);
        self.drive();
        self.state.borrow().connections.iter().any(|c| c.0 == id)
    }

    /// The timer went off.
    pub fn timeout(self: &Rc<Self>) {
        {
            let mut state = self.state.borrow_mut();
            let now = self.io.now();
            state.share.handle_timeout(now);
        }
        self.drive();
    }

    /// Carries out the hub's outputs: connections opened and aborted,
    /// deliveries to the clients' executors (with no borrow held: each
    /// drives its client, which may subscribe again).
    pub fn drive(self: &Rc<Self>) {
        loop {
            let output = {
                let mut state = self.state.borrow_mut();
                if state.closed {
                    return;
                }
                state.share.poll_output()
            };
            match output {
                None => break,
                Some(Output::OpenMux { id, path_and_query }) => {
                    if let Some(r) = self.io.start(id, &path_and_query) {
                        self.state.borrow_mut().connections.push((id, r));
                    }
                }
                Some(Output::AbortMux { id }) => {
                    let gone = {
                        let mut state = self.state.borrow_mut();
                        let i = state.connections.iter().position(|c| c.0 == id);
                        i.map(|i| state.connections.swap_remove(i))
                    };
                    drop(gone);
                }
                Some(Output::Deliver {
                    machine,
                    stream,
                    what,
                }) => self.deliver_to(machine, stream, what),
            }
        }
        let state = self.state.borrow();
        self.io.arm_timer(state.share.poll_timeout());
    }

    fn deliver_to(&self, client: u64, stream: RequestId, what: Response) {
        // The sink is called unborrowed: taken out and put back.
        let sink = {
            let mut state = self.state.borrow_mut();
            let i = state.clients.iter().position(|c| c.0 == client);
            i.map(|i| state.clients.swap_remove(i))
        };
        if let Some((key, sink)) = sink {
            sink(stream, what);
            self.state.borrow_mut().clients.push((key, sink));
        }
    }

    /// Whether the runtime's multiplexed stream carries the clients'
    /// streams, or each opens its own (the core decided it has none).
    pub fn transport(&self) -> Transport {
        self.state.borrow().share.transport()
    }

    /// Connections opened, streams served, duplicates dropped.
    pub fn diagnostics(&self) -> ShareDiagnostics {
        self.state.borrow().share.diagnostics()
    }

    /// Stops: the connection is aborted, no stream is served any more.
    pub fn close(&self) {
        let connections = {
            let mut state = self.state.borrow_mut();
            if state.closed {
                return;
            }
            state.share.close();
            state.closed = true;
            std::mem::take(&mut state.connections)
        };
        self.io.arm_timer(None);
        drop(connections);
    }
}
