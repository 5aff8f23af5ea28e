//! Wire types of PROTOCOL.md §2–5 and §7: the event envelope, every event
//! payload, the replay and event pages, the write bodies and the canonical
//! transcript. One definition, shared by the client core and `replay-server`.
//!
//! Each type is declared once, through [`wire_struct!`](crate::wire_struct),
//! [`wire_enum!`](crate::wire_enum) or [`wire_tagged!`](crate::wire_tagged):
//! its serde derives (the server's reader and both writers) and the client's
//! [`FromJson`](crate::json::FromJson) reader come from that one
//! declaration. The envelope, whose `type` and `data` flatten the [`Event`],
//! is read and written by hand in `protocol_json.rs`.
//!
//! One file per section of PROTOCOL.md: this one holds the envelope (§2);
//! `events.rs` §3, `live_turn.rs` §5, `pages.rs` §4.1–4.2, `writes.rs` §4.4,
//! `canonical.rs` §7 and `scopes.rs` the other scopes' payloads.
//!
//! Decoding is tolerant: unknown fields are ignored, and an unknown `type`
//! becomes [`Event::Unknown`] with its data kept opaque, so a durable event of
//! a newer server still advances the cursor.

use serde::{Serialize, Serializer};

use crate::json::{self, JsonError, RawJson};
use crate::{wire_enum, wire_struct, wire_tagged};

wire_enum! {
    /// The logbook an event belongs to (PROTOCOL.md §1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Scope {
        /// Session and turn lifecycle, messages, tools, questions.
        Session = "session",
        /// Team messages and deliveries.
        Team = "team",
        /// Runtime-managed command lifecycle and sampled output.
        Process = "process",
        /// Worktree creation, claim, release, cleanup.
        Worktree = "worktree",
        /// Runtime-level events such as startup recovery.
        System = "system",
    }
}

/// One event as it crosses the wire (PROTOCOL.md §2). Read and written by
/// hand (`protocol_json.rs`): `type` and `data` are the [`Event`].
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// Global row id; durable events only.
    pub id: Option<u64>,
    /// The logbook.
    pub scope: Scope,
    /// Which logbook of that scope, e.g. `ses_7f3a`.
    pub scope_id: String,
    /// Dense per-scope sequence number; durable events only.
    pub seq: Option<u64>,
    /// Durable head when a transient event was produced; transient only.
    pub after_seq: Option<u64>,
    /// Whether the event must not be lost (all durable events are critical).
    pub critical: bool,
    /// RFC 3339 timestamp as sent by the server.
    pub ts: String,
    /// The typed payload; `type` and `data` on the wire.
    pub event: Event,
}

impl Envelope {
    /// A durable event as a store hands it out: row id and seq, critical.
    pub fn durable(
        id: u64,
        scope: Scope,
        scope_id: String,
        seq: u64,
        ts: String,
        event: Event,
    ) -> Self {
        Envelope {
            id: Some(id),
            scope,
            scope_id,
            seq: Some(seq),
            after_seq: None,
            critical: true,
            ts,
            event,
        }
    }

    /// True for events that carry a `seq` (persisted before sending).
    pub fn is_durable(&self) -> bool {
        self.seq.is_some()
    }

    /// Decodes one envelope from JSON bytes with serde_json.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Encodes the envelope as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("envelope serialisation cannot fail")
    }
}

mod canonical;
mod events;
mod live_turn;
mod pages;
mod scopes;
mod writes;

pub use canonical::*;
pub use events::*;
pub use live_turn::*;
pub use pages::*;
pub use scopes::*;
pub use writes::*;

#[cfg(test)]
mod tests;
