//! The executor's hub (`replay_client::exec::hub`) natively: clients, each
//! the executor the browser runs, whose live streams one multiplexed
//! connection serves (PROTOCOL §4.6), against the fake runtime of the share
//! tests. Checks one connection for every scope, convergence, that a
//! closed client's scope leaves the connection, and that against a runtime
//! without the multiplexed stream each client follows its scope on its own
//! scoped stream.

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
/// The clients' own scoped streams: (client key, request, path).
type Streams = Rc<RefCell<Vec<(u64, RequestId, String)>>>;

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
    /// Its own scoped streams opened and aborted.
    streams: Streams,
    aborted: Streams,
    /// The machine's wake-up (its retries' backoff).
    timer: Cell<Option<u64>>,
}

enum Req {
    Page,
    Shared(#[allow(dead_code)] VirtualStream<FakeMux>),
    Own(#[allow(dead_code)] OwnStream),
}

/// A client's own scoped stream; its abort is recorded.
struct OwnStream {
    key: u64,
    id: RequestId,
    aborted: Streams,
}

impl Drop for OwnStream {
    fn drop(&mut self) {
        let gone = (self.key, self.id, String::new());
        self.aborted.borrow_mut().push(gone);
    }
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
            Action::OpenStream {
                id, path_and_query, ..
            } => {
                let stream = (self.key, *id, path_and_query.clone());
                self.streams.borrow_mut().push(stream);
                Some(Req::Own(OwnStream {
                    key: self.key,
                    id: *id,
                    aborted: self.aborted.clone(),
                }))
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
    fn arm_timer(&self, at: Option<u64>) {
        self.timer.set(at);
    }
    fn request_frame(&self) {}
    fn hold_chunks(&self, _max_bytes: usize) {}
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
    streams: Streams,
    aborted: Streams,
    /// The runtime serves `GET /v1/stream` (else it answers 404).
    multiplexed: bool,
    /// `GET /v1/stream` requests made.
    mux_requests: usize,
}

/// The fake runtime's connections of the clients' own streams are its
/// multiplexed ones with one sub, under the client's key (the hub's are 0).
fn as_mux_path(scoped: &str) -> String {
    let rest = scoped
        .strip_prefix("/v1/sessions/")
        .expect("a session stream");
    let (sid, query) = rest.split_once("/events").unwrap();
    let after = query.strip_prefix("?after_seq=").unwrap_or("");
    format!("/v1/stream?sub=session:{sid}:{after}")
}

impl World {
    fn new(sessions: &[(&str, u64)]) -> Self {
        Self::with_runtime(sessions, true)
    }

    fn with_runtime(sessions: &[(&str, u64)], multiplexed: bool) -> Self {
        let clock = Rc::new(Cell::new(1_000));
        let mut server = Server::default();
        for (s, n) in sessions {
            server.add_session(s, *n);
        }
        let c = clock.clone();
        let hub = Hub::new(ShareConfig::new(7), move |_| FakeMux {
            clock: c,
            ..FakeMux::default()
        });
        World {
            clock,
            server,
            hub,
            clients: Vec::new(),
            fetches: Rc::default(),
            streams: Rc::default(),
            aborted: Rc::default(),
            multiplexed,
            mux_requests: 0,
        }
    }

    fn follow(&mut self, sid: &str) {
        let machine = Machine::new(machine_config(sid, 1 + self.clients.len() as u64), None, 0);
        let target = machine.config().target.clone();
        let (hub, clock, fetches) = (self.hub.clone(), self.clock.clone(), self.fetches.clone());
        let (streams, aborted) = (self.streams.clone(), self.aborted.clone());
        let exec = Executor::new(machine, |weak: &Weak<Executor<ClientIo>>| ClientIo {
            key: hub.attach(weak),
            hub,
            clock,
            target,
            fetches,
            streams,
            aborted,
            timer: Cell::new(None),
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
                moved = true;
                self.mux_requests += 1;
                if self.multiplexed {
                    self.server.open(0, id, &path);
                } else {
                    let body = br#"{"error":"not_found","message":"no such endpoint"}"#;
                    if self.hub.response(id, head(404, "application/json")) {
                        self.hub.response(id, Response::Body(body.to_vec()));
                        self.hub.response(id, Response::End);
                    }
                }
            }
            for id in self.hub.io().aborted.borrow_mut().drain(..) {
                self.server.close(0, id);
            }
            let streams: Vec<_> = self.streams.borrow_mut().drain(..).collect();
            for (key, id, path) in streams {
                moved = true;
                self.server.open(key as usize, id, &as_mux_path(&path));
            }
            for (key, id, _) in self.aborted.borrow_mut().drain(..) {
                self.server.close(key as usize, id);
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
                        exec.response(id, Response::Body(body));
                        exec.response(id, Response::End);
                    }
                }
            }
            let conns: Vec<(usize, RequestId)> =
                self.server.conns.iter().map(|c| (c.ctx, c.id)).collect();
            for (ctx, id) in conns {
                moved |= self.serve(ctx, id);
            }
            if !moved {
                return;
            }
        }
        panic!("does not settle");
    }

    /// Writes what connection `id` of `ctx` has (its head first) to the hub
    /// (ctx 0) or to the client it belongs to; whether anything moved.
    fn serve(&mut self, ctx: usize, id: RequestId) -> bool {
        let muted = self.server.muted;
        let conn = self.server.conn_mut(ctx, id).unwrap();
        let fresh = !std::mem::replace(&mut conn.opened, true);
        // A muting proxy: the head comes, the body is held.
        let bytes = if muted {
            Vec::new()
        } else {
            std::mem::take(&mut conn.out)
        };
        let deliver = |respond: &dyn Fn(Response) -> bool| {
            if fresh {
                respond(head(200, "text/event-stream"));
            }
            if !bytes.is_empty() {
                respond(Response::Body(bytes.clone()));
            }
        };
        if ctx == 0 {
            deliver(&|r| self.hub.response(id, r));
        } else {
            let client = self.clients.iter().find(|c| c.1.io().key == ctx as u64);
            let exec = client.expect("a client's stream").1.clone();
            deliver(&|r| exec.response(id, r));
        }
        fresh || !bytes.is_empty()
    }

    /// Time passes: the hub's timer (a set change is debounced) and the
    /// clients' (their retries) fire, earliest first.
    fn advance(&mut self, ms: u64) {
        let end = self.clock.get() + ms;
        self.settle();
        loop {
            let hub = self.hub.io().timer.get().map(|t| (t, None));
            let clients = self.clients.iter().enumerate();
            let client = clients.filter_map(|(i, c)| c.1.io().timer.get().map(|t| (t, Some(i))));
            let Some((t, who)) = hub.into_iter().chain(client).min().filter(|n| n.0 <= end) else {
                break;
            };
            self.clock.set(t.max(self.clock.get()));
            match who {
                None => self.hub.timeout(),
                Some(i) => {
                    let exec = self.clients[i].1.clone();
                    exec.io().timer.set(None);
                    exec.timeout();
                }
            }
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

fn head(status: u16, content_type: &str) -> Response {
    Response::Head {
        status,
        content_type: Some(content_type.into()),
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

#[test]
fn without_the_multiplexed_stream_each_client_follows_its_own_scoped_stream() {
    let mut w = World::with_runtime(&[("a", 3), ("b", 2), ("c", 1)], false);
    for sid in ["a", "b", "c"] {
        w.follow(sid);
    }
    // The hub's one 404, then each machine's backoff (seconds at most).
    w.advance(10_000);
    w.converged();
    let mut own: Vec<(usize, String)> = w
        .server
        .conns
        .iter()
        .map(|c| (c.ctx, c.subs[0].0.clone()))
        .collect();
    own.sort();
    let keys: Vec<u64> = w.clients.iter().map(|c| c.1.io().key).collect();
    let want: Vec<(usize, String)> = keys
        .iter()
        .zip(["session:a", "session:b", "session:c"])
        .map(|(k, s)| (*k as usize, s.to_owned()))
        .collect();
    assert_eq!(
        own, want,
        "one scoped stream per client, none through the hub"
    );
    for sid in ["a", "c", "b", "a"] {
        w.server.append(sid);
    }
    w.settle();
    w.converged();
    // Once told, the hub never asks again, and a new client goes straight
    // to its own stream.
    w.server.add_session("d", 4);
    w.follow("d");
    w.advance(60_000);
    w.converged();
    assert_eq!(w.mux_requests, 1, "one GET /v1/stream, ever");
    assert_eq!(w.server.conns.len(), 4);
    assert_eq!(w.hub.diagnostics().local_streams, 0);
    assert_eq!(
        w.hub.diagnostics().transport,
        replay_client::core::share::Transport::Scoped
    );
}

#[test]
fn a_polling_client_is_back_on_the_connection_right_after_the_network_comes_back() {
    use replay_client::core::machine::Lifecycle;
    let mut w = World::new(&[("a", 3)]);
    w.server.muted = true;
    w.follow("a");
    w.advance(60_000);
    let exec = w.clients[0].1.clone();
    assert!(
        exec.with_machine(Machine::polling),
        "polling behind the muting proxy"
    );
    w.server.append("a");
    w.advance(15_000);
    w.converged();
    w.server.muted = false;
    exec.lifecycle(Lifecycle::Offline);
    exec.lifecycle(Lifecycle::Online);
    w.advance(3_000);
    assert!(
        !exec.with_machine(Machine::polling),
        "streaming again: {:?}",
        exec.with_machine(Machine::status)
    );
    w.server.append("a");
    w.settle();
    w.converged();
}
