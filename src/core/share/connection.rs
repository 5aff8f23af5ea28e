//! The hub's connection: which scopes it carries, opening it, switching sets
//! (§4.6: new connection first, the old one closed once the new one said
//! every hello), reconnecting.

use super::mux::{Mux, MAX_SUBS};
use super::route::{self, EndReason};
use super::{Output, Share, Subs, Transport, SET_DEBOUNCE_MS};
use crate::machine::{CoreError, RequestId, Target};
use crate::protocol::Event;
use crate::sse::{SseEvent, SseItem};

/// Whether an answer of `GET /v1/stream` says the runtime serves no
/// multiplexed stream (PROTOCOL.md §4.6 is optional for a runtime): no such
/// path, no such method, not implemented.
pub fn has_no_multiplexed_stream(status: u16) -> bool {
    matches!(status, 404 | 405 | 501)
}

/// Which connection an input is about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Conn {
    Current,
    Old,
}

impl Share {
    /// The connection answered with `status` (2xx; others go to
    /// [`handle_mux_http_error`](Self::handle_mux_http_error)).
    pub fn handle_mux_opened(
        &mut self,
        id: RequestId,
        status: u16,
        content_type: Option<&str>,
        retry_after: Option<&str>,
        now: u64,
    ) {
        if self.which(id).is_none() {
            return;
        }
        if !(200..300).contains(&status) {
            self.handle_mux_http_error(id, status, retry_after, b"", now);
            return;
        }
        let ct = content_type.unwrap_or("");
        if !crate::sse::is_event_stream(ct) {
            self.out.push_back(Output::AbortMux { id });
            let why = EndReason::Failed(format!("wrong content type: `{ct}`"));
            self.mux_lost(id, why, 0, now);
            return;
        }
        if let Some(m) = self.mux.as_mut().filter(|m| m.id == id) {
            m.last_byte_at = now;
        }
    }

    /// Bytes of the connection's body, in order, any chunking.
    pub fn handle_mux_bytes(&mut self, id: RequestId, bytes: &[u8], now: u64) {
        let items = match self.which(id) {
            Some(Conn::Current) => {
                let m = self.mux.as_mut().expect("current connection");
                let items = Self::parse_items(m, bytes);
                // Only an event proves the connection alive; comments do
                // not (PROTOCOL.md §4.3).
                if items
                    .iter()
                    .any(|i| matches!(i, SseItem::Event(_) | SseItem::Error(_)))
                {
                    m.last_byte_at = now;
                }
                items
            }
            Some(Conn::Old) => Self::parse_items(self.old.as_mut().expect("old connection"), bytes),
            None => return,
        };
        for item in items {
            // An event may have finished a switch: the rest of an old
            // connection's chunk is no longer needed.
            let Some(conn) = self.which(id) else { break };
            match item {
                SseItem::Event(ev) => self.mux_event(conn, &ev, now),
                SseItem::Retry(ms) => self.sse_retry = Some(ms),
                // A skipped event: its machines find the hole and repair it.
                SseItem::Error(_) => {}
            }
        }
    }

    /// The connection's body ended cleanly.
    pub fn handle_mux_end(&mut self, id: RequestId, now: u64) {
        self.mux_lost(id, EndReason::Clean, 0, now);
    }

    /// The connection failed at the transport level.
    pub fn handle_mux_failed(&mut self, id: RequestId, error: CoreError, now: u64) {
        let why = match error {
            CoreError::Cors(origin) => EndReason::Cors(origin),
            e => EndReason::Failed(e.to_string()),
        };
        self.mux_lost(id, why, 0, now);
    }

    /// A non-2xx answer. 404, 405 and 501 say the runtime has no
    /// multiplexed stream: the transport becomes [`Transport::Scoped`] for
    /// good (every virtual stream ends cleanly and each machine opens its
    /// own scoped stream when it reconnects). 401/403, 408, 429 and other
    /// 5xx reach every machine as that answer (credentials refreshed,
    /// `Retry-After` honoured by each); other statuses (400
    /// `invalid_subscription`) are the hub's problem, not a scope's: the
    /// machines see a transport failure and retry.
    pub fn handle_mux_http_error(
        &mut self,
        id: RequestId,
        status: u16,
        retry_after: Option<&str>,
        body: &[u8],
        now: u64,
    ) {
        if self.which(id).is_none() {
            return;
        }
        if has_no_multiplexed_stream(status) {
            self.follow_scoped(id);
            return;
        }
        let why = match status {
            401 | 403 | 408 | 429 | 500..=599 => EndReason::Http {
                status,
                retry_after: retry_after.map(str::to_owned),
                body: String::from_utf8_lossy(body).into_owned(),
            },
            _ => EndReason::Failed(format!("multiplexed stream: HTTP {status}")),
        };
        let hint = self.retry_hint(retry_after, now);
        self.mux_lost(id, why, hint, now);
    }

