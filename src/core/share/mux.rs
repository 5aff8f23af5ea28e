//! The multiplexed stream (PROTOCOL.md §4.6): its path, and what one
//! connection of it has delivered so far.

use super::route::split_key;
use super::subs::Subs;
use crate::machine::paths::segment as encode;
use crate::machine::RequestId;
use crate::sse::SseParser;

/// At most this many `sub`s in one request (PROTOCOL.md §4.6).
pub const MAX_SUBS: usize = 64;

/// `/v1/stream?sub=session:ses_1:17&sub=team:t1:` for `(key, after)` pairs
/// (`None` = live only for that scope).
pub fn path<'a>(subs: impl IntoIterator<Item = (&'a str, Option<u64>)>) -> String {
    let mut p = String::from("/v1/stream");
    for (i, (key, after)) in subs.into_iter().enumerate() {
        p.push_str(if i == 0 { "?sub=" } else { "&sub=" });
        let (scope, id) = split_key(key);
        encode(&mut p, scope);
        p.push(':');
        encode(&mut p, id);
        p.push(':');
        if let Some(a) = after {
            p.push_str(&a.to_string());
        }
    }
    p
}

/// One scope on one connection.
#[derive(Debug)]
pub struct MuxSub {
    /// Its key.
    pub key: String,
    /// Where it was asked to start.
    pub after: Option<u64>,
    /// Its `hello` came: from now on this connection carries it.
    pub hello: bool,
    /// Its `subscription.error` came: nothing more will.
    pub refused: bool,
}

/// One multiplexed connection.
#[derive(Debug)]
pub struct Mux {
    /// The request.
    pub id: RequestId,
    /// Its scopes, in key order.
    pub subs: Vec<MuxSub>,
    /// Its SSE parser.
    pub parser: SseParser,
    /// Last event (or the request, or its answer's headers), for the stall
    /// watchdog: bytes that make no event, comments included, do not count.
    pub last_byte_at: u64,
}

impl Mux {
    /// A connection for these scopes.
    pub fn new(id: RequestId, subs: &Subs, max_event: usize, now: u64) -> Self {
        Mux {
            id,
            subs: subs
                .iter()
                .map(|(k, after)| MuxSub {
                    key: k.to_owned(),
                    after,
                    hello: false,
                    refused: false,
                })
                .collect(),
            parser: SseParser::with_max_event_size(max_event),
            last_byte_at: now,
        }
    }

    /// The request's path.
    pub fn path(&self) -> String {
        path(self.subs.iter().map(|s| (s.key.as_str(), s.after)))
    }

    /// The scope `key`, if this connection asked for it.
    pub fn sub(&self, key: &str) -> Option<&MuxSub> {
        self.subs.iter().find(|s| s.key == key)
    }

    /// Whether this connection carries `key` now (hello came, not refused).
    pub fn carries(&self, key: &str) -> bool {
        self.sub(key).is_some_and(|s| s.hello && !s.refused)
    }

    /// The scopes still asked for (not refused).
    pub fn active(&self) -> impl Iterator<Item = &MuxSub> {
        self.subs.iter().filter(|s| !s.refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn path_names_every_scope_and_cursor() {
        assert_eq!(
            path([
                ("session:ses_1", Some(17)),
                ("team:t1", None),
                ("system:runtime", Some(0)),
                ("process:p 1", Some(2)),
            ]),
            "/v1/stream?sub=session:ses_1:17&sub=team:t1:&sub=system:runtime:0&sub=process:p%201:2"
        );
        assert_eq!(path([]), "/v1/stream");
    }
}
