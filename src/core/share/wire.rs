//! The channel's messages between the contexts of one group (versioned JSON,
//! written and read with the project's small JSON module).
//!
//! Every message is `{"v":1,"g":<group>,"from":<context id>,"t":<type>,…}`:
//! - `sub` `{"subs":[["session:ses_1",17],["team:t1",null]]}`: the sender's
//!   whole set of scopes and the smallest cursor its machines asked from
//!   (null = live only). Sent on every change, when a leader announces
//!   itself, and every [`SUB_REFRESH_MS`](super::SUB_REFRESH_MS).
//! - `leader` `{}`: the sender holds the lock and the multiplexed stream.
//! - `resign` `{}`: the sender gave the lock up.
//! - `bye` `{}`: the sender closed; forget its subscriptions.
//! - `ev` `{"d":<envelope>}`: one event of one scope, as the server sent it.
//! - `end` `{"keys":[…],"why":"clean"|"failed"|"http","msg":…,"status":…,
//!   "retry_after":…,"body":…}`: the multiplexed stream ended for these scopes.

use std::borrow::Cow;

use crate::core::json::{self, FromJson, JsonError, Reader};

/// The version this code writes and reads.
pub const VERSION: u64 = 1;

/// Why the multiplexed stream stopped carrying some scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// A clean end of the body.
    Clean,
    /// A transport failure (message).
    Failed(String),
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

/// One decoded message; the envelope of `Event` is kept as text.
#[derive(Clone, Debug, PartialEq)]
pub enum Body<'a> {
    /// The sender's subscriptions.
    Sub(Vec<(String, Option<u64>)>),
    /// The sender leads.
    Leader,
    /// The sender stopped leading.
    Resign,
    /// The sender closed.
    Bye,
    /// One event (the envelope's JSON text).
    Event(&'a str),
    /// The stream ended for these scopes.
    End(Vec<String>, EndReason),
}

/// A decoded message with its header.
#[derive(Clone, Debug, PartialEq)]
pub struct Message<'a> {
    /// The group it was sent in.
    pub group: String,
    /// The sending context.
    pub from: u64,
    /// What it says.
    pub body: Body<'a>,
}

fn header(t: &str, group: &str, from: u64) -> String {
    let mut s = String::with_capacity(96);
    s.push_str("{\"v\":1,\"g\":");
    json::write_str(&mut s, group);
    s.push_str(",\"from\":");
    s.push_str(&from.to_string());
    s.push_str(",\"t\":");
    json::write_str(&mut s, t);
    s
}

/// Encodes a message; `Event` splices the envelope text in verbatim.
pub fn encode(group: &str, from: u64, body: &Body<'_>) -> Vec<u8> {
    let mut s;
    match body {
        Body::Sub(subs) => {
            s = header("sub", group, from);
            s.push_str(",\"subs\":[");
            for (i, (key, after)) in subs.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push('[');
                json::write_str(&mut s, key);
                s.push(',');
                match after {
                    Some(a) => s.push_str(&a.to_string()),
                    None => s.push_str("null"),
                }
                s.push(']');
            }
            s.push(']');
        }
        Body::Leader => s = header("leader", group, from),
        Body::Resign => s = header("resign", group, from),
        Body::Bye => s = header("bye", group, from),
        Body::Event(text) => {
            s = header("ev", group, from);
            s.push_str(",\"d\":");
            s.push_str(text);
        }
        Body::End(keys, why) => {
            s = header("end", group, from);
            s.push_str(",\"keys\":[");
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                json::write_str(&mut s, k);
            }
            s.push_str("],\"why\":");
            match why {
                EndReason::Clean => s.push_str("\"clean\""),
                EndReason::Failed(msg) => {
                    s.push_str("\"failed\",\"msg\":");
                    json::write_str(&mut s, msg);
                }
                EndReason::Http {
                    status,
                    retry_after,
                    body,
                } => {
                    s.push_str("\"http\",\"status\":");
                    s.push_str(&status.to_string());
                    if let Some(r) = retry_after {
                        s.push_str(",\"retry_after\":");
                        json::write_str(&mut s, r);
                    }
                    s.push_str(",\"body\":");
                    json::write_str(&mut s, body);
                }
            }
        }
    }
    s.push('}');
    s.into_bytes()
}

/// One `[key, after]` pair of a `sub` message.
struct SubPair(String, Option<u64>);

