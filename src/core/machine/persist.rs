//! The persisted value: epoch, cursor and folded state in ONE JSON value
//! (rule 1), so a cursor can never be stored without the state it describes,
//! and the outbox beside them (rule 14), so a message is never stored apart
//! from the state that says whether it was committed.

use serde::{Deserialize, Serialize};

use super::error::CoreError;
use super::outbox::StoredMessage;
use super::types::Target;
use crate::fold::View;
use crate::json;

/// Version of the stored format; another version is discarded (the
/// machine says so in a `storage_discarded` notice and replays from 0).
/// 2: the session view keeps `session`, `extras` and tool inputs, which a
/// state of version 1 never saw and cannot be given back, and the outbox
/// is stored beside the state.
pub const STORAGE_VERSION: u32 = 2;

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
    /// Where the state's history starts when it was read newest first
    /// (docs/protocol.md §4.1): the seq before its first event, whose older
    /// pages `load_older` reads; 0 = it holds the log from its start.
    #[serde(default)]
    pub older: u64,
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
    older: u64,
    state: &'a View,
    outbox: &'a [StoredMessage],
}

struct Stored {
    target: String,
    epoch: Option<String>,
    cursor: u64,
    last: Option<LastApplied>,
    older: u64,
    state: View,
    outbox: Vec<StoredMessage>,
}

/// What a stored value holds.
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) pos: Position,
    pub(super) view: View,
    pub(super) outbox: Vec<StoredMessage>,
}

crate::json_struct!(LastApplied { seq: req, id: def, type_name = "type": req });
crate::json_struct!(Stored {
    target: req,
    epoch: def,
    cursor: req,
    last: def,
    older: def,
    state: req,
    outbox: def
});

/// Encodes position, view and outbox as one value.
pub(super) fn encode(
    target: &Target,
    pos: &Position,
    view: &View,
    outbox: &[StoredMessage],
) -> Vec<u8> {
    let stored = StoredRef {
        v: STORAGE_VERSION,
        target: target.key(),
        epoch: &pos.epoch,
        cursor: pos.cursor,
        last: &pos.last,
        older: pos.older,
        state: view,
        outbox,
    };
    json::to_string(&stored)
        .expect("the state holds no floats or non-string keys")
        .into_bytes()
}

/// Decodes a stored value for `target`; anything unusable is an error (the
/// caller then starts from 0).
pub(super) fn decode(bytes: &[u8], target: &Target) -> Result<Decoded, CoreError> {
    // The version first, so that a future format is not misreported as bad
    // JSON (read with the head, which the writer puts first: the state is
    // not read for it).
    match StoredHead::of(bytes).map(|h| h.version) {
        Some(v) if v == u64::from(STORAGE_VERSION) => {}
        Some(v) => {
            return Err(CoreError::CorruptStorage(format!(
                "unknown storage version {v}"
            )))
        }
        None => return Err(CoreError::CorruptStorage("no readable head".into())),
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
        older: s.older,
    };
    Ok(Decoded {
        pos,
        view: s.state,
        outbox: s.outbox,
    })
}

/// Where an encoded value stands: its epoch and cursor, read from the head
/// of the value alone. Several tabs persist one scope under one key, and
/// a save asks this of the stored value, which may hold
/// megabytes of state: the reading stops once both are read, before the
/// state, which the writer puts after them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredHead {
    version: u64,
    epoch: Option<String>,
    cursor: u64,
}

impl StoredHead {
    /// The head of an encoded value; `None` when it is not one. It is read
    /// from the value's first 4 KiB when it is there (neither the rest's
    /// UTF-8 nor its JSON is looked at), else from the whole value.
    pub fn of(value: &[u8]) -> Option<StoredHead> {
        const PREFIX: usize = 4096;
        let prefix = match std::str::from_utf8(&value[..value.len().min(PREFIX)]) {
            Ok(text) => Some(text),
            // Cut inside a character: the text before it.
            Err(e) if e.error_len().is_none() => {
                std::str::from_utf8(&value[..e.valid_up_to()]).ok()
            }
            Err(_) => None,
        };
        // Read from the prefix only if something follows what was read
        // there: a number at its very end may have been cut.
        prefix
            .and_then(|text| StoredHead::read(text).filter(|(_, end)| *end < text.len()))
            .or_else(|| StoredHead::read(json::utf8(value).ok()?))
            .map(|(head, _)| head)
    }