    /// The runtime has no multiplexed stream: the connections are dropped
    /// and every virtual stream ends cleanly, so each machine reconnects,
    /// after its own backoff, on a scoped stream of its own
    /// ([`handle_open_stream`](Self::handle_open_stream) declines it now).
    fn follow_scoped(&mut self, lost: RequestId) {
        self.transport = Transport::Scoped;
        let mut keys = self.drop_muxes(Some(lost));
        for (key, _) in self.router.subscriptions().iter() {
            if !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
        }
        self.router.end(&keys, &EndReason::Clean, &mut self.out);
        self.idle = Subs::default();
        self.mux_retry_at = None;
        self.set_check_at = None;
    }

    fn which(&self, id: RequestId) -> Option<Conn> {
        if self.mux.as_ref().is_some_and(|m| m.id == id) {
            Some(Conn::Current)
        } else if self.old.as_ref().is_some_and(|m| m.id == id) {
            Some(Conn::Old)
        } else {
            None
        }
    }

    /// One event of a connection: routed if that connection carries its
    /// scope now (the old one until the new one said that scope's hello).
    fn mux_event(&mut self, conn: Conn, ev: &SseEvent, now: u64) {
        // Bad JSON: skipped; the machines find a durable hole and repair it.
        let Some(env) = route::read(&ev.data) else {
            return;
        };
        let key = Target::scoped_key(env.scope, &env.scope_id);
        let hello = matches!(env.event, Event::Hello(_));
        let refused = env.event.type_name() == "subscription.error";
        let current_has = self
            .mux
            .as_ref()
            .and_then(|m| m.sub(&key))
            .is_some_and(|s| !s.refused);
        if conn == Conn::Old && current_has && (refused || self.mux_carries(&key)) {
            return;
        }
        let m = match conn {
            Conn::Current => self.mux.as_mut(),
            Conn::Old => self.old.as_mut(),
        };
        let Some(sub) = m.and_then(|m| m.subs.iter_mut().find(|s| s.key == key)) else {
            return;
        };
        if sub.refused {
            return;
        }
        let start = if hello {
            sub.hello = true;
            Some(sub.after)
        } else if refused {
            sub.refused = true;
            None
        } else if sub.hello {
            None
        } else {
            // Nothing before a scope's hello belongs to anyone.
            return;
        };
        if hello {
            self.backoff.reset();
        }
        self.router.event(env, &ev.data, start, &mut self.out);
        if refused {
            // Its machines got the answer and decide; lingering must not
            // put it straight back.
            self.idle.remove(&key);
        }
        if (hello || refused) && conn == Conn::Current {
            self.maybe_finish_switch(now);
        }
    }

    fn mux_carries(&self, key: &str) -> bool {
        self.mux.as_ref().is_some_and(|m| m.carries(key))
    }

    /// The new connection said hello for every scope the old one carried:
    /// the old one is closed.
    fn maybe_finish_switch(&mut self, now: u64) {
        let done = match (&self.mux, &self.old) {
            (Some(new), Some(old)) => old
                .subs
                .iter()
                .all(|o| new.sub(&o.key).is_none_or(|s| s.hello || s.refused)),
            _ => false,
        };
        if done {
            if let Some(old) = self.old.take() {
                self.out.push_back(Output::AbortMux { id: old.id });
            }
            // Changes that came during the switch.
            self.set_changed(now);
        }
    }

    /// A connection is over. The old one of a switch goes quietly (the new
    /// one resumes from what was passed on); the current one ends every
    /// scope it carried and is reopened after backoff.
    fn mux_lost(&mut self, id: RequestId, why: EndReason, hint: u64, now: u64) {
        match self.which(id) {
            Some(Conn::Old) => {
                self.old = None;
                self.set_changed(now);
                return;
            }
            Some(Conn::Current) => {}
            None => return,
        }
        let keys = self.drop_muxes(Some(id));
        self.router.end(&keys, &why, &mut self.out);
        let delay = self
            .backoff
            .next_delay(&self.cfg.backoff, &mut self.rng, hint);
        self.mux_retry_at = Some(now.saturating_add(delay));
    }

