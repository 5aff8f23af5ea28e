//! `view.extras`: the newest durable session events of types the fold does
//! not know (a runtime's own plans, artifacts, usage), kept as they came so
//! an app can render what its runtime adds.

use serde::{Deserialize, Serialize};

use crate::json::RawJson;

/// How many such events a view keeps: the newest. A bound, so that a
/// runtime writing one per token cannot grow the stored state without end;
/// an app that needs all of them reads the log (`events()` of a scope).
pub const EXTRAS_MAX: usize = 64;

/// One durable event of a type the session fold does not know.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Extra {
    /// Its `seq`.
    pub seq: u64,
    /// Its wire `type`.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Its `data`, as received.
    pub data: RawJson,
}

crate::json_struct!(Extra {
    seq: req,
    type_name = "type": req,
    data: req,
});

/// Appends `extra`, letting the oldest go past [`EXTRAS_MAX`]. O(1): the
/// list is never longer than the bound.
pub(super) fn push(extras: &mut Vec<Extra>, extra: Extra) {
    if extras.len() >= EXTRAS_MAX {
        extras.remove(0);
    }
    extras.push(extra);
}
