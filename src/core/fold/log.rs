//! The generic fold of scopes other than sessions: a bounded event log.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::ViewChange;
use crate::core::protocol::Envelope;

/// The last `capacity` durable events of a scope, with totals per type.
///
/// Indices in [`ViewChange::items_appended_from`] are absolute positions in
/// the scope's applied sequence: entry `i` of [`LogView::events`] has position
/// `first_position() + i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogView {
    capacity: usize,
    events: VecDeque<Envelope>,
    total: u64,
    counts: BTreeMap<String, u64>,
    transient: u64,
    last_transient: Option<Envelope>,
}

impl LogView {
    /// An empty log keeping at most `capacity` events (at least 1).
    pub fn new(capacity: usize) -> Self {
        LogView {
            capacity: capacity.max(1),
            events: VecDeque::new(),
            total: 0,
            counts: BTreeMap::new(),
            transient: 0,
            last_transient: None,
        }
    }

    /// The kept durable events, oldest first.
    pub fn events(&self) -> &VecDeque<Envelope> {
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
    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    /// Transient events seen, and the latest one (e.g. a process output sample).
    pub fn transient(&self) -> (u64, Option<&Envelope>) {
        (self.transient, self.last_transient.as_ref())
    }

    /// Appends one durable event, evicting the oldest beyond capacity.
    pub fn apply_durable(&mut self, env: &Envelope, ch: &mut ViewChange) {
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(env.clone());
        ch.appended(self.total as usize);
        self.total += 1;
        *self
            .counts
            .entry(env.event.type_name().to_owned())
            .or_insert(0) += 1;
    }

    /// Counts a transient event and keeps it as the latest.
    pub fn apply_transient(&mut self, env: &Envelope, ch: &mut ViewChange) {
        self.transient += 1;
        self.last_transient = Some(env.clone());
        ch.overlay = true;
    }
}

crate::json_struct!(LogView {
    capacity: req,
    events: req,
    total: req,
    counts: req,
    transient: req,
    last_transient: def,
});