    /// Forgets both connections, aborting each but `lost` (over already);
    /// returns the scopes they carried.
    fn drop_muxes(&mut self, lost: Option<RequestId>) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        while let Some(m) = self.mux.take().or_else(|| self.old.take()) {
            if Some(m.id) != lost {
                self.out.push_back(Output::AbortMux { id: m.id });
            }
            for s in m.subs {
                if !keys.contains(&s.key) {
                    keys.push(s.key);
                }
            }
        }
        keys
    }

    /// A probe asks whether streaming works now. A connection that has
    /// said no `hello` yet cannot answer that: a proxy may mute it, or it
    /// went through a network that was left. It is closed (its virtual
    /// streams stay subscribed), and the set check opens a new one for
    /// them; a connection that said a `hello` is flowing and is kept.
    pub(super) fn drop_unheard_mux(&mut self) {
        if self
            .mux
            .as_ref()
            .is_some_and(|m| !m.subs.iter().any(|s| s.hello))
        {
            if let Some(m) = self.mux.take() {
                self.out.push_back(Output::AbortMux { id: m.id });
            }
        }
    }

    /// Aborts every connection (no scope wanted, close).
    pub(super) fn abort_muxes(&mut self) {
        self.drop_muxes(None);
        self.mux_retry_at = None;
        self.set_check_at = None;
    }

    /// The set may have changed: checked after a short debounce.
    pub(super) fn set_changed(&mut self, now: u64) {
        let at = now.saturating_add(SET_DEBOUNCE_MS);
        self.set_check_at = Some(self.set_check_at.map_or(at, |t| t.min(at)));
    }

    /// The scopes the connection should carry and where each starts: the
    /// later of where the hub's stream left it (nothing passed on twice)
    /// and the smallest cursor asked (a machine further ahead drops
    /// duplicates; one with a smaller cursor, or a live-only one, gets a
    /// hello and repairs by itself). Machines that went past where the
    /// stream left (by polling, §6 rule 13, or by their own pages) are
    /// not sent again what they all have.
    fn wanted(&self) -> Subs {
        let mut want = self.router.subscriptions();
        for (k, _) in self.idle.iter() {
            want.add(k, None);
        }
        let mut start = Subs::default();
        for (k, after) in want.iter() {
            let from = match (self.router.position(k), after) {
                (Some(left), Some(asked)) => Some(left.max(asked)),
                (left, asked) => left.or(asked),
            };
            start.add(k, from);
        }
        // PROTOCOL.md §4.6 limit; the others wait (their machines' watchdogs
        // retry) until scopes are dropped.
        start.truncate(MAX_SUBS);
        start
    }

    pub(super) fn mux_timers(&mut self, now: u64) {
        if let Some(m) = &self.mux {
            if now >= m.last_byte_at.saturating_add(self.cfg.stall_ms) {
                let id = m.id;
                self.out.push_back(Output::AbortMux { id });
                self.mux_lost(id, EndReason::Failed("stalled".into()), 0, now);
            }
        }
        if self.mux_retry_at.is_some_and(|t| now >= t) {
            self.mux_retry_at = None;
            self.check_set(now);
        }
        if self.set_check_at.is_some_and(|t| now >= t) {
            self.set_check_at = None;
            self.check_set(now);
        }
    }

    /// Opens, switches or closes the connection to match the wanted set.
    fn check_set(&mut self, now: u64) {
        if self.mux_retry_at.is_some() {
            return;
        }
        let want = self.wanted();
        let Some(m) = &self.mux else {
            if !want.is_empty() {
                self.open_mux(&want, now);
            }
            return;
        };
        if m.active()
            .map(|s| s.key.as_str())
            .eq(want.iter().map(|(k, _)| k))
        {
            return;
        }
        if self.old.is_some() {
            // One switch at a time; checked again when it finishes.
            return;
        }
        if want.is_empty() {
            self.abort_muxes();
            return;
        }
        self.old = self.mux.take();
        self.open_mux(&want, now);
    }

    fn open_mux(&mut self, want: &Subs, now: u64) {
        let id = self.alloc_id();
        let m = Mux::new(id, want, self.cfg.max_event_size, now);
        self.out.push_back(Output::OpenMux {
            id,
            path_and_query: m.path(),
        });
        self.mux = Some(m);
        self.diag.connections_opened += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Action, Target};
    use crate::protocol::Scope;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn open(share: &mut Share, machine: u64, now: u64) -> bool {
        let target = Target::Scoped {
            scope: Scope::Session,
            scope_id: format!("s{machine}"),
        };
        let open = Action::OpenStream {
            id: RequestId(machine),
            path_and_query: String::new(),
            last_event_id: None,
            probe: false,
        };
        share.handle_machine_action(machine, &target, &open, now)
    }

    #[test]
    fn only_404_405_and_501_say_there_is_no_multiplexed_stream() {
        for status in [404, 405, 501] {
            assert!(has_no_multiplexed_stream(status));
        }
        for status in [400, 401, 403, 408, 429, 500, 502, 503] {
            assert!(!has_no_multiplexed_stream(status));
        }
    }

    #[test]
    fn a_404_ends_every_virtual_stream_and_hands_later_opens_back() {
        let mut share = Share::new(super::super::ShareConfig::new(1));
        assert!(open(&mut share, 1, 0));
        share.handle_timeout(SET_DEBOUNCE_MS);
        let mut mux = None;
        while let Some(o) = share.poll_output() {
            if let Output::OpenMux { id, .. } = o {
                mux = Some(id);
            }
        }
        let mux = mux.expect("the multiplexed stream is asked for");
        assert_eq!(share.transport(), Transport::Multiplexed);
        share.handle_mux_opened(mux, 404, Some("application/json"), None, 30);
        let ends: Vec<Output> = std::iter::from_fn(|| share.poll_output()).collect();
        assert_eq!(
            ends,
            [Output::Deliver {
                machine: 1,
                stream: RequestId(1),
                what: crate::machine::Response::End,
            }]
        );
        assert_eq!(share.diagnostics().transport, Transport::Scoped);
        // Each machine opens its own stream from now on; nothing is retried.
        assert!(!open(&mut share, 1, 40));
        assert!(!open(&mut share, 2, 40));
        share.handle_timeout(100_000);
        assert_eq!(share.poll_output(), None);
        assert_eq!(share.poll_timeout(), None);
    }
}
