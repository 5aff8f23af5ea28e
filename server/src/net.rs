//! The listening socket and the connections on it: how many are open at
//! once, what each gets before HTTP sees it (`TCP_NODELAY`, a write
//! timeout), how long a peer may take to send a request head, and which
//! addresses and `Host` names the server answers for.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_io_timeout::TimeoutStream;

/// File descriptors kept back from the connection cap: the store's files
/// (one writer and four readers, each with its WAL and shm), the listener,
/// epoll, stdio and room for the accept that finds the cap full.
const RESERVED_FDS: u64 = 64;

/// Largest request head (and read buffer) of a connection: hyper answers
/// `431` past it. Bodies are limited separately (64 KiB).
const MAX_HEAD_BYTES: usize = 64 << 10;

/// The connection slots: at most `max` connections are open; the next
/// accept waits for one to close (the peer waits in the kernel's queue).
#[derive(Debug)]
pub struct Connections {
    slots: Arc<Semaphore>,
    max: usize,
}

impl Connections {
    /// Slots for `wanted` connections, fewer when the process's file
    /// descriptor limit could not hold them (a peer refused by `EMFILE`
    /// would be refused with every other one).
    pub fn new(wanted: usize) -> Connections {
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
        Connections {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// The cap in force.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
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

/// Accepts connections while a slot is free and serves each with hyper's
/// HTTP/1 connection (header timeout, bounded head) until `shutdown`
/// resolves; then stops accepting, asks every connection to finish its
/// response and waits for them. Dropping the future drops every connection.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    conns: &Connections,
    settings: ConnSettings,
    shutdown: impl Future<Output = ()>,
) {
    let mut tasks = JoinSet::new();
    let (close_tx, close_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&conns.slots).acquire_owned() => p.expect("the slots are never closed"),
            _ = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        while tasks.try_join_next().is_some() {}
        match accepted {
            Ok((tcp, peer)) => {
                let (router, close) = (router.clone(), close_rx.clone());
                tasks.spawn(async move {
                    let _slot = permit;
                    connection(tcp, peer, router, settings, close).await;
                });
            }
            // Out of file descriptors and the like: wait, do not spin.
            Err(e) => {
                tracing::warn!(error = %e, "accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    let _ = close_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

/// Serves one accepted connection until it ends, or until `close` asks it
/// to finish the response in progress.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    settings: ConnSettings,
    mut close: watch::Receiver<bool>,
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
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        tower::ServiceExt::oneshot(router.clone(), req.map(Body::new))
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
        _ = close.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// The `Host` names the server answers for (DNS rebinding defence): the
/// loopback names with any port, the bound address, the hosts of the
/// configured CORS origins (`*` adds nothing) and any extra names.
#[derive(Clone, Debug)]
pub struct HostAllowList {
    /// Lowercase host names without a port (`[::1]` keeps its brackets).
    hosts: Vec<String>,
}

impl HostAllowList {
    /// The list for a server bound to `bound`.
    pub fn new(bound: SocketAddr, origins: &[String], extra: &[String]) -> HostAllowList {
        let mut hosts: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        if !bound.ip().is_unspecified() {
            hosts.push(match bound.ip() {
                IpAddr::V4(ip) => ip.to_string(),
                IpAddr::V6(ip) => format!("[{ip}]"),
            });
        }
        for origin in origins.iter().filter(|o| o.as_str() != "*") {
            let authority = origin.split_once("://").map_or(origin.as_str(), |(_, a)| a);
            hosts.push(strip_port(authority.trim_end_matches('/')).to_ascii_lowercase());
        }
        hosts.extend(extra.iter().map(|h| strip_port(h).to_ascii_lowercase()));
        hosts.sort();
        hosts.dedup();
        HostAllowList { hosts }
    }

    /// True when a request's `Host` value (with or without a port) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        self.hosts.contains(&name)
    }
}

/// `host:port` → `host`; `[v6]:port` → `[v6]`. Anything else after a
/// bracketed address (`[::1]evil.example`) keeps the whole value, which no
/// allowed name equals.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        let Some(end) = authority.find(']') else {
            return authority;
        };
        let (host, after) = authority.split_at(end + 1);
        return match after.strip_prefix(':') {
            None if after.is_empty() => host,
            Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_loopback_names_bound_address_and_origin_hosts() {
        let bound: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        let list = HostAllowList::new(
            bound,
            &["*".into(), "https://App.example:8443/".into()],
            &["lan.example".into()],
        );
        for ok in [
            "127.0.0.1:8787",
            "localhost",
            "LOCALHOST:1",
            "[::1]:9",
            "[::1]",
            "app.example:8443",
            "app.example",
            "lan.example:80",
        ] {
            assert!(list.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "localhost.evil",
            "127.0.0.2",
            "[::2]:1",
            "[::1]evil.example",
            "[::1]:9evil",
            "[::1]:",
            "[::1",
            "",
            "*",
        ] {
            assert!(!list.allows(bad), "{bad}");
        }
        let lan = HostAllowList::new("192.168.1.5:80".parse().unwrap(), &[], &[]);
        assert!(lan.allows("192.168.1.5:80"));
        let any = HostAllowList::new("0.0.0.0:80".parse().unwrap(), &[], &[]);
        assert!(!any.allows("0.0.0.0:80"));
    }
}
