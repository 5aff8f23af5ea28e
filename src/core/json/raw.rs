//! [`RawJson`]: an arbitrary JSON value kept as text (tool input, recovery
//! summaries, data of event types this version does not know). The client
//! only carries such values to the app, so it never builds a value tree:
//! `serde_json::Value` cost ~15 KB of wasm (maps, floats, drop glue).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::write::RAW_TOKEN;
use super::{FromJson, JsonError, Reader};

/// A valid JSON value as compact text (insignificant whitespace removed,
/// everything else, key order included, as received).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RawJson(Box<str>);

impl RawJson {
    /// Checks and compacts a JSON text.
    pub fn parse(text: &str) -> Result<Self, JsonError> {
        super::from_str(text)
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON `null`.
    pub fn null() -> Self {
        RawJson("null".into())
    }

    /// The empty object `{}`.
    pub fn empty_object() -> Self {
        RawJson("{}".into())
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        &*self.0 == "null"
    }

    /// A tree of this value (servers and tests; the wasm never calls it).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).expect("RawJson always holds valid JSON")
    }
}

impl Default for RawJson {
    fn default() -> Self {
        RawJson::null()
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<serde_json::Value> for RawJson {
    fn from(v: serde_json::Value) -> Self {
        RawJson(v.to_string().into())
    }
}

impl FromJson for RawJson {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        r.raw().map(|text| RawJson(compact(text).into()))
    }
}

/// Drops whitespace outside strings from a valid JSON text.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_str, mut esc) = (false, false);
    for c in text.chars() {
        if in_str {
            (in_str, esc) = (esc || c != '"', !esc && c == '\\');
        } else if matches!(c, ' ' | '\n' | '\r' | '\t') {
            continue;
        } else {
            in_str = c == '"';
        }
        out.push(c);
    }
    out
}

// Written as serde_json writes its `RawValue`, so serde_json and the
// client's writer both splice the text in as it is.
impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct(RAW_TOKEN, 1)?;
        st.serialize_field(RAW_TOKEN, &*self.0)?;
        st.end()
    }
}

// Only serde_json deserialises these (server, tests); the wasm reads with
// `FromJson`, so none of this is linked there. Asked for as serde_json's
// `RawValue` is, so that serde_json hands over the text as it came. A value
// serde buffered first (inside an internally tagged enum: a transcript
// tool item's `input`) arrives as that buffer and is written out again: the
// same JSON value, its numbers spelt as serde_json spells them and its
// objects' keys sorted (`serde_json::Value`'s order).
impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Raw;
        impl<'de> serde::de::Visitor<'de> for Raw {
            type Value = RawJson;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any valid JSON value")
            }

            // serde_json's raw value: one entry, the text.
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<RawJson, A::Error> {
                let (_, raw) = m
                    .next_entry::<serde::de::IgnoredAny, std::borrow::Cow<'de, str>>()?
                    .ok_or_else(|| serde::de::Error::custom("no raw JSON value"))?;
                Ok(RawJson(compact(&raw).into()))
            }

            fn visit_newtype_struct<E: Deserializer<'de>>(self, d: E) -> Result<RawJson, E::Error> {
                serde_json::Value::deserialize(d).map(RawJson::from)
            }
        }
        d.deserialize_newtype_struct(RAW_TOKEN, Raw)
    }
}
