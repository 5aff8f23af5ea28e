//! Serving the hub's machines: per scope, what the shared stream
//! has shown (epoch, boot, head, the last durable seq passed on), and the
//! machines' virtual streams, fed with the events of their scope only, as
//! the hub read them.

use std::collections::VecDeque;

use super::subs::Subs;
use super::Output;
use crate::json;
use crate::machine::{CoreError, RequestId, Response, StreamEvent, Target};
use crate::protocol::{Envelope, ErrorBody, Event, Heartbeat, Hello, Scope};

/// Why the connection stopped carrying some scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// A clean end of the body.
    Clean,
    /// A transport failure (message).
    Failed(String),
    /// The server's answer was hidden by the browser: no CORS headers for
    /// the page's origin (this origin).
    Cors(String),
    /// An HTTP error answer that the machines must see as such.
    Http {
        /// The status.
        status: u16,
        /// The `Retry-After` header.
        retry_after: Option<String>,
        /// The body.
        body: String,
    },
}

impl EndReason {
    /// Ends `l`'s virtual stream with the facts of the answer a scoped
    /// stream would have ended with (built anew per stream).
    fn end(&self, l: &Local, out: &mut VecDeque<Output>) {
        let last = match self {
            EndReason::Clean => Response::End,
            EndReason::Failed(msg) => Response::Failed(CoreError::Network(msg.clone())),
            EndReason::Cors(origin) => Response::Failed(CoreError::Cors(origin.clone())),
            EndReason::Http {
                status,
                retry_after,
                body,
            } => {
                let head = Response::Head {
                    status: *status,
                    content_type: Some("application/json".into()),
                    retry_after: retry_after.clone(),
                };
                out.push_back(deliver(l, head));
                out.push_back(deliver(l, Response::Body(body.clone().into_bytes())));
                Response::End
            }
        };
        out.push_back(deliver(l, last));
    }
}

/// The key of a machine's target; `None` for the global list (not shared).
pub fn target_key(target: &Target) -> Option<String> {
    match target {
        Target::Scoped { .. } => Some(target.key()),
        Target::Global => None,
    }
}

/// `(scope, scope_id)` of a key.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once(':').unwrap_or((key, ""))
}

/// Scopes tracked at most (a hub that saw many come and go forgets
/// the idle ones).
pub const MAX_TRACKS: usize = 1_024;

/// What the hub knows of one scope's shared stream.
#[derive(Clone, Debug)]
pub struct Track {
    key: String,
    scope: Scope,
    epoch: Option<String>,
    boot: String,
    head: u64,
    /// Highest durable seq passed on (or known covered by the stream):
    /// anything at or below is a duplicate.
    position: Option<u64>,
    /// A `hello` came on the source that is flowing now.
    flowing: bool,
}

/// One machine's virtual stream.
#[derive(Debug)]
struct Local {
    machine: u64,
    id: RequestId,
    key: String,
    after: Option<u64>,
    greeted: bool,
}

/// The per-scope state and the virtual streams of one hub.
#[derive(Debug, Default)]
pub struct Router {
    /// Searched linearly: a handful per hub, [`MAX_TRACKS`] at most.
    tracks: Vec<Track>,
    locals: Vec<Local>,
    duplicates: u64,
}

/// A `hello` and a `heartbeat` for a subscriber that joins a scope already
/// flowing: the hello carries the highest head seen, so a live-only machine
/// marks everything up to it as not coming, and the heartbeat makes a
/// machine with an older cursor repair its gap at once.
pub fn greeting(t: &Track) -> Option<[Envelope; 2]> {
    let epoch = t.epoch.clone()?;
    let head = t.head.max(t.position.unwrap_or(0));
    let hello = Hello {
        epoch,
        head,
        boot_id: t.boot.clone(),
    };
    Some([
        t.envelope(Event::Hello(hello)),
        t.envelope(Event::Heartbeat(Heartbeat { head })),
    ])
}

impl Track {
    fn new(key: &str, scope: Scope) -> Self {
        Track {
            key: key.to_owned(),
            scope,
            epoch: None,
            boot: String::new(),
            head: 0,
            position: None,
            flowing: false,
        }
    }

    /// A transient of this scope.
    fn envelope(&self, event: Event) -> Envelope {
        Envelope {
            id: None,
            scope: self.scope,
            scope_id: split_key(&self.key).1.to_owned(),
            seq: None,
            after_seq: None,
            critical: true,
            ts: String::new(),
            event,
        }
    }
}

