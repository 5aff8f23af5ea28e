//! Serving the machines of one context: per scope, what the shared stream
//! has shown (epoch, boot, head, the last durable seq passed on), and the
//! machines' virtual streams, fed with re-serialised SSE events of their
//! scope only.

use std::collections::{BTreeMap, VecDeque};

use super::wire::EndReason;
use super::{Delivery, Output};
use crate::core::json;
use crate::core::machine::{CoreError, RequestId, Target};
use crate::core::protocol::{Envelope, Event, Scope};

/// The routing key of a scope: `session:ses_1`; the system scope is
/// `system:` (its stream has no id).
pub fn key_of(scope: Scope, scope_id: &str) -> String {
    match scope {
        Scope::System => "system:".to_owned(),
        s => format!("{}:{}", s.as_str(), scope_id),
    }
}

/// The key of a machine's target; `None` for the global list (not shared).
pub fn target_key(target: &Target) -> Option<String> {
    match target {
        Target::Scoped { scope, scope_id } => Some(key_of(*scope, scope_id)),
        Target::Global => None,
    }
}

/// `(scope, scope_id)` of a key.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once(':').unwrap_or((key, ""))
}

/// Scopes tracked at most (a context that saw many come and go forgets
/// the idle ones).
pub const MAX_TRACKS: usize = 1_024;

/// What this context knows of one scope's shared stream.
#[derive(Clone, Debug, Default)]
pub struct Track {
    epoch: Option<String>,
    boot: String,
    head: u64,
    /// Highest durable seq passed on (or known covered by the stream):
    /// anything at or below is a duplicate.
    position: Option<u64>,
    /// A `hello` came on the source that is flowing now.
    flowing: bool,
}

impl Track {
    /// Where a new stream for this scope should start, if known.
    pub fn position(&self) -> Option<u64> {
        self.position
    }
}

/// One machine's virtual stream.
#[derive(Clone, Debug)]
struct Local {
    machine: u64,
    id: RequestId,
    key: String,
    after: Option<u64>,
    greeted: bool,
}

/// Why a routed event was not passed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routed {
    /// Passed on (to whoever was greeted).
    Kept,
    /// A durable event at or below the position.
    Duplicate,
}

/// The per-scope state and the virtual streams of one context.
#[derive(Debug, Default)]
pub struct Router {
    tracks: BTreeMap<String, Track>,
    locals: Vec<Local>,
    duplicates: u64,
}

