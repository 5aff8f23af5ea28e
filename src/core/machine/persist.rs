//! The persisted value: epoch, cursor and folded state in ONE JSON value
//! (rule 1), so a cursor can never be stored without the state it describes,
//! and the outbox beside them (rule 14), so a message is never stored apart
//! from the state that says whether it was committed.
//!
//! Tabs that follow one scope share its stored value. A save merges the
//! writer's outbox into the stored one ([`merge_stored`]): the state of the
//! larger cursor stays, and no tab's queued message is dropped by another
//! tab's write.

use std::borrow::Cow;
use std::ops::Range;

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
    // Before the state: a save reads and merges them without the state
    // (`merge_stored`).
    outbox: &'a [StoredMessage],
    gone: &'a [String],
    state: &'a View,
}

struct Stored {
    target: String,
    epoch: Option<String>,
    cursor: u64,
    last: Option<LastApplied>,
    older: u64,
    state: View,
    outbox: Vec<StoredMessage>,
    gone: Vec<String>,
}

/// What a stored value holds.
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) pos: Position,
    pub(super) view: View,
    pub(super) outbox: Vec<StoredMessage>,
    pub(super) gone: Vec<String>,
}

crate::json_struct!(LastApplied { seq: req, id: def, type_name = "type": req });
crate::json_struct!(Stored {
    target: req,
    epoch: def,
    cursor: req,
    last: def,
    older: def,
    state: req,
    outbox: def,
    gone: def
});

/// Encodes position, view and outbox (its messages, and the ids of those
/// that left it: `gone`) as one value.
pub(super) fn encode(
    target: &Target,
    pos: &Position,
    view: &View,
    outbox: &[StoredMessage],
    gone: &[String],
) -> Vec<u8> {
    let stored = StoredRef {
        v: STORAGE_VERSION,
        target: target.key(),
        epoch: &pos.epoch,
        cursor: pos.cursor,
        last: &pos.last,
        older: pos.older,
        outbox,
        gone,
        state: view,
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
        gone: s.gone,
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
        self.replaces_head(StoredHead::of(stored).as_ref())
    }

    fn replaces_head(&self, stored: Option<&StoredHead>) -> bool {
        match stored {
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

/// How many ids of messages that left an outbox (committed, discarded) a
/// stored value keeps, newest last: enough for the tabs of one scope to
/// see each other's, few enough to read with every save.
pub const GONE_KEPT: usize = 64;

/// The outbox of an encoded value, read without its state (the writer puts
/// it before the state), and where it lies in the text.
#[derive(Debug)]
struct OutboxPart {
    head: StoredHead,
    outbox: Vec<StoredMessage>,
    gone: Vec<String>,
    /// The byte ranges of the two values, when the keys are there.
    outbox_at: Option<Range<usize>>,
    gone_at: Option<Range<usize>>,
}

impl OutboxPart {
    fn read(text: &str) -> Option<OutboxPart> {
        let mut r = json::Reader::new(text);
        let (mut version, mut epoch, mut cursor) = (None, None::<Option<String>>, None);
        let (mut outbox, mut gone) = (None, None);
        let (mut outbox_at, mut gone_at) = (None, None);
        r.object_while(&mut |r, key| {
            match key {
                "v" => version = Some(json::FromJson::read(r)?),
                "epoch" => epoch = Some(json::FromJson::read(r)?),
                "cursor" => cursor = Some(json::FromJson::read(r)?),
                "outbox" => {
                    let (v, at) = raw(r)?;
                    outbox = Some(json::from_str::<Vec<StoredMessage>>(v)?);
                    outbox_at = Some(at);
                }
                "gone" => {
                    let (v, at) = raw(r)?;
                    gone = Some(json::from_str::<Vec<String>>(v)?);
                    gone_at = Some(at);
                }
                _ => r.skip()?,
            }
            let all = version.is_some() && epoch.is_some() && cursor.is_some();
            Ok(!(all && outbox.is_some() && gone.is_some()))
        })
        .ok()?;
        Some(OutboxPart {
            head: StoredHead {
                version: version.unwrap_or_default(),
                epoch: epoch.flatten(),
                cursor: cursor?,
            },
            outbox: outbox.unwrap_or_default(),
            gone: gone.unwrap_or_default(),
            outbox_at,
            gone_at,
        })
    }
}

/// What a save of `new` writes over `stored`, the value another tab of the
/// same scope may have written since this one read it (rule 14): `None`
/// keeps `stored` as it is. Run inside the storage's compare-and-write.
///
/// - The state is the one of the larger cursor ([`StoredHead::replaces`]).
/// - The outbox is the union of both by `message_id`, the writer's own
///   copy of a message first (it holds its latest word on it), ordered by
///   `at` (when each was sent): a message one tab queued is never dropped
///   by another tab's save.
/// - A message in either value's `gone` (the tab that wrote it saw it
///   committed or discarded) is not brought back.
///
/// A `new` or `stored` that cannot be read this way is written over, as
/// before the outbox: the save of a value is never refused for its form.
pub fn merge_stored<'a>(new: &'a str, stored: &str) -> Option<Cow<'a, str>> {
    let (Some(n), Some(s)) = (OutboxPart::read(new), OutboxPart::read(stored)) else {
        return Some(Cow::Borrowed(new));
    };
    let mut gone: Vec<String> = (s.gone.iter())
        .filter(|id| !n.gone.contains(id))
        .chain(&n.gone)
        .cloned()
        .collect();
    gone.drain(..gone.len().saturating_sub(GONE_KEPT));
    let mine = |o: &StoredMessage| {
        (n.outbox.iter()).any(|m| m.answer == o.answer && m.message_id == o.message_id)
    };
    let theirs = (s.outbox.iter()).filter(|m| !mine(m) && !gone.contains(&m.message_id));
    let mut outbox: Vec<StoredMessage> = Vec::new();
    for m in (n.outbox.iter())
        .filter(|m| !s.gone.contains(&m.message_id))
        .chain(theirs)
    {
        // In the order of `at`, stable (a sort costs KBs of wasm per type).
        let i = (outbox.iter().position(|o| o.at > m.at)).unwrap_or(outbox.len());
        outbox.insert(i, m.clone());
    }
    let new_wins = n.head.replaces_head(Some(&s.head));
    let (base, part) = if new_wins { (new, &n) } else { (stored, &s) };
    if part.outbox == outbox && part.gone == gone {
        return new_wins.then_some(Cow::Borrowed(new));
    }
    Some(Cow::Owned(splice(base, part, &outbox, &gone)))
}

/// `base` with its outbox and gone values replaced (or added at its end).
fn splice(base: &str, part: &OutboxPart, outbox: &[StoredMessage], gone: &[String]) -> String {
    const PLAIN: &str = "strings and numbers only";
    let end = base.trim_end().len().saturating_sub(1);
    let edit = |at: &Option<Range<usize>>, key: &str, value: String| match at {
        Some(at) => (at.clone(), value),
        None => (end..end, format!(",\"{key}\":{value}")),
    };
    let mut first = edit(
        &part.outbox_at,
        "outbox",
        json::to_string(outbox).expect(PLAIN),
    );
    let mut second = edit(&part.gone_at, "gone", json::to_string(gone).expect(PLAIN));
    // Back to front, so that each range is still where it was read.
    if first.0.start < second.0.start {
        std::mem::swap(&mut first, &mut second);
    }
    let mut out = base.to_owned();
    for (at, value) in [first, second] {
        out.replace_range(at, &value);
    }
    out
}

/// Whether the encoded value `new` may replace `stored` under the same key
/// ([`StoredHead::replaces`]; a `new` without a readable head replaces).
pub fn supersedes(new: &[u8], stored: &[u8]) -> bool {
    StoredHead::of(new).is_none_or(|n| n.replaces(stored))
}

/// A value's text and its byte range in the reader's text.
fn raw<'a>(r: &mut json::Reader<'a>) -> Result<(&'a str, Range<usize>), json::JsonError> {
    let v = r.raw()?;
    Ok((v, r.pos() - v.len()..r.pos()))
}

