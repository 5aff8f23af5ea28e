//! What the server accepts of a request head before any route sees it: its
//! size ([`MAX_HEAD_BYTES`]) and its `Host` ([`HostAllowList`]). Used by the
//! connections (`net.rs`), the answer to a refused one (`refusal.rs`) and
//! the routes' guard.

use std::net::{IpAddr, SocketAddr};

/// Largest request head (and read buffer) of a connection: hyper answers
/// `431` past it. Bodies are limited separately (64 KiB).
pub(crate) const MAX_HEAD_BYTES: usize = 64 << 10;

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