/// The SSE text of one event (`event:` + `data:` lines).
pub fn sse(type_name: &str, data: &str) -> Vec<u8> {
    let mut s = String::with_capacity(data.len() + type_name.len() + 16);
    s.push_str("event: ");
    s.push_str(type_name);
    s.push('\n');
    for line in data.split('\n') {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    s.into_bytes()
}

fn envelope(key: &str, type_name: &str, data: &str) -> String {
    let (scope, id) = split_key(key);
    let mut s = String::from("{\"scope\":");
    json::write_str(&mut s, scope);
    s.push_str(",\"scope_id\":");
    json::write_str(&mut s, id);
    s.push_str(",\"type\":");
    json::write_str(&mut s, type_name);
    s.push_str(",\"critical\":true,\"data\":");
    s.push_str(data);
    s.push('}');
    s
}

/// A `hello` and a `heartbeat` (as envelope texts) for a subscriber that
/// joins a scope already flowing: the hello carries the highest head seen,
/// so a live-only machine marks everything up to it as not coming, and the
/// heartbeat makes a machine with an older cursor repair its gap at once.
pub fn greeting(key: &str, t: &Track) -> Option<[String; 2]> {
    let epoch = t.epoch.as_deref()?;
    let head = t.head.max(t.position.unwrap_or(0));
    let mut hello = String::from("{\"epoch\":");
    json::write_str(&mut hello, epoch);
    hello.push_str(",\"head\":");
    hello.push_str(&head.to_string());
    hello.push_str(",\"boot_id\":");
    json::write_str(&mut hello, &t.boot);
    hello.push('}');
    let beat = format!("{{\"head\":{head}}}");
    Some([
        envelope(key, "hello", &hello),
        envelope(key, "heartbeat", &beat),
    ])
}

/// The answer a machine gets for a `subscription.error` (PROTOCOL.md §4.6),
/// shaped like the scoped stream's HTTP answer so rule 9 applies unchanged.
fn subscription_error(data: &str) -> Delivery {
    #[derive(Default)]
    struct SubError {
        error: String,
        message: String,
    }
    crate::json_struct!(SubError {
        error: def,
        message: def
    });
    let e: SubError = json::from_str(data).unwrap_or_default();
    let status = match e.error.as_str() {
        "not_found" => 404,
        "invalid_cursor" => 400,
        "cursor_ahead" => 409,
        _ => 502,
    };
    let mut body = String::from("{\"error\":");
    json::write_str(&mut body, &e.error);
    body.push_str(",\"message\":");
    json::write_str(&mut body, &e.message);
    body.push('}');
    Delivery::HttpError {
        status,
        retry_after: None,
        body: body.into_bytes(),
    }
}

impl Router {
    /// The track of a scope, if any was seen.
    pub fn track(&self, key: &str) -> Option<&Track> {
        self.tracks.get(key)
    }

    /// Whether a scope is flowing (its hello came on the current source).
    pub fn flowing(&self, key: &str) -> bool {
        self.tracks.get(key).is_some_and(|t| t.flowing)
    }

    /// Nothing flows until the next source's hellos (a new subscriber is
    /// greeted by the real one); virtual streams stay open.
    pub fn pause(&mut self) {
        for t in self.tracks.values_mut() {
            t.flowing = false;
        }
    }

    /// Forgets scopes that neither flow nor have a virtual stream (what the
    /// next connection for them starts from is then the machines' cursors).
    fn forget_idle_tracks(&mut self) {
        let locals = &self.locals;
        self.tracks
            .retain(|k, t| t.flowing || locals.iter().any(|l| l.key == *k));
    }

    /// Durable events dropped as already passed on.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Number of virtual streams.
    pub fn len(&self) -> usize {
        self.locals.len()
    }

    /// Every key with a virtual stream and the smallest `after` asked for
    /// (`None` when every subscriber is live only).
    pub fn subscriptions(&self) -> BTreeMap<String, Option<u64>> {
        let mut m: BTreeMap<String, Option<u64>> = BTreeMap::new();
        for l in &self.locals {
            let e = m.entry(l.key.clone()).or_insert(l.after);
            *e = min_after(*e, l.after);
        }
        m
    }

    /// A machine opens its stream: it is told at once that it opened, and
    /// greeted if its scope is already flowing.
    pub fn subscribe(
        &mut self,
        machine: u64,
        id: RequestId,
        key: String,
        after: Option<u64>,
        out: &mut VecDeque<Output>,
    ) {
        out.push_back(Output::Deliver {
            machine,
            stream: id,
            what: Delivery::Opened,
        });
        let mut local = Local {
            machine,
            id,
            key,
            after,
            greeted: false,
        };
        if let Some(t) = self.tracks.get(&local.key).filter(|t| t.flowing) {
            if let Some(g) = greeting(&local.key, t) {
                let mut bytes = sse("hello", &g[0]);
                bytes.extend_from_slice(&sse("heartbeat", &g[1]));
                out.push_back(deliver(&local, Delivery::Bytes(bytes)));
                local.greeted = true;
            }
        }
        self.locals.push(local);
    }

    /// A machine dropped its stream. Returns its key if it was served here.
    pub fn unsubscribe(&mut self, machine: u64, id: RequestId) -> Option<String> {
        let i = self
            .locals
            .iter()
            .position(|l| l.machine == machine && l.id == id)?;
        Some(self.locals.remove(i).key)
    }

    /// One event of the shared stream (`text` is its envelope as received).
    /// `start`: for a `hello` of a new source, where its durable events
    /// start (the `after` it was opened with, `None` = at the hello's head).
    pub fn event(
        &mut self,
        text: &str,
        env: &Envelope,
        start: Option<Option<u64>>,
        out: &mut VecDeque<Output>,
    ) -> Routed {
        let key = key_of(env.scope, &env.scope_id);
        if !self.tracks.contains_key(&key) && self.tracks.len() >= MAX_TRACKS {
            self.forget_idle_tracks();
        }
        let t = self.tracks.entry(key.clone()).or_default();
        let type_name = env.event.type_name();
        match &env.event {
            Event::Hello(h) => {
                let new_epoch = t.epoch.as_deref() != Some(h.epoch.as_str());
                let new_boot = t.boot != h.boot_id;
                if new_epoch {
                    t.epoch = Some(h.epoch.clone());
                    t.head = h.head;
                    t.position = None;
                }
                t.boot = h.boot_id.clone();
                t.head = t.head.max(h.head);
                if t.position.is_none() {
                    t.position = match start {
                        Some(Some(after)) => Some(after),
                        Some(None) => Some(h.head),
                        None => None,
                    };
                }
                t.flowing = true;
                let bytes = sse(type_name, text);
                for l in self.locals.iter_mut().filter(|l| l.key == key) {
                    // A machine already following this scope continues: a
                    // new stream's hello says nothing new unless the log
                    // or the worker changed.
                    if !l.greeted || new_epoch || new_boot {
                        l.greeted = true;
                        out.push_back(deliver(l, Delivery::Bytes(bytes.clone())));
                    }
                }
                return Routed::Kept;
            }
            Event::Heartbeat(hb) => t.head = t.head.max(hb.head),
            Event::Unknown { type_name, data } if type_name == "subscription.error" => {
                *t = Track::default();
                let what = subscription_error(data.as_str());
                self.end_where(|l| l.key == key, |_| what.clone(), out);
                return Routed::Kept;
            }
            _ => {}
        }
        if let Some(seq) = env.seq {
            if t.position.is_some_and(|p| seq <= p) {
                self.duplicates += 1;
                return Routed::Duplicate;
            }
            t.position = Some(seq);
            t.head = t.head.max(seq);
        }
        let bytes = sse(type_name, text);
        for l in self.locals.iter().filter(|l| l.key == key && l.greeted) {
            out.push_back(deliver(l, Delivery::Bytes(bytes.clone())));
        }
        Routed::Kept
    }

    /// The shared stream stopped carrying `keys` (all when `None`): their
    /// virtual streams end, so each machine backs off and subscribes again.
    pub fn end(&mut self, keys: Option<&[String]>, why: &EndReason, out: &mut VecDeque<Output>) {
        let hit = |k: &str| keys.is_none_or(|ks| ks.iter().any(|x| x == k));
        for (k, t) in self.tracks.iter_mut() {
            if hit(k) {
                t.flowing = false;
            }
        }
        let what = match why {
            EndReason::Clean => Delivery::End,
            EndReason::Failed(msg) => Delivery::Failed(CoreError::Network(msg.clone())),
            EndReason::Http {
                status,
                retry_after,
                body,
            } => Delivery::HttpError {
                status: *status,
                retry_after: retry_after.clone(),
                body: body.clone().into_bytes(),
            },
        };
        self.end_where(|l| hit(&l.key), |_| what.clone(), out);
    }

    fn end_where(
        &mut self,
        mut hit: impl FnMut(&Local) -> bool,
        what: impl Fn(&Local) -> Delivery,
        out: &mut VecDeque<Output>,
    ) {
        self.locals.retain(|l| {
            if hit(l) {
                out.push_back(deliver(l, what(l)));
                false
            } else {
                true
            }
        });
    }
}

fn deliver(l: &Local, what: Delivery) -> Output {
    Output::Deliver {
        machine: l.machine,
        stream: l.id,
        what,
    }
}

/// The smaller of two `after`s, where `None` (live only) yields to any cursor.
pub fn min_after(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn a_subscription_error_is_the_scoped_streams_answer() {
        for (code, status) in [
            ("not_found", 404),
            ("invalid_cursor", 400),
            ("cursor_ahead", 409),
            ("new_thing", 502),
        ] {
            let data = format!(r#"{{"error":"{code}","message":"m","head":3}}"#);
            let Delivery::HttpError {
                status: s, body, ..
            } = subscription_error(&data)
            else {
                panic!("an HTTP answer");
            };
            assert_eq!(s, status);
            let body = String::from_utf8(body).unwrap();
            assert_eq!(body, format!(r#"{{"error":"{code}","message":"m"}}"#));
        }
    }

    #[test]
    fn a_greeting_carries_the_highest_head_seen() {
        let t = Track {
            epoch: Some("e".into()),
            boot: "b".into(),
            head: 7,
            position: Some(9),
            flowing: true,
        };
        let [hello, beat] = greeting("session:s", &t).unwrap();
        assert_eq!(
            hello,
            r#"{"scope":"session","scope_id":"s","type":"hello","critical":true,"data":{"epoch":"e","head":9,"boot_id":"b"}}"#
        );
        assert!(beat.contains(r#""data":{"head":9}"#));
        assert_eq!(greeting("session:s", &Track::default()), None);
        assert_eq!(sse("hello", "a\nb"), b"event: hello\ndata: a\ndata: b\n\n");
    }
}
