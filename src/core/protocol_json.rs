//! The envelope on the wire (PROTOCOL.md §2), by hand in both directions:
//! its `type` and `data` are the [`Event`], and a durable event is critical
//! whatever the wire says. Every other wire type derives both from its
//! declaration in `protocol.rs`.
//!
//! Two readers: the client's [`FromJson`] (one pass, payload decoded in
//! place; the other scopes' types kept as text, see `events!`) and serde's
//! `Deserialize` (the server's and the tests'), which decodes every payload
//! with serde's derived readers, so each checks the other.

use std::borrow::Cow;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::json::{self, FromJson, JsonError, Payloads, RawJson, Reader};
use super::protocol::{Envelope, Event, Scope};

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Some(id) = self.id {
            m.serialize_entry("id", &id)?;
        }
        m.serialize_entry("scope", &self.scope)?;
        m.serialize_entry("scope_id", &self.scope_id)?;
        if let Some(seq) = self.seq {
            m.serialize_entry("seq", &seq)?;
        }
        if let Some(after) = self.after_seq {
            m.serialize_entry("after_seq", &after)?;
        }
        m.serialize_entry("type", self.event.type_name())?;
        m.serialize_entry("critical", &self.critical)?;
        m.serialize_entry("ts", &self.ts)?;
        m.serialize_entry("data", &EventData(&self.event))?;
        m.end()
    }
}

struct EventData<'a>(&'a Event);

impl Serialize for EventData<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_data(s)
    }
}

#[derive(Deserialize)]
struct WireEnvelope<'a> {
    #[serde(default)]
    id: Option<u64>,
    scope: super::protocol::Scope,
    #[serde(default)]
    scope_id: String,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    after_seq: Option<u64>,
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    #[serde(default)]
    critical: Option<bool>,
    #[serde(default)]
    ts: String,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireEnvelope::deserialize(d)?;
        let event =
            Event::decode_serde(&w.ty, w.data.map(RawValue::get)).map_err(D::Error::custom)?;
        Ok(Envelope {
            id: w.id,
            scope: w.scope,
            scope_id: w.scope_id,
            seq: w.seq,
            after_seq: w.after_seq,
            // Every durable event is critical, whatever the wire says.
            critical: w.critical.unwrap_or(true) || w.seq.is_some(),
            ts: w.ts,
            event,
        })
    }
}

/// Whether to keep this event's payload as text: the reader says so
/// ([`Payloads`]), but the machine needs to look inside `hello` and
/// `heartbeat` whatever the target. `None`: not known before the envelope's
/// `scope` is.
fn opaque(r: &Reader<'_>, scope: Option<Scope>, type_name: &str) -> Option<bool> {
    if matches!(type_name, "hello" | "heartbeat") {
        return Some(false);
    }
    match r.payloads() {
        Payloads::Typed => Some(false),
        Payloads::Opaque => Some(true),
        Payloads::AsTheirClients => scope.map(|s| s != Scope::Session),
    }
}

impl Envelope {
    /// An envelope to read over: [`FromJson::read_into`] sets every field.
    pub(crate) fn blank() -> Self {
        Envelope {
            id: None,
            scope: super::protocol::Scope::Session,
            scope_id: String::new(),
            seq: None,
            after_seq: None,
            critical: false,
            ts: String::new(),
            event: Event::Heartbeat(super::protocol::Heartbeat { head: 0 }),
        }
    }
}

impl Event {
    /// Reads the payload of `type_name` over `self`. A `turn.delta` read
    /// over a `turn.delta` reuses its strings: a streamed answer is
    /// thousands of them in a row. Any other event is read anew (an
    /// in-place reader for every payload type would weigh on the wasm for
    /// events that come one at a time).
    fn read_client_value_into(
        &mut self,
        type_name: &str,
        r: &mut Reader<'_>,
    ) -> Result<(), JsonError> {
        match self {
            Event::TurnDelta(delta) if type_name == "turn.delta" => delta.read_into(r),
            _ => {
                *self = Event::read_client_value(type_name, r)?;
                Ok(())
            }
        }
    }
}

impl FromJson for Envelope {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let mut env = Envelope::blank();
        env.read_into(r)?;
        Ok(env)
    }

    const READ_OVER: bool = true;

    /// The one envelope reader: every field is set, the strings' buffers
    /// (and a delta's) are reused.
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        let mut scope = None;
        let mut ty: Option<Cow<'_, str>> = None;
        let mut critical = None;
        let mut data = None;
        let mut event = false;
        self.id = None;
        self.seq = None;
        self.after_seq = None;
        // Cleared, not dropped: an absent key reads as empty, a present one
        // refills the buffer.
        self.scope_id.clear();
        self.ts.clear();
        // Nesting counts from the envelope: one reads in a page as alone.
        let outer = r.enter_root();
        let members = r.object(&mut |r, key| {
            match key {
                "id" => self.id = FromJson::read(r)?,
                "scope" => scope = Some(FromJson::read(r)?),
                "scope_id" => self.scope_id.read_into(r)?,
                "seq" => self.seq = FromJson::read(r)?,
                "after_seq" => self.after_seq = FromJson::read(r)?,
                "type" => ty = Some(r.string()?),
                "critical" => critical = FromJson::read(r)?,
                "ts" => self.ts.read_into(r)?,
                // Servers write `type` first: decode in place, one pass. If
                // `type` comes later, keep the text and decode at the end.
                "data" if r.null() => {}
                "data" => match &ty {
                    Some(t) if opaque(r, scope, t) == Some(false) => {
                        self.event.read_client_value_into(t, r)?;
                        event = true;
                    }
                    _ => data = Some(r.raw()?),
                },
                _ => r.skip()?,
            }
            Ok(())
        });
        r.leave_root(outer);
        members?;
        let ty = ty.ok_or(JsonError::Missing("type"))?;
        self.scope = scope.ok_or(JsonError::Missing("scope"))?;
        // Every durable event is critical, whatever the wire says.
        self.critical = critical.unwrap_or(true) || self.seq.is_some();
        if !event {
            self.event = if opaque(r, scope, &ty) == Some(true) {
                Event::Unknown {
                    type_name: ty.into_owned(),
                    data: match data {
                        Some(text) => json::from_str(text)?,
                        None => RawJson::empty_object(),
                    },
                }
            } else {
                Event::read_client_data(&ty, data)?
            };
        }
        Ok(())
    }
}

// Envelopes as the wire can hold them: a durable one is critical.
#[cfg(all(test, not(target_arch = "wasm32")))]
impl json::arb::Arb for Envelope {
    fn arb() -> proptest::strategy::BoxedStrategy<Self> {
        use proptest::prelude::*;
        (
            (
                Option::<u64>::arb(),
                super::protocol::Scope::arb(),
                String::arb(),
            ),
            (Option::<u64>::arb(), Option::<u64>::arb(), bool::arb()),
            (String::arb(), Event::arb()),
        )
            .prop_map(
                |((id, scope, scope_id), (seq, after_seq, critical), (ts, event))| Envelope {
                    id,
                    scope,
                    scope_id,
                    seq,
                    after_seq,
                    critical: critical || seq.is_some(),
                    ts,
                    event,
                },
            )
            .boxed()
    }
}
