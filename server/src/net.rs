//! The listening socket and the connections on it: how many are open at
//! once and how many one peer address may hold, what each gets before HTTP
//! sees it (`TCP_NODELAY`, a write timeout), how long a peer may take to
//! send a request head, and which addresses the server answers for (its
//! `Host` names: `head.rs`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio_io_timeout::TimeoutStream;

use crate::head::MAX_HEAD_BYTES;
use crate::refusal::{Refusal, Refusals};

/// File descriptors kept back from the connection cap: the store's files
/// (one writer and four readers, each with its WAL and shm), the listener,
/// epoll, stdio and the connections being refused
/// ([`crate::refusal::MAX_REFUSING`]).
const RESERVED_FDS: u64 = 64;

/// The connection slots: at most `max` connections are open, at most
/// `per_address` of them from one peer address. A new connection that
/// finds its address's share taken closes that address's connection idle
/// the longest (one between requests, or still sending its first head)
/// and takes its slot; one that finds every slot taken does the same with
/// the connection idle the longest of any address. With no such idle
/// connection it is answered `503 too_many_connections`.
#[derive(Debug)]
pub struct Connections {
    table: Arc<Mutex<Table>>,
    max: usize,
    per_address: usize,
}

/// The open connections.
#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Conn>,
    of_address: HashMap<IpAddr, usize>,
    refused: u64,
    closed_idle: u64,
}

/// One open connection.
#[derive(Debug)]
struct Conn {
    peer: IpAddr,
    /// Requests whose response has not been sent to the end.
    in_flight: usize,
    /// When `in_flight` last became 0 (or the connection was accepted).
    idle_since: Instant,
    /// Closes the connection (it was idle and its slot is taken).
    close: Arc<Notify>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Conn> {
        let conn = self.open.remove(&id)?;
        if let Some(n) = self.of_address.get_mut(&conn.peer) {
            *n -= 1;
            if *n == 0 {
                self.of_address.remove(&conn.peer);
            }
        }
        Some(conn)
    }
}

impl Connections {
    /// Slots for `wanted` connections, fewer when the process's file
    /// descriptor limit could not hold them (a peer refused by `EMFILE`
    /// would be refused with every other one); `per_address` of them (at
    /// most all, at least one) for one peer address, `None`: a quarter.
    pub fn new(wanted: usize, per_address: Option<usize>) -> Connections {
        let max = match fd_limit() {
            Some(fds) => {
                let fit = usize::try_from(fds.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
                if fit < wanted {
                    tracing::warn!(
                        wanted,
                        fit,
                        fds,
                        "--max-connections lowered to fit the file descriptor limit"
                    );
                }
                wanted.min(fit)
            }
            None => wanted,
        }
        .max(1);
        let per_address = per_address.unwrap_or(max / 4).clamp(1, max);
        Connections {
            table: Arc::default(),
            max,
            per_address,
        }
    }

    /// The cap in force.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The cap of one peer address in force.
    pub fn per_address(&self) -> usize {
        self.per_address
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Connections answered `503 too_many_connections` since the start.
    pub fn refused(&self) -> u64 {
        self.lock().refused
    }

    /// Idle connections closed to make room for a new one since the start.
    pub fn closed_idle(&self) -> u64 {
        self.lock().closed_idle
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        lock(&self.table)
    }

    /// A slot for a connection from `peer`, or why there is none. When
    /// `peer` holds its share, its own connection idle the longest is told
    /// to close and its slot given to this one; at the total cap, the
    /// connection idle the longest of any address. None idle: refused.
    fn admit(&self, peer: IpAddr) -> Result<Slot, Refusal> {
        let mut t = self.lock();
        let room = if t.of_address.get(&peer).copied().unwrap_or(0) >= self.per_address {
            Some((Some(peer), Refusal::Address(self.per_address)))
        } else if t.open.len() >= self.max {
            Some((None, Refusal::Full(self.max)))
        } else {
            None
        };
        if let Some((of, refusal)) = room {
            let idlest = t
                .open
                .iter()
                .filter(|(_, c)| c.in_flight == 0 && of.is_none_or(|ip| c.peer == ip))
                .min_by_key(|(id, c)| (c.idle_since, **id))
                .map(|(id, _)| *id);
            match idlest.and_then(|id| t.remove(id)) {
                Some(idle) => {
                    idle.close.notify_one();
                    t.closed_idle += 1;
                }
                None => {
                    t.refused += 1;
                    return Err(refusal);
                }
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let close = Arc::new(Notify::new());
        t.open.insert(
            id,
            Conn {
                peer,
                in_flight: 0,
                idle_since: Instant::now(),
                close: Arc::clone(&close),
            },
        );
        *t.of_address.entry(peer).or_default() += 1;
        Ok(Slot {
            handle: SlotHandle {
                id,
                table: Arc::clone(&self.table),
            },
            close,
        })
    }
}

fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection's place in the table, given back when it is dropped
/// (unless it was already taken for another connection).
struct Slot {
    handle: SlotHandle,
    close: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.handle.table).remove(self.handle.id);
    }
}

/// What a connection's requests use to say they are in flight.
#[derive(Clone)]
struct SlotHandle {
    id: u64,
    table: Arc<Mutex<Table>>,
}

impl SlotHandle {
    /// Marks a request in flight until the guard is dropped.
    fn busy(&self) -> Busy {
        if let Some(c) = lock(&self.table).open.get_mut(&self.id) {
            c.in_flight += 1;
        }
        Busy(self.clone())
    }
}

/// A request in flight on a connection: its response has not been sent to
/// the end (a stream is in flight as long as it is open).
struct Busy(SlotHandle);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(c) = lock(&self.0.table).open.get_mut(&self.0.id) {
            c.in_flight = c.in_flight.saturating_sub(1);
            if c.in_flight == 0 {
                c.idle_since = Instant::now();
            }
        }
    }
}

