//! The executor's hub (`replay_client::exec::hub`) natively: clients, each
//! the executor the browser runs, whose live streams one multiplexed
//! connection serves (PROTOCOL §4.6), against the fake runtime of the share
//! tests. Checks one connection for every scope, convergence, and that a
//! closed client's scope leaves the connection.

#![cfg(not(target_arch = "wasm32"))]

mod share_support;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use replay_client::core::machine::{Action, FetchKind, Machine, RequestId, Response};
use replay_client::core::share::ShareConfig;
use replay_client::exec::hub::{Hub, MuxIo, VirtualStream};
use replay_client::exec::{Executor, Io, Loaded};
use share_support::{machine_config, Server};

/// The pages the clients asked for: (client key, request, path, kind).
type Pages = Rc<RefCell<Vec<(u64, RequestId, String, FetchKind)>>>;

/// The hub's platform: the connection's requests, its timer, `soon`.
#[derive(Default)]
struct FakeMux {
    clock: Rc<Cell<u64>>,
    opened: RefCell<Vec<(RequestId, String)>>,
    aborted: Rc<RefCell<Vec<RequestId>>>,
    timer: Cell<Option<u64>>,
    soon: Cell<bool>,
}

/// A connection in flight; its abort is recorded.
struct Conn {
    id: RequestId,
    aborted: Rc<RefCell<Vec<RequestId>>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.aborted.borrow_mut().push(self.id);
    }
}

impl MuxIo for FakeMux {
    type Request = Conn;
    fn now(&self) -> u64 {
        self.clock.get()
    }
    fn start(&self, id: RequestId, path_and_query: &str) -> Option<Conn> {
        self.opened
            .borrow_mut()
            .push((id, path_and_query.to_owned()));
        Some(Conn {
            id,
            aborted: self.aborted.clone(),
        })
    }
    fn arm_timer(&self, at: Option<u64>) {
        self.timer.set(at);
    }
    fn soon(&self) {
        self.soon.set(true);
    }
}

/// A client's platform: its scoped stream from the hub, its pages recorded.
struct ClientIo {
    clock: Rc<Cell<u64>>,
    hub: Rc<Hub<FakeMux>>,
    key: u64,
    target: replay_client::core::machine::Target,
    fetches: Pages,
}

enum Req {
    Page,
    Shared(#[allow(dead_code)] VirtualStream<FakeMux>),
}

impl Io for ClientIo {
    type Request = Req;
    fn now(&self) -> u64 {
        self.clock.get()
    }
    fn wall_clock(&self) -> u64 {
        self.clock.get()
    }
    fn start(&self, request: &Action) -> Option<Req> {
        if let Some(stream) = self.hub.open(self.key, &self.target, request) {
            return Some(Req::Shared(stream));
        }
        match request {
            Action::Fetch {
                id,
                path_and_query,
                kind,
            } => {
                let page = (self.key, *id, path_and_query.clone(), *kind);
                self.fetches.borrow_mut().push(page);
                Some(Req::Page)
            }
            other => panic!("unexpected request {other:?}"),
        }
    }
    fn refresh_credentials(&self) {}
    fn load(&self) -> Result<Loaded, String> {
        Ok(Loaded::Ready(None))
    }
    fn save(&self, _value: &str) -> Result<(), String> {
        Ok(())
    }
    fn remove(&self) {}
    fn arm_timer(&self, _at: Option<u64>) {}
    fn request_frame(&self) {}
    fn hold_chunks(&self, _hold: bool) {}
    fn release_chunks(&self) {}
    fn after_requests(&self) {}
    fn close(&self) {
        self.hub.detach(self.key);
    }
}

struct World {
    clock: Rc<Cell<u64>>,
    server: Server,
    hub: Rc<Hub<FakeMux>>,
    clients: Vec<(String, Rc<Executor<ClientIo>>)>,
    fetches: Pages,
    /// Connections answered (200) so far.
    answered: Vec<RequestId>,
}

impl World {
    fn new(sessions: &[(&str, u64)]) -> Self {
        let clock = Rc::new(Cell::new(1_000));
        let mut server = Server::default();
        for (s, n) in sessions {
            server.add_session(s, *n);
        }
        let c = clock.clone();
        let hub = Hub::new(ShareConfig::new(7, "http://rt", false), move |_| FakeMux {
            clock: c,
            ..FakeMux::default()
        });
        World {
            clock,
            server,
            hub,
            clients: Vec::new(),
            fetches: Rc::default(),
            answered: Vec::new(),
        }
    }