    /// The head and the offset just past the last value read for it.
    fn read(text: &str) -> Option<(StoredHead, usize)> {
        let mut r = json::Reader::new(text);
        // `epoch` is `Some` once its key is read (its value may be null).
        let (mut version, mut epoch, mut cursor): (_, Option<Option<String>>, _) =
            (None, None, None);
        r.object_while(&mut |r, key| {
            match key {
                "v" => version = Some(json::FromJson::read(r)?),
                "epoch" => epoch = Some(json::FromJson::read(r)?),
                "cursor" => cursor = Some(json::FromJson::read(r)?),
                _ => r.skip()?,
            }
            Ok(version.is_none() || epoch.is_none() || cursor.is_none())
        })
        .ok()?;
        let head = StoredHead {
            version: version.unwrap_or_default(),
            epoch: epoch.flatten(),
            cursor: cursor?,
        };
        Some((head, r.pos()))
    }

    /// Whether a value with this head may replace `stored`: never a smaller
    /// cursor of the same epoch over a larger one. A different epoch
    /// replaces (epochs have no order; a writer's epoch was checked against
    /// the server at its last `hello`, and one on a stale epoch flips at its
    /// next), and so does anything over a value without a readable head; a
    /// value without an epoch does not replace one with.
    pub fn replaces(&self, stored: &[u8]) -> bool {
        match StoredHead::of(stored) {
            Some(s) => match (&self.epoch, &s.epoch) {
                // Nothing known yet does not replace something known.
                (None, Some(_)) => false,
                (a, b) if a == b => self.cursor >= s.cursor,
                _ => true,
            },
            None => true,
        }
    }
}

/// Whether the encoded value `new` may replace `stored` under the same key
/// ([`StoredHead::replaces`]; a `new` without a readable head replaces).
pub fn supersedes(new: &[u8], stored: &[u8]) -> bool {
    StoredHead::of(new).is_none_or(|n| n.replaces(stored))
}

#[cfg(test)]
mod tests {
    use super::{encode, supersedes, Position, Target, View};

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
    fn the_head_is_read_without_the_state() {
        // The state is left unread: a value cut inside it is judged by its head.
        let cut = br#"{"v":1,"target":"session:s","epoch":"e1","cursor":9,"state":{"items":[{"#;
        assert!(!supersedes(&value("e1", 4), cut));
        // Another writer's order is read too.
        let reordered = br#"{"state":{},"cursor":9,"v":1,"epoch":"e1"}"#;
        assert!(!supersedes(&value("e1", 4), reordered));
        assert!(supersedes(&value("e1", 10), reordered));
    }

    #[test]
    fn a_head_cut_by_the_prefix_is_read_from_the_whole_value() {
        // The cursor's digits straddle the 4 KiB the head is first read from.
        let target = "s".repeat(4096 - r#"{"v":1,"target":"","epoch":"e1","cursor":12"#.len());
        let stored =
            format!(r#"{{"v":1,"target":"{target}","epoch":"e1","cursor":1234,"state":{{}}}}"#);
        assert_eq!(&stored.as_bytes()[4094..4096], b"12");
        assert!(!supersedes(&value("e1", 100), stored.as_bytes()));
        assert!(supersedes(&value("e1", 1234), stored.as_bytes()));
    }

    #[test]
    fn the_head_of_an_encoded_value_is_its_epoch_and_cursor() {
        let target = Target::Scoped {
            scope: crate::protocol::Scope::Session,
            scope_id: "s".into(),
        };
        let pos = Position {
            epoch: Some("e1".into()),
            cursor: 7,
            last: None,
            older: 0,
        };
        let stored = encode(&target, &pos, &View::empty(true, 10), &[]);
        assert!(!supersedes(&value("e1", 6), &stored));
        assert!(supersedes(&value("e1", 7), &stored));
    }

    #[test]
    fn a_state_of_the_first_version_is_discarded_not_read_short() {
        // Stored before the view kept the session, extras and tool inputs:
        // read, it would show a session without them for good.
        let target = Target::Scoped {
            scope: crate::protocol::Scope::Session,
            scope_id: "s".into(),
        };
        let v1 = br#"{"v":1,"target":"session:s","epoch":"e1","cursor":3,"last":null,"state":{"session":{"items":[],"prompts":[],"tasks":{"version":0,"tasks":[],"background_wait":null},"boot_id":"b"}}}"#;
        let err = super::decode(v1, &target).unwrap_err();
        assert!(err.to_string().contains("storage version 1"), "{err}");
        // This version's own form of the same state reads.
        let pos = Position {
            epoch: Some("e1".into()),
            cursor: 3,
            last: None,
            older: 0,
        };
        let stored = encode(&target, &pos, &View::empty(true, 10), &[]);
        assert!(super::decode(&stored, &target).is_ok());
    }

    #[test]
    fn another_epoch_or_an_unreadable_value_is_replaced() {
        assert!(supersedes(&value("e2", 1), &value("e1", 9)));
        assert!(supersedes(&value("e1", 1), b"garbage"));
        assert!(!supersedes(b"{\"v\":1,\"cursor\":0}", &value("e1", 3)));
    }
}