/// A response body that keeps its request in flight until hyper has sent
/// it to the end (or dropped it).
struct Tracked {
    inner: Body,
    _busy: Busy,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The soft `RLIMIT_NOFILE`, when there is one.
fn fd_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// What every connection gets.
#[derive(Clone, Copy, Debug)]
pub struct ConnSettings {
    /// A write the peer has not accepted for this long fails.
    pub write_timeout: Duration,
    /// Time to send a whole request head; an idle keep-alive connection
    /// has the same time to start its next request.
    pub header_timeout: Duration,
    /// `SO_SNDBUF` in bytes (0: the kernel's autotuning, up to `tcp_wmem`'s
    /// maximum, megabytes a peer that reads nothing would hold).
    pub send_buffer: usize,
}

/// Accepts connections and serves each that gets a slot with hyper's
/// HTTP/1 connection (header timeout, bounded head) until `shutdown`
/// resolves; answers the others `503` ([`Connections`], [`Refusals`]). Then stops
/// accepting, asks every connection to finish its response and waits for
/// them. Dropping the future drops every connection.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    conns: &Connections,
    refused: Arc<Refusals>,
    settings: ConnSettings,
    shutdown: impl Future<Output = ()>,
) {
    let mut tasks = JoinSet::new();
    let mut refusals = JoinSet::new();
    let (close_tx, close_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        while tasks.try_join_next().is_some() {}
        while refusals.try_join_next().is_some() {}
        match accepted {
            Ok((tcp, peer)) => match conns.admit(peer.ip()) {
                Ok(slot) => {
                    let (router, close) = (router.clone(), close_rx.clone());
                    tasks.spawn(connection(tcp, peer, router, settings, close, slot));
                }
                Err(refusal) => {
                    tracing::debug!(%peer, ?refusal, "connection refused");
                    refused.refuse(tcp, refusal, &mut refusals).await;
                }
            },
            // Out of file descriptors and the like: wait, do not spin.
            Err(e) => {
                tracing::warn!(error = %e, "accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    drop(refusals);
    let _ = close_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

/// Serves one accepted connection until it ends, until its slot is taken
/// while it is idle (it is dropped), or until `close` asks it to finish
/// the response in progress.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    settings: ConnSettings,
    mut close: watch::Receiver<bool>,
    slot: Slot,
) {
    // Stream frames are small writes: without TCP_NODELAY, Nagle holds each
    // one until the previous is acknowledged (a delayed ACK: ~40 ms), so a
    // `hello` would trail its headers.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY");
    }
    // A small send buffer keeps what a slow peer holds in the kernel small,
    // and makes the write timeout start soon after it stops reading.
    if settings.send_buffer > 0 {
        if let Err(e) =
            rustix::net::sockopt::set_socket_send_buffer_size(&tcp, settings.send_buffer)
        {
            tracing::debug!(error = %e, "SO_SNDBUF");
        }
    }
    let mut io = TimeoutStream::new(tcp);
    io.set_write_timeout(Some(settings.write_timeout));
    let handle = slot.handle.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let busy = handle.busy();
        req.extensions_mut().insert(ConnectInfo(peer));
        let answer = tower::ServiceExt::oneshot(router.clone(), req.map(Body::new));
        async move {
            let response = answer.await?;
            Ok::<_, Infallible>(response.map(|inner| Body::new(Tracked { inner, _busy: busy })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(TokioIo::new(Box::pin(io)), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        // Idle, and its slot went to a new connection: nothing to finish.
        () = slot.close.notified() => return,
        _ = close.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}