/// Reads an envelope of the shared stream as its scope's machine would (a
/// session's payload typed, any other scope's kept as text): the machine
/// gets it read.
pub fn read(text: &str) -> Option<Envelope> {
    json::from_str_with::<Envelope>(text, json::Payloads::AsTheirClients).ok()
}

/// The answer a machine gets for a `subscription.error` (PROTOCOL.md §4.6),
/// shaped like the scoped stream's HTTP answer so rule 9 applies unchanged:
/// its `data` is that answer's body (`{error, message, epoch?, head?}`), read
/// with the machine's own [`ErrorBody`] reader for the status.
fn subscription_error(data: &str) -> EndReason {
    let code = json::from_str::<ErrorBody>(data).map(|e| e.error);
    let status = match code.as_deref().unwrap_or_default() {
        "not_found" => 404,
        "invalid_cursor" => 400,
        "cursor_ahead" => 409,
        _ => 502,
    };
    EndReason::Http {
        status,
        retry_after: None,
        body: data.to_owned(),
    }
}

impl Router {
    fn track(&self, key: &str) -> Option<&Track> {
        self.tracks.iter().find(|t| t.key == key)
    }

    /// Where a new stream for `key` should start, if known.
    pub fn position(&self, key: &str) -> Option<u64> {
        self.track(key)?.position
    }