#[cfg(test)]
mod tests {
    use super::{decode, encode, merge_stored, supersedes, Position, Target, View, GONE_KEPT};
    use crate::json;

    fn session() -> Target {
        Target::Scoped {
            scope: crate::protocol::Scope::Session,
            scope_id: "s".into(),
        }
    }

    /// A value at `cursor` of epoch e1 whose outbox holds `(message_id, at)`
    /// and whose `gone` holds `gone`.
    fn tab(cursor: u64, outbox: &[(&str, u64)], gone: &[&str]) -> String {
        let messages: Vec<String> = (outbox.iter())
            .map(|(id, at)| format!(r#"{{"message_id":"{id}","text":"{id}!","at":{at}}}"#))
            .collect();
        let outbox: Vec<super::StoredMessage> =
            json::from_str(&format!("[{}]", messages.join(","))).unwrap();
        let gone: Vec<String> = gone.iter().map(|g| g.to_string()).collect();
        let pos = Position {
            epoch: Some("e1".into()),
            cursor,
            last: None,
            older: 0,
        };
        let bytes = encode(&session(), &pos, &View::empty(true, 10), &outbox, &gone);
        String::from_utf8(bytes).unwrap()
    }

    /// What a value holds: its cursor, outbox ids and gone ids.
    fn read(value: &str) -> (u64, Vec<String>, Vec<String>) {
        let d = decode(value.as_bytes(), &session()).unwrap();
        let ids = d.outbox.into_iter().map(|m| m.message_id).collect();
        (d.pos.cursor, ids, d.gone)
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn two_tabs_at_one_cursor_keep_both_messages_in_the_order_they_were_sent() {
        let first = tab(5, &[("a", 100)], &[]);
        let second = tab(5, &[("b", 200)], &[]);
        // The second tab saves over the first's value: both messages stay.
        let merged = merge_stored(&second, &first).unwrap();
        assert_eq!(read(&merged), (5, ids(&["a", "b"]), ids(&[])));
        // And the first tab's next save keeps the second's.
        let again = merge_stored(&first, &merged).unwrap();
        assert_eq!(read(&again), (5, ids(&["a", "b"]), ids(&[])));
    }

    #[test]
    fn a_message_a_tab_saw_leave_is_not_brought_back() {
        let stored = tab(5, &[("a", 100), ("b", 200)], &[]);
        // This tab saw `b` committed (or discarded it): gone, not merged back.
        let new = tab(6, &[("a", 100)], &["b"]);
        let merged = merge_stored(&new, &stored).unwrap();
        assert_eq!(read(&merged), (6, ids(&["a"]), ids(&["b"])));
        // A tab that did not see it yet does not bring it back either.
        let late = tab(6, &[("a", 100), ("b", 200), ("c", 300)], &[]);
        let merged = merge_stored(&late, &merged).unwrap();
        assert_eq!(read(&merged), (6, ids(&["a", "c"]), ids(&["b"])));
    }

    #[test]
    fn a_newer_stored_state_stays_and_takes_the_writers_messages() {
        let stored = tab(9, &[("b", 200)], &["x"]);
        let new = tab(4, &[("a", 100)], &[]);
        let merged = merge_stored(&new, &stored).unwrap();
        assert_eq!(read(&merged), (9, ids(&["a", "b"]), ids(&["x"])));
        // Nothing of the writer's missing: the stored value stays as it is.
        assert_eq!(merge_stored(&tab(4, &[("b", 200)], &[]), &stored), None);
        assert_eq!(merge_stored(&tab(4, &[], &["x"]), &stored), None);
    }

    #[test]
    fn the_writers_own_copy_of_a_message_wins() {
        let failed = r#"{"message_id":"a","text":"a!","at":100,"failed":{"code":"invalid_message","message":"no"}}"#;
        let stored = tab(5, &[("a", 100)], &[]);
        let new =
            tab(5, &[], &[]).replacen(r#""outbox":[]"#, &format!(r#""outbox":[{failed}]"#), 1);
        let merged = merge_stored(&new, &stored).unwrap();
        assert!(merged.contains("invalid_message"), "{merged}");
    }

    #[test]
    fn gone_is_bounded_newest_last() {
        let old: Vec<String> = (0..GONE_KEPT).map(|i| format!("old{i}")).collect();
        let old: Vec<&str> = old.iter().map(String::as_str).collect();
        let stored = tab(5, &[], &old);
        let new = tab(5, &[], &["new"]);
        let merged = merge_stored(&new, &stored).unwrap();
        let (_, _, gone) = read(&merged);
        assert_eq!(gone.len(), GONE_KEPT);
        assert_eq!(gone.first().unwrap(), "old1");
        assert_eq!(gone.last().unwrap(), "new");
    }

    #[test]
    fn a_value_stored_with_its_outbox_after_the_state_is_merged() {
        // The layout before `gone`: the outbox after the state.
        let before = tab(5, &[], &[]);
        let start = before.find(r#""state":"#).unwrap() + r#""state":"#.len();
        let state_json = &before[start..before.len() - 1];
        let stored = format!(
            r#"{{"v":2,"target":"session:s","epoch":"e1","cursor":5,"last":null,"state":{state_json},"outbox":[{{"message_id":"a","text":"a!","at":100}}]}}"#
        );
        let new = tab(5, &[("b", 200)], &[]);
        let merged = merge_stored(&new, &stored).unwrap();
        assert_eq!(read(&merged), (5, ids(&["a", "b"]), ids(&[])));
        // The stored one newer: the writer's message is added to it.
        let new = tab(3, &[("b", 200)], &[]);
        let merged = merge_stored(&new, &stored).unwrap();
        assert_eq!(read(&merged), (5, ids(&["a", "b"]), ids(&[])));
    }

    #[test]
    fn an_unreadable_value_on_either_side_is_written_over() {
        let new = tab(5, &[("a", 100)], &[]);
        assert_eq!(merge_stored(&new, "garbage").as_deref(), Some(new.as_str()));
        assert_eq!(merge_stored("garbage", &new).as_deref(), Some("garbage"));
    }

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
        let stored = encode(&target, &pos, &View::empty(true, 10), &[], &[]);
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
        let stored = encode(&target, &pos, &View::empty(true, 10), &[], &[]);
        assert!(super::decode(&stored, &target).is_ok());
    }

    #[test]
    fn another_epoch_or_an_unreadable_value_is_replaced() {
        assert!(supersedes(&value("e2", 1), &value("e1", 9)));
        assert!(supersedes(&value("e1", 1), b"garbage"));
        assert!(!supersedes(b"{\"v\":1,\"cursor\":0}", &value("e1", 3)));
    }
}
