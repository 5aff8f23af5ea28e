//! The generic fold of scopes other than sessions: a bounded event log.

use std::collections::{BTreeMap, VecDeque};

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};

use super::ViewChange;
use crate::json::{FromJson, JsonError, RawJson, Reader};
use crate::protocol::{Envelope, Event, Scope};

/// One event as a log keeps it: the envelope with its `data` as JSON text.
///
/// The machine reads log targets with
/// [`json::from_str_opaque`](crate::json::from_str_opaque), so
/// every payload arrives as text and is kept without being re-encoded (the
/// wasm carries no encoder for typed payloads). A typed envelope given to a
/// log directly keeps `null` as its data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Global row id; durable events only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The logbook.
    pub scope: Scope,
    /// Which logbook of that scope.
    pub scope_id: String,
    /// Per-scope sequence number; durable events only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The wire `type`.
    #[serde(rename = "type")]
    pub type_name: String,
    /// RFC 3339 timestamp as sent by the server.
    pub ts: String,
    /// The wire `data`.
    pub data: RawJson,
}

impl LogEntry {
    /// The entry for an envelope (see the type's note on typed envelopes).
    pub fn of(env: &Envelope) -> Self {
        let (type_name, data) = match &env.event {
            Event::Unknown { type_name, data } => (type_name.clone(), data.clone()),
            typed => (typed.type_name().to_owned(), RawJson::null()),
        };
        LogEntry {
            id: env.id,
            scope: env.scope,
            scope_id: env.scope_id.clone(),
            seq: env.seq,
            type_name,
            ts: env.ts.clone(),
            data,
        }
    }

    /// Decodes the payload (for apps that want the typed event).
    pub fn event(&self) -> Result<Event, crate::json::JsonError> {
        Event::read_data(&self.type_name, Some(self.data.as_str()))
    }
}

crate::json_struct!(LogEntry {
    id: def,
    scope: req,
    scope_id: def,
    seq: def,
    type_name = "type": req,
    ts: def,
    data: def,
});

/// The last `capacity` durable events of a scope, with totals per type.
///
/// Indices in [`ViewChange::items_appended_from`] are absolute positions in
/// the scope's applied sequence: entry `i` of [`LogView::events`] has position
/// `first_position() + i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogView {
    capacity: usize,
    events: VecDeque<LogEntry>,
    total: u64,
    counts: TypeCounts,
    // Transients are not stored (docs/protocol.md §6 rule 1).
    #[serde(skip)]
    transient: u64,
    #[serde(skip)]
    last_transient: Option<LogEntry>,
}

/// The stored part of a [`LogView`]: its durable events.
struct LogData {
    capacity: usize,
    events: VecDeque<LogEntry>,
    total: u64,
    counts: TypeCounts,
}

impl LogView {
    /// An empty log keeping at most `capacity` events (at least 1).
    pub fn new(capacity: usize) -> Self {
        LogView {
            capacity: capacity.max(1),
            events: VecDeque::new(),
            total: 0,
            counts: TypeCounts::default(),
            transient: 0,
            last_transient: None,
        }
    }

    /// The kept durable events, oldest first.
    pub fn events(&self) -> &VecDeque<LogEntry> {
        &self.events
    }

    /// Durable events applied in total.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Absolute position of the first kept event.
    pub fn first_position(&self) -> u64 {
        self.total - self.events.len() as u64
    }

    /// Durable events applied, per `type`.
    pub fn counts(&self) -> &TypeCounts {
        &self.counts
    }

    /// Transient events seen, and the latest one (e.g. a process output sample).
    pub fn transient(&self) -> (u64, Option<&LogEntry>) {
        (self.transient, self.last_transient.as_ref())
    }

    /// Appends one durable event, evicting the oldest beyond capacity.
    pub fn apply_durable(&mut self, env: &Envelope, ch: &mut ViewChange) {
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        let entry = LogEntry::of(env);
        self.counts.add(&entry.type_name);
        self.events.push_back(entry);
        ch.appended(self.total as usize);
        self.total += 1;
    }

    /// Counts a transient event and keeps it as the latest.
    pub fn apply_transient(&mut self, env: &Envelope, ch: &mut ViewChange) {
        self.transient += 1;
        self.last_transient = Some(LogEntry::of(env));
        ch.overlay = true;
    }
}

crate::json_struct!(LogData {
    capacity: req,
    events: req,
    total: req,
    counts: req,
});

impl FromJson for LogView {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let d = LogData::read(r)?;
        Ok(LogView {
            capacity: d.capacity,
            events: d.events,
            total: d.total,
            counts: d.counts,
            transient: 0,
            last_transient: None,
        })
    }
}

/// Durable events applied per `type`. A scope has a handful of types: a
/// vector sorted by type replaces a `BTreeMap`, whose code was ~6 KB of wasm.
/// Written as a JSON object, as the map was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeCounts(Vec<(String, u64)>);

impl TypeCounts {
    /// Events of this `type` applied (0 if none).
    pub fn get(&self, type_name: &str) -> u64 {
        self.find(type_name).map_or(0, |i| self.0[i].1)
    }

    /// `(type, count)` pairs, sorted by type.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(t, n)| (t.as_str(), *n))
    }

    fn find(&self, type_name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(t, _)| t.as_str().cmp(type_name))
    }

    fn add_n(&mut self, type_name: &str, n: u64) {
        match self.find(type_name) {
            Ok(i) => self.0[i].1 += n,
            Err(i) => self.0.insert(i, (type_name.to_owned(), n)),
        }
    }

    fn add(&mut self, type_name: &str) {
        self.add_n(type_name, 1);
    }
}

impl Serialize for TypeCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (t, n) in &self.0 {
            map.serialize_entry(t, n)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TypeCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, u64>::deserialize(d)?;
        Ok(TypeCounts(map.into_iter().collect()))
    }
}

impl FromJson for TypeCounts {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let mut counts = TypeCounts::default();
        r.object(&mut |r, key| {
            let n = u64::read(r)?;
            counts.add_n(key, n);
            Ok(())
        })?;
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn type_counts_stay_sorted_and_round_trip_as_an_object() {
        let mut c = TypeCounts::default();
        for t in ["b.x", "a.y", "b.x", "c.z", "a.y", "b.x"] {
            c.add(t);
        }
        let pairs: Vec<_> = c.iter().collect();
        assert_eq!(pairs, [("a.y", 2), ("b.x", 3), ("c.z", 1)]);
        assert_eq!(c.get("missing"), 0);
        let text = crate::json::to_string(&c).unwrap();
        assert_eq!(text, r#"{"a.y":2,"b.x":3,"c.z":1}"#);
        // Any key order reads back sorted.
        let back: TypeCounts = crate::json::from_str(r#"{"c.z":1,"b.x":3,"a.y":2}"#).unwrap();
        assert_eq!(back, c);
    }
}