    /// The greeting for a newcomer to `key`, if that scope is flowing (its
    /// hello came on the current source).
    pub fn greeting(&self, key: &str) -> Option<[Envelope; 2]> {
        self.track(key).filter(|t| t.flowing).and_then(greeting)
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
    pub fn subscriptions(&self) -> Subs {
        let mut m = Subs::default();
        for l in &self.locals {
            m.add(&l.key, l.after);
        }
        m
    }

    /// Whether a machine here follows `key`.
    pub fn follows(&self, key: &str) -> bool {
        self.locals.iter().any(|l| l.key == key)
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
        let opened = Response::Head {
            status: 200,
            content_type: Some("text/event-stream".into()),
            retry_after: None,
        };
        out.push_back(Output::Deliver {
            machine,
            stream: id,
            what: opened,
        });
        let greeting = self.greeting(&key);
        let local = Local {
            machine,
            id,
            key,
            after,
            greeted: greeting.is_some(),
        };
        if let Some(greeting) = greeting {
            // Not sent by anyone: nothing to count as held.
            let events = greeting.map(|envelope| StreamEvent { envelope, size: 0 });
            out.push_back(deliver(&local, Response::Events(events.into())));
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

    /// The track of `key`, made if new. At [`MAX_TRACKS`], scopes that
    /// neither flow nor have a virtual stream are forgotten first (what the
    /// next connection for them starts from is then the machines' cursors).
    fn track_mut(&mut self, key: &str, scope: Scope) -> &mut Track {
        let i = match self.tracks.iter().position(|t| t.key == key) {
            Some(i) => i,
            None => {
                if self.tracks.len() >= MAX_TRACKS {
                    let locals = &self.locals;
                    self.tracks
                        .retain(|t| t.flowing || locals.iter().any(|l| l.key == t.key));
                }
                self.tracks.push(Track::new(key, scope));
                self.tracks.len() - 1
            }
        };
        &mut self.tracks[i]
    }

    /// One event of the shared stream: `env`, read from `text` (its `data`
    /// as received) by [`read`].
    /// `start`: for a `hello` of a new source, where its durable events
    /// start (the `after` it was opened with, `None` = at the hello's head).
    /// A durable event at or below the position is a duplicate, dropped.
    pub fn event(
        &mut self,
        env: Envelope,
        text: &str,
        start: Option<Option<u64>>,
        out: &mut VecDeque<Output>,
    ) {
        let key = Target::scoped_key(env.scope, &env.scope_id);
        let t = self.track_mut(&key, env.scope);
        let is_hello = matches!(env.event, Event::Hello(_));
        // A hello goes to the machines waiting for one, and to those already
        // following only if the log or the worker changed (a new
        // connection's hello says nothing new otherwise); anything else
        // goes to the greeted.
        let mut to_all = false;
        match &env.event {
            Event::Hello(h) => {
                let new_epoch = t.epoch.as_deref() != Some(h.epoch.as_str());
                to_all = new_epoch || t.boot != h.boot_id;
                if new_epoch {
                    t.epoch = Some(h.epoch.clone());
                    t.head = h.head;
                    t.position = None;
                }
                t.boot.clone_from(&h.boot_id);
                t.head = t.head.max(h.head);
                if t.position.is_none() {
                    t.position = start.map(|s| s.unwrap_or(h.head));
                }
                t.flowing = true;
            }
            Event::Heartbeat(hb) => t.head = t.head.max(hb.head),
            Event::Unknown { type_name, data } if type_name == "subscription.error" => {
                // Forgotten: nothing more comes for it on this source.
                t.epoch = None;
                t.boot.clear();
                t.head = 0;
                t.position = None;
                t.flowing = false;
                let why = subscription_error(data.as_str());
                self.end_streams(std::slice::from_ref(&key), &why, out);
                return;
            }
            _ => {}
        }
        if let Some(seq) = env.seq.filter(|_| !is_hello) {
            if t.position.is_some_and(|p| seq <= p) {
                self.duplicates += 1;
                return;
            }
            t.position = Some(seq);
            t.head = t.head.max(seq);
        }
        let wants = |l: &Local| l.key == key && (l.greeted != is_hello || to_all);
        let mut left = self.locals.iter().filter(|l| wants(l)).count();
        let mut env = Some(env);
        for l in &mut self.locals {
            if wants(l) {
                l.greeted = true;
                left -= 1;
                // Moved to the last one; read again for the others (rare:
                // the host's rule is one machine per scope, and a copy of
                // every payload type would weigh more in the wasm than the
                // reader every machine links anyway).
                let envelope = match env.take_if(|_| left == 0) {
                    Some(envelope) => envelope,
                    None => match read(text) {
                        Some(envelope) => envelope,
                        None => continue,
                    },
                };
                let size = text.len();
                push_event(out, l, StreamEvent { envelope, size });
            }
        }
    }

    /// The shared stream stopped carrying `keys`: their virtual streams
    /// end, so each machine backs off and subscribes again.
    pub fn end(&mut self, keys: &[String], why: &EndReason, out: &mut VecDeque<Output>) {
        for t in &mut self.tracks {
            if keys.contains(&t.key) {
                t.flowing = false;
            }
        }
        self.end_streams(keys, why, out);
    }

    /// Ends the virtual streams of `keys`, each with its own answer (built
    /// from `why`).
    fn end_streams(&mut self, keys: &[String], why: &EndReason, out: &mut VecDeque<Output>) {
        self.locals.retain(|l| {
            let hit = keys.contains(&l.key);
            if hit {
                why.end(l, out);
            }
            !hit
        });
    }

    /// One virtual stream of `machine`, if it has any.
    pub fn stream_of(&self, machine: u64) -> Option<RequestId> {
        self.locals
            .iter()
            .find(|l| l.machine == machine)
            .map(|l| l.id)
    }
}

/// Queues `event` for `l`'s stream, appended to the events queued last for
/// that stream when nothing else for it came after them: the events one
/// input routes (a chunk of the connection) reach each machine as one
/// input, as a chunk of its own stream would (a frame's chunks, delivered
/// together in it, then call its subscribers once). The order is kept per
/// stream; other streams do not depend on it.
fn push_event(out: &mut VecDeque<Output>, l: &Local, event: StreamEvent) {
    let last = out.iter_mut().rev().find_map(|o| match o {
        Output::Deliver {
            machine,
            stream,
            what,
        } if *machine == l.machine && *stream == l.id => Some(what),
        _ => None,
    });
    match last {
        Some(Response::Events(queued)) => queued.push(event),
        _ => out.push_back(deliver(l, Response::Events(vec![event]))),
    }
}

fn deliver(l: &Local, what: Response) -> Output {
    Output::Deliver {
        machine: l.machine,
        stream: l.id,
        what,
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
            let EndReason::Http {
                status: s, body, ..
            } = subscription_error(&data)
            else {
                panic!("an HTTP answer");
            };
            assert_eq!(s, status);
            assert_eq!(body, data);
        }
    }

    #[test]
    fn a_greeting_carries_the_highest_head_seen() {
        let mut t = Track::new("session:s", Scope::Session);
        assert!(
            greeting(&t).is_none(),
            "no hello seen: nothing to greet with"
        );
        t.epoch = Some("e".into());
        t.boot = "b".into();
        t.head = 7;
        t.position = Some(9);
        let [hello, beat] = greeting(&t).unwrap();
        let text = |env: &Envelope| crate::json::to_string(env).unwrap();
        assert_eq!(
            text(&hello),
            r#"{"scope":"session","scope_id":"s","type":"hello","critical":true,"ts":"","data":{"epoch":"e","head":9,"boot_id":"b"}}"#
        );
        assert!(text(&beat).contains(r#""data":{"head":9}"#));
        assert_eq!(beat.scope, Scope::Session);
        assert_eq!(beat.scope_id, "s");
    }
}
