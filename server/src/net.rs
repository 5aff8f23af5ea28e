//! The listening socket: what every accepted connection gets before HTTP
//! sees it (`TCP_NODELAY`, a write timeout), and which addresses and `Host`
//! names the server answers for.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_io_timeout::TimeoutStream;

/// A TCP listener whose connections fail a write the peer has not accepted
/// for `write_timeout`: a peer that stops reading cannot pin a connection
/// (and the stream task behind it) forever, not even during shutdown.
pub struct Listener {
    inner: TcpListener,
    write_timeout: Duration,
}

impl Listener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener, write_timeout: Duration) -> Listener {
        Listener {
            inner,
            write_timeout,
        }
    }
}

impl axum::serve::Listener for Listener {
    type Io = Pin<Box<TimeoutStream<TcpStream>>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((tcp, addr)) => {
                    // Stream frames are small writes: without TCP_NODELAY,
                    // Nagle holds each one until the previous is acknowledged
                    // (a delayed ACK: ~40 ms), so a `hello` would trail its headers.
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY");
                    }
                    let mut io = TimeoutStream::new(tcp);
                    io.set_write_timeout(Some(self.write_timeout));
                    return (Box::pin(io), addr);
                }
                // Out of file descriptors and the like: wait, do not spin.
                Err(e) => {
                    tracing::warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
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

/// `host:port` → `host`; `[v6]:port` → `[v6]`.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
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
