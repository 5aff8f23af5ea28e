//! The channel's messages between the contexts of one group (versioned JSON,
//! written here and read with the project's JSON module).
//!
//! Every message is `{"v":1,"g":<group>,"from":<context id>,"t":<type>,…}`:
//! - `sub` `{"keys":["session:ses_1","team:t1"],"after":[17,null]}`: the
//!   sender's whole set of scopes and, at the same index, the smallest
//!   cursor its machines asked from (null = live only). Sent on every
//!   change, when a leader announces itself, and every
//!   [`SUB_REFRESH_MS`](super::SUB_REFRESH_MS).
//! - `leader` `{}`: the sender holds the lock and the multiplexed stream.
//! - `resign` `{}`: the sender gave the lock up.
//! - `bye` `{}`: the sender closed; forget its subscriptions.
//! - `ev` `{"d":<envelope>}`: one event of one scope, as the server sent it.
//! - `end` `{"keys":[…],"why":"clean"|"failed"|"http","status":…,
//!   "retry_after":…,"body":…}`: the multiplexed stream ended for these
//!   scopes (`body`: the failure's message, or the HTTP answer's body).

use std::borrow::Cow;

use super::subs::Subs;
use super::Delivery;
use crate::json::{self, RawJson};
use crate::machine::CoreError;

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

impl EndReason {
    /// What each machine's virtual stream gets for it (a fresh value per
    /// stream: building is what a `Clone` of [`Delivery`] would do anyway).
    pub fn delivery(&self) -> Delivery {
        match self {
            EndReason::Clean => Delivery::End,
            EndReason::Failed(msg) => Delivery::Failed(CoreError::Network(msg.clone())),
            EndReason::Http {
                status,
                retry_after,
                body,
            } => Delivery::HttpError {
                status: *status,
                retry_after: retry_after.clone(),
                body: body.clone().into_bytes(),
            },
        }
    }
}

/// One message; the envelope of `Event` is kept as text.
#[derive(Clone, Debug, PartialEq)]
pub enum Body<'a> {
    /// The sender's subscriptions.
    Sub(Subs),
    /// The sender leads.
    Leader,
    /// The sender stopped leading.
    Resign,
    /// The sender closed.
    Bye,
    /// One event (the envelope's JSON text).
    Event(Cow<'a, str>),
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

/// `,"keys":[…]`.
fn write_keys(s: &mut String, keys: &mut dyn Iterator<Item = &str>) {
    s.push_str(",\"keys\":[");
    for (i, k) in keys.enumerate() {
        if i > 0 {
            s.push(',');
        }
        json::write_str(s, k);
    }
    s.push(']');
}

/// Encodes a message; `Event` splices the envelope text in verbatim.
pub fn encode(group: &str, from: u64, body: &Body<'_>) -> Vec<u8> {
    let t = match body {
        Body::Sub(_) => "sub",
        Body::Leader => "leader",
        Body::Resign => "resign",
        Body::Bye => "bye",
        Body::Event(_) => "ev",
        Body::End(..) => "end",
    };
    let mut s = format!("{{\"v\":{VERSION},\"from\":{from},\"t\":\"{t}\",\"g\":");
    json::write_str(&mut s, group);
    match body {
        Body::Sub(subs) => {
            write_keys(&mut s, &mut subs.iter().map(|(k, _)| k));
            s.push_str(",\"after\":[");
            for (i, (_, a)) in subs.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                match a {
                    Some(a) => s.push_str(&a.to_string()),
                    None => s.push_str("null"),
                }
            }
            s.push(']');
        }
        Body::Event(text) => {
            s.push_str(",\"d\":");
            s.push_str(text);
        }
        Body::End(keys, why) => {
            write_keys(&mut s, &mut keys.iter().map(String::as_str));
            let (why, status, retry_after, text) = match why {
                EndReason::Clean => ("clean", 0, None, ""),
                EndReason::Failed(msg) => ("failed", 0, None, msg.as_str()),
                EndReason::Http {
                    status,
                    retry_after,
                    body,
                } => ("http", *status, retry_after.as_deref(), body.as_str()),
            };
            s.push_str(",\"why\":\"");
            s.push_str(why);
            s.push_str("\",\"status\":");
            s.push_str(&status.to_string());
            s.push_str(",\"body\":");
            json::write_str(&mut s, text);
            if let Some(r) = retry_after {
                s.push_str(",\"retry_after\":");
                json::write_str(&mut s, r);
            }
        }
        Body::Leader | Body::Resign | Body::Bye => {}
    }
    s.push('}');
    s.into_bytes()
}

/// Every key a message may have; which ones count depends on `t`.
/// Each is optional here and checked below: a required field's early
/// return in the reader costs a drop of every field read before it.
#[derive(Default)]
struct Fields {
    v: u64,
    g: String,
    from: Option<u64>,
    t: String,
    keys: Option<Vec<String>>,
    after: Vec<Option<u64>>,
    d: Option<RawJson>,
    why: String,
    status: u64,
    retry_after: Option<String>,
    body: String,
}

// The JSON module's one field loop (`Reader::fields`): a hand-written
// decoder cost 4 KB of raw wasm.
crate::json_struct!(Fields {
    v: def,
    g: def,
    from: def,
    t: def,
    keys: def,
    after: def,
    d: def,
    why: def,
    status: def,
    retry_after: def,
    body: def,
});

/// Decodes a message; `None` for anything malformed, of another version or
/// of an unknown type (the caller counts it).
pub fn decode(bytes: &[u8]) -> Option<Message<'static>> {
    let f: Fields = json::from_slice(bytes).ok()?;
    if f.v != VERSION {
        return None;
    }
    let body = match f.t.as_str() {
        "sub" => {
            let mut subs = Subs::default();
            for (i, k) in f.keys?.iter().enumerate() {
                subs.add(k, f.after.get(i).copied().flatten());
            }
            Body::Sub(subs)
        }
        "leader" => Body::Leader,
        "resign" => Body::Resign,
        "bye" => Body::Bye,
        "ev" => Body::Event(Cow::Owned(f.d?.as_str().to_owned())),
        "end" => {
            let reason = match f.why.as_str() {
                "clean" => EndReason::Clean,
                "failed" => EndReason::Failed(f.body),
                "http" => EndReason::Http {
                    status: u16::try_from(f.status).ok()?,
                    retry_after: f.retry_after,
                    body: f.body,
                },
                _ => return None,
            };
            Body::End(f.keys?, reason)
        }
        _ => return None,
    };
    Some(Message {
        group: f.g,
        from: f.from?,
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
        let mut subs = Subs::default();
        subs.add("session:s1", Some(17));
        subs.add("team:t", None);
        let bodies = [
            Body::Sub(subs),
            Body::Leader,
            Body::Resign,
            Body::Bye,
            Body::Event(r#"{"scope":"session","type":"x"}"#.into()),
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