    fn follow(&mut self, sid: &str) {
        let machine = Machine::new(machine_config(sid, 1 + self.clients.len() as u64), None, 0);
        let target = machine.config().target.clone();
        let (hub, clock, fetches) = (self.hub.clone(), self.clock.clone(), self.fetches.clone());
        let exec = Executor::new(machine, |weak: &Weak<Executor<ClientIo>>| ClientIo {
            key: hub.attach(weak),
            hub,
            clock,
            target,
            fetches,
        });
        exec.start();
        self.clients.push((sid.to_owned(), exec));
        self.settle();
    }

    /// Runs what is pending until nothing moves.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            if self.hub.io().soon.replace(false) {
                self.hub.drive();
                moved = true;
            }
            let opened: Vec<_> = self.hub.io().opened.borrow_mut().drain(..).collect();
            for (id, path) in opened {
                self.server.open(0, id, &path);
                moved = true;
            }
            for id in self.hub.io().aborted.borrow_mut().drain(..) {
                self.server.close(0, id);
            }
            let fetches: Vec<_> = self.fetches.borrow_mut().drain(..).collect();
            for (key, id, path, kind) in fetches {
                moved = true;
                let (status, body) = match self.server.page(&path, kind) {
                    Ok(body) => (200, body),
                    Err(e) => e,
                };
                let client = self.clients.iter().find(|c| c.1.io().key == key);
                if let Some((_, exec)) = client {
                    let exec = exec.clone();
                    if exec.response(id, head(status, "application/json")) {
                        exec.response(id, Response::Body(&body));
                        exec.response(id, Response::End);
                    }
                }
            }
            let ids: Vec<RequestId> = self.server.conns.iter().map(|c| c.id).collect();
            for id in ids {
                if !self.answered.contains(&id) {
                    self.answered.push(id);
                    self.hub.response(id, head(200, "text/event-stream"));
                    moved = true;
                }
                let Some(conn) = self.server.conn_mut(0, id) else {
                    continue;
                };
                let bytes = std::mem::take(&mut conn.out);
                if !bytes.is_empty() {
                    self.hub.response(id, Response::Body(&bytes));
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
        panic!("does not settle");
    }

    /// Time passes: the hub's timer (a set change is debounced) fires.
    fn advance(&mut self, ms: u64) {
        let end = self.clock.get() + ms;
        self.settle();
        while let Some(t) = self.hub.io().timer.get().filter(|t| *t <= end) {
            self.clock.set(t.max(self.clock.get()));
            self.hub.timeout();
            self.settle();
        }
        self.clock.set(end);
        self.settle();
    }

    fn converged(&self) {
        for (sid, exec) in &self.clients {
            exec.with_machine(|m| {
                assert_eq!(m.cursor(), self.server.head(sid), "{sid}");
                assert_eq!(
                    m.status().state,
                    replay_client::core::machine::State::Live,
                    "{sid}"
                );
            });
        }
    }

    fn carried(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .server
            .conns
            .iter()
            .flat_map(|c| c.subs.iter().map(|s| s.0.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

fn head(status: u16, content_type: &str) -> Response<'_> {
    Response::Head {
        status,
        content_type: Some(content_type),
        retry_after: None,
    }
}

#[test]
fn clients_of_three_scopes_ride_one_connection_and_a_closed_ones_scope_leaves() {
    let mut w = World::new(&[("a", 3), ("b", 2), ("c", 1)]);
    for sid in ["a", "b", "c"] {
        w.follow(sid);
    }
    w.advance(100);
    w.converged();
    assert_eq!(w.server.conns.len(), 1, "one connection");
    assert_eq!(w.carried(), ["session:a", "session:b", "session:c"]);
    for sid in ["a", "c", "a"] {
        w.server.append(sid);
    }
    w.settle();
    w.converged();
    // A client closes: its scope leaves with the next set change.
    let (_, closed) = w.clients.remove(1);
    closed.close();
    w.advance(100);
    assert_eq!(w.server.conns.len(), 1, "the new set replaced the old");
    assert_eq!(w.carried(), ["session:a", "session:c"]);
    w.server.append("c");
    w.settle();
    w.converged();
    assert_eq!(w.hub.diagnostics().local_streams, 2);
}