impl FromJson for SubPair {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let mut key = None;
        let mut after = None;
        let mut n = 0;
        r.array(&mut |r| {
            match n {
                0 => key = Some(String::read(r)?),
                1 => after = Option::<u64>::read(r)?,
                _ => r.skip()?,
            }
            n += 1;
            Ok(())
        })?;
        Ok(SubPair(key.ok_or(JsonError::Missing("key"))?, after))
    }
}

/// Decodes a message; `None` for anything malformed, of another version or
/// of an unknown type (the caller counts it).
pub fn decode(bytes: &[u8]) -> Option<Message<'_>> {
    let text = json::utf8(bytes).ok()?;
    let mut r = Reader::new(text);
    let mut v = None;
    let mut group = None;
    let mut from = None;
    let mut t: Option<Cow<'_, str>> = None;
    let mut subs: Option<Vec<SubPair>> = None;
    let mut d: Option<&str> = None;
    let mut keys: Option<Vec<String>> = None;
    let mut why: Option<String> = None;
    let mut msg: Option<String> = None;
    let mut status: Option<u64> = None;
    let mut retry_after: Option<String> = None;
    let mut body: Option<String> = None;
    r.object(&mut |r, key| {
        match key {
            "v" => v = Some(u64::read(r)?),
            "g" => group = Some(String::read(r)?),
            "from" => from = Some(u64::read(r)?),
            "t" => t = Some(r.string()?),
            "subs" => subs = Some(Vec::read(r)?),
            "d" => d = Some(r.raw()?),
            "keys" => keys = Some(Vec::read(r)?),
            "why" => why = Some(String::read(r)?),
            "msg" => msg = Some(String::read(r)?),
            "status" => status = Some(u64::read(r)?),
            "retry_after" => retry_after = Option::read(r)?,
            "body" => body = Some(String::read(r)?),
            _ => r.skip()?,
        }
        Ok(())
    })
    .ok()?;
    r.end().ok()?;
    if v != Some(VERSION) {
        return None;
    }
    let body = match t?.as_ref() {
        "sub" => Body::Sub(subs?.into_iter().map(|p| (p.0, p.1)).collect()),
        "leader" => Body::Leader,
        "resign" => Body::Resign,
        "bye" => Body::Bye,
        "ev" => Body::Event(d?),
        "end" => {
            let reason = match why?.as_str() {
                "clean" => EndReason::Clean,
                "failed" => EndReason::Failed(msg.unwrap_or_default()),
                "http" => EndReason::Http {
                    status: u16::try_from(status?).ok()?,
                    retry_after,
                    body: body.unwrap_or_default(),
                },
                _ => return None,
            };
            Body::End(keys?, reason)
        }
        _ => return None,
    };
    Some(Message {
        group: group?,
        from: from?,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn every_message_round_trips() {
        let bodies = [
            Body::Sub(vec![
                ("session:s1".into(), Some(17)),
                ("team:t".into(), None),
            ]),
            Body::Leader,
            Body::Resign,
            Body::Bye,
            Body::Event(r#"{"scope":"session","type":"x"}"#),
            Body::End(vec!["session:s1".into()], EndReason::Clean),
            Body::End(vec![], EndReason::Failed("cut \"here\"".into())),
            Body::End(
                vec!["a:b".into()],
                EndReason::Http {
                    status: 503,
                    retry_after: Some("2".into()),
                    body: "{}".into(),
                },
            ),
        ];
        for b in bodies {
            let bytes = encode("grp", 42, &b);
            let m = decode(&bytes).expect("decodes");
            assert_eq!((m.group.as_str(), m.from, m.body), ("grp", 42, b));
        }
    }

    #[test]
    fn malformed_or_foreign_messages_are_refused() {
        for bad in [
            &b"not json"[..],
            br#"{"v":2,"g":"g","from":1,"t":"leader"}"#,
            br#"{"v":1,"g":"g","from":1,"t":"dance"}"#,
            br#"{"v":1,"g":"g","t":"leader"}"#,
            br#"{"v":1,"g":"g","from":1,"t":"ev"}"#,
            br#"{"v":1,"g":"g","from":-1,"t":"leader"}"#,
            br#"{"v":1,"g":"g","from":1,"t":"leader"} x"#,
            &[0xff, 0xfe],
        ] {
            assert_eq!(decode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
