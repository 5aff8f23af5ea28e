//! The persisted value: epoch, cursor and folded state in ONE JSON value
//! (rule 1), so a cursor can never be stored without the state it describes.

use serde::{Deserialize, Serialize};

use super::error::CoreError;
use super::types::Target;
use crate::core::fold::View;
use crate::core::json;

/// Version of the stored format; another version is discarded.
pub const STORAGE_VERSION: u32 = 1;

/// The last durable event applied, kept to verify gap repair (rule 4).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastApplied {
    /// Its `seq` (row id on the global list).
    pub seq: u64,
    /// Its row id.
    pub id: Option<u64>,
    /// Its `type`.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// Where a machine stands in its log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The log's epoch, once known.
    pub epoch: Option<String>,
    /// Last applied `seq` (row id on the global list); 0 = nothing.
    pub cursor: u64,
    /// The event at `cursor`.
    pub last: Option<LastApplied>,
}

// No `flatten` or internal tags around the state: those buffer values and
// cannot carry the envelopes' raw JSON data.
#[derive(Serialize)]
struct StoredRef<'a> {
    v: u32,
    target: String,
    epoch: &'a Option<String>,
    cursor: u64,
    last: &'a Option<LastApplied>,
    state: &'a View,
}

struct Stored {
    target: String,
    epoch: Option<String>,
    cursor: u64,
    last: Option<LastApplied>,
    state: View,
}

crate::json_struct!(LastApplied { seq: req, id: def, type_name = "type": req });
crate::json_struct!(Stored {
    target: req,
    epoch: def,
    cursor: req,
    last: def,
    state: req
});

/// Encodes position and view as one value.
pub fn encode(target: &Target, pos: &Position, view: &View) -> Vec<u8> {
    let stored = StoredRef {
        v: STORAGE_VERSION,
        target: target.key(),
        epoch: &pos.epoch,
        cursor: pos.cursor,
        last: &pos.last,
        state: view,
    };
    json::to_string(&stored)
        .expect("the state holds no floats or non-string keys")
        .into_bytes()
}

/// Decodes a stored value for `target`; anything unusable is an error (the
/// caller then starts from 0).
pub fn decode(bytes: &[u8], target: &Target) -> Result<(Position, View), CoreError> {
    // Peek at the version first so a future format is not misreported as bad JSON.
    struct Version {
        v: u64,
    }
    crate::json_struct!(Version { v: req });
    let version: Version =
        json::from_slice(bytes).map_err(|e| CoreError::CorruptStorage(e.to_string()))?;
    if version.v != u64::from(STORAGE_VERSION) {
        return Err(CoreError::CorruptStorage(format!(
            "unknown storage version {}",
            version.v
        )));
    }
    let s: Stored =
        json::from_slice(bytes).map_err(|e| CoreError::CorruptStorage(e.to_string()))?;
    if s.target != target.key() {
        return Err(CoreError::CorruptStorage(format!(
            "stored value belongs to {}",
            s.target
        )));
    }
    if matches!(s.state, View::Session(_)) != target.is_session() {
        return Err(CoreError::CorruptStorage(
            "view kind does not match the target".into(),
        ));
    }
    if s.cursor > 0 && s.epoch.is_none() {
        return Err(CoreError::CorruptStorage("cursor without an epoch".into()));
    }
    let pos = Position {
        epoch: s.epoch,
        cursor: s.cursor,
        last: s.last,
    };
    Ok((pos, s.state))
}

/// Whether the encoded value `new` may replace `stored` under the same key
/// (several tabs persist one scope, issue 12 point 4): never a smaller
/// cursor of the same epoch over a larger one. A different epoch replaces
/// (epochs have no order; a writer's epoch was checked against the server
/// at its last `hello`, and one on a stale epoch flips at its next), and so
/// does anything over an unreadable value; a value without an epoch does
/// not replace one with.
pub fn supersedes(new: &[u8], stored: &[u8]) -> bool {
    struct Head {
        epoch: Option<String>,
        cursor: u64,
    }
    crate::json_struct!(Head {
        epoch: def,
        cursor: req
    });
    let head = |b: &[u8]| json::from_slice::<Head>(b).ok();
    match (head(new), head(stored)) {
        (Some(n), Some(s)) => match (&n.epoch, &s.epoch) {
            // Nothing known yet does not replace something known.
            (None, Some(_)) => false,
            (a, b) if a == b => n.cursor >= s.cursor,
            _ => true,
        },
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::supersedes;

    fn value(epoch: &str, cursor: u64) -> Vec<u8> {
        format!(
            r#"{{"v":1,"target":"session:s","epoch":"{epoch}","cursor":{cursor},"state":{{}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn an_older_cursor_of_the_same_epoch_never_replaces_a_newer_one() {
        assert!(!supersedes(&value("e1", 4), &value("e1", 9)));
        assert!(supersedes(&value("e1", 9), &value("e1", 4)));
        assert!(supersedes(&value("e1", 9), &value("e1", 9)));
    }

    #[test]
    fn another_epoch_or_an_unreadable_value_is_replaced() {
        assert!(supersedes(&value("e2", 1), &value("e1", 9)));
        assert!(supersedes(&value("e1", 1), b"garbage"));
        assert!(!supersedes(b"{\"v\":1,\"cursor\":0}", &value("e1", 3)));
    }
}
