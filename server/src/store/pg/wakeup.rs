//! What a node's wake-up (`NOTIFY` on [`super::CHANNEL`], sent after each
//! commit, outside its transaction) says: the writing node's tag, the
//! group's first id and its events, so that another node can publish them
//! without reading the log (`crate::follow`).
//!
//! Payload: `{tag} {first} {n}`, then one line per event, in id order:
//! `[scope, scope_id, seq, type, ts, epoch, data]` (JSON; `data` is the
//! event's data as stored). The first id is filled in by Postgres (the
//! statement looks it up by the first event's log and seq: ids are given
//! in the same round trip, so the node does not know them when it sends
//! the wake-up). A group whose lines do not fit in a payload (Postgres
//! takes under 8 000 bytes) sends the header only, and a group that did
//! not commit sends the tag only: either one is a plain "read the log".

use serde_json::value::RawValue;

use super::tx::{Committed, Staged};
use crate::store::rows::EventRow;
use crate::store::scope_from_str;

/// Most bytes of a payload Postgres takes (it refuses 8 000 and more),
/// with room to spare for a database encoding other than UTF-8.
const PAYLOAD_MAX: usize = 7_900;

/// What a wake-up asks of a follower.
#[derive(Debug, PartialEq)]
pub enum Wakeup {
    /// This node's own (its writers publish what it commits).
    Own,
    /// Read the log: the group did not fit, did not commit, or the payload
    /// is not one this node reads (an older node's).
    Plain,
    /// A committed group, contiguous ids in order, as the log holds it.
    Group(Vec<Committed>),
}

/// What follows the first id in a wake-up for `staged` (whose data is
/// `datas`, as inserted) sent by the node tagged `tag`: ` {n}` and a line
/// per event, or ` {n}` alone if they would not fit.
pub fn body(tag: &str, staged: &[Staged], datas: &[String]) -> String {
    let head = format!(" {}", staged.len());
    // The tag, a space and up to 20 digits of the first id come before it.
    let room = PAYLOAD_MAX.saturating_sub(tag.len() + 21);
    let mut out = head.clone();
    for (s, data) in staged.iter().zip(datas) {
        out.push('\n');
        out.push('[');
        for text in [s.scope.as_str(), &s.scope_id] {
            push_json_str(&mut out, text);
            out.push(',');
        }
        out.push_str(&s.seq.to_string());
        for text in [s.event.type_name(), &s.ts, &s.epoch] {
            out.push(',');
            push_json_str(&mut out, text);
        }
        out.push(',');
        out.push_str(data);
        out.push(']');
        if out.len() > room {
            return head;
        }
    }
    out
}

fn push_json_str(out: &mut String, text: &str) {
    // A string always serialises.
    out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()));
}

/// The tag of the node that sent a payload (its first word).
pub fn parse_tag(payload: &str) -> &str {
    payload.split([' ', '\n']).next().unwrap_or("")
}

/// Reads a wake-up's payload; `own` is this node's tag.
pub fn parse(payload: &str, own: &str) -> Wakeup {
    let (header, lines) = payload.split_once('\n').unwrap_or((payload, ""));
    let mut words = header.split(' ');
    if words.next() == Some(own) {
        return Wakeup::Own;
    }
    let (Some(first), Some(n)) = (
        words.next().and_then(|w| w.parse::<u64>().ok()),
        words.next().and_then(|w| w.parse::<usize>().ok()),
    ) else {
        return Wakeup::Plain;
    };
    if n == 0 || lines.is_empty() {
        return Wakeup::Plain;
    }
    let mut group = Vec::with_capacity(n);
    for (line, id) in lines.split('\n').zip(first..) {
        match event(line, id) {
            Some(committed) => group.push(committed),
            None => return Wakeup::Plain,
        }
    }
    if group.len() != n {
        return Wakeup::Plain;
    }
    Wakeup::Group(group)
}

/// One line of a payload, as the event with id `id` and its log's epoch.
fn event(line: &str, id: u64) -> Option<Committed> {
    type Line<'a> = (String, String, u64, String, String, String, &'a RawValue);
    let (scope, scope_id, seq, ty, ts, epoch, data): Line<'_> = serde_json::from_str(line).ok()?;
    let row = EventRow {
        id,
        seq,
        ty,
        ts,
        data: data.get().to_owned(),
        scope: scope_from_str(&scope),
        scope_id,
    };
    // Decoded as a row read from the log is: the same envelope.
    Some((row.into_envelope().ok()?, epoch))
}

#[cfg(test)]
mod tests {
    use replay_core::protocol::{Event, Scope, TeamMessage};

    use super::*;

    fn staged(seq: u64, text: &str) -> Staged {
        Staged {
            scope: Scope::Team,
            scope_id: "t \"1\"\n".into(),
            seq,
            epoch: "e_1".into(),
            ts: "2026-12-05T14:00:00Z".into(),
            event: Event::TeamMessage(TeamMessage {
                from: "a".into(),
                to: "all".into(),
                text: text.into(),
            }),
        }
    }

    fn payload(tag: &str, first: u64, staged: &[Staged]) -> String {
        let datas: Vec<String> = staged.iter().map(|s| s.event.data_json()).collect();
        format!("{tag} {first}{}", body(tag, staged, &datas))
    }

    #[test]
    fn a_group_reads_back_as_the_log_holds_it() {
        let group = [staged(4, "hi\nthere"), staged(5, "é")];
        let p = payload("n_a", 41, &group);
        let Wakeup::Group(read) = parse(&p, "n_b") else {
            panic!("not a group: {p}");
        };
        assert_eq!(read.len(), 2);
        for ((env, epoch), (s, id)) in read.iter().zip(group.iter().zip(41..)) {
            assert_eq!(env.id, Some(id));
            assert_eq!(env.seq, Some(s.seq));
            assert_eq!(env.scope_id, s.scope_id);
            assert_eq!(env.event, s.event);
            assert_eq!(epoch, "e_1");
        }
    }

    #[test]
    fn own_plain_and_too_big_wakeups() {
        let group = [staged(1, "x")];
        assert_eq!(parse(&payload("n_a", 1, &group), "n_a"), Wakeup::Own);
        assert_eq!(parse("n_a", "n_b"), Wakeup::Plain); // did not commit, or an older node
        let big: Vec<Staged> = (1..=40).map(|k| staged(k, &"y".repeat(300))).collect();
        let p = payload("n_a", 1, &big);
        assert!(p.len() < PAYLOAD_MAX, "{}", p.len());
        assert_eq!(p, "n_a 1 40");
        assert_eq!(parse(&p, "n_b"), Wakeup::Plain);
        // A line short: not trusted.
        let two = payload("n_a", 7, &[staged(1, "a"), staged(2, "b")]);
        let cut = two.rsplit_once('\n').map_or("", |(a, _)| a);
        assert_eq!(parse(cut, "n_b"), Wakeup::Plain);
    }
}
