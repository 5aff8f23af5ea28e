//! A compact JSON writer behind `serde::Serialize`: what the wasm uses to
//! persist its state and to hand views to JS. serde_json's writer brought
//! ~20 KB of wasm (float formatting, io errors, its error type); this one
//! writes the same text for the client's types in a few KB.
//!
//! Output matches `serde_json::to_string` for everything the client writes:
//! same escapes, map keys as strings, and [`RawJson`](super::RawJson) spliced
//! in verbatim (recognised by serde_json's raw-value token, so both writers
//! agree).

use serde::ser::{self, Serialize};

/// Why a value could not be written (only for shapes JSON cannot hold).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot write JSON: {0}")]
pub struct WriteError(String);

impl ser::Error for WriteError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        WriteError(msg.to_string())
    }
}

/// The struct name serde_json gives `RawValue`: a struct of that name with
/// one field of that name holding a string is written as the string's text.
pub(crate) const RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// Writes `value` as compact JSON.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, WriteError> {
    let mut out = String::with_capacity(128);
    value.serialize(&mut Writer { out: &mut out })?;
    Ok(out)
}

/// Bytes a JSON string cannot hold as they are: controls, `"` and `\\`.
pub(crate) const ESCAPED: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The index of the first byte of `b` at or after `from` that a JSON string
/// cannot hold as it is (see [`ESCAPED`]), or `b.len()`. The hot loop of
/// every page read and of every restore handed to JS: eight bytes per step
/// (SWAR), then the table for the last few.
pub(crate) fn plain_until(b: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Flags a byte of `x` below `n` (n <= 0x80); the lowest flag is exact.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let mut i = from;
    while let Some(chunk) = b.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let hits = below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1);
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(|&c| !ESCAPED[c as usize]) {
        i += 1;
    }
    i
}

/// Writes a JSON string literal (quotes and escapes) to `out`.
pub fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    loop {
        let i = plain_until(bytes, run);
        let Some(&b) = bytes.get(i) else { break };
        out.push_str(&s[run..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 15) as usize] as char);
            }
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

fn write_u64(out: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

fn write_i64(out: &mut String, v: i64) {
    if v < 0 {
        out.push('-');
    }
    write_u64(out, v.unsigned_abs());
}

/// Small integers are written as their 64-bit forms.
macro_rules! widen_ints {
    () => {
        fn serialize_i8(self, v: i8) -> Result<(), WriteError> {
            self.serialize_i64(v.into())
        }
        fn serialize_i16(self, v: i16) -> Result<(), WriteError> {
            self.serialize_i64(v.into())
        }
        fn serialize_i32(self, v: i32) -> Result<(), WriteError> {
            self.serialize_i64(v.into())
        }
        fn serialize_u8(self, v: u8) -> Result<(), WriteError> {
            self.serialize_u64(v.into())
        }
        fn serialize_u16(self, v: u16) -> Result<(), WriteError> {
            self.serialize_u64(v.into())
        }
        fn serialize_u32(self, v: u32) -> Result<(), WriteError> {
            self.serialize_u64(v.into())
        }
    };
}

struct Writer<'a> {
    out: &'a mut String,
}

/// An open array, object or raw splice.
#[doc(hidden)]
pub struct Compound<'w, 'a> {
    w: &'w mut Writer<'a>,
    first: bool,
    /// What closes it: `]`, `}`, or `}}`/`]}` after an enum variant.
    close: &'static str,
    raw: bool,
}

impl Compound<'_, '_> {
    fn sep(&mut self) {
        if !self.first {
            self.w.out.push(',');
        }
        self.first = false;
    }

    fn key(&mut self, key: &str) {
        self.sep();
        write_str(self.w.out, key);
        self.w.out.push(':');
    }
}

impl<'w, 'a> Writer<'a> {
    fn open(&'w mut self, open: &str, close: &'static str) -> Compound<'w, 'a> {
        self.out.push_str(open);
        Compound {
            w: self,
            first: true,
            close,
            raw: false,
        }
    }

    /// `{"variant":` … `}` around an enum's newtype/tuple/struct variant.
    fn variant(&mut self, variant: &str) {
        self.out.push('{');
        write_str(self.out, variant);
        self.out.push(':');
    }
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = WriteError;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, v: bool) -> Result<(), WriteError> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    widen_ints!();
    fn serialize_i64(self, v: i64) -> Result<(), WriteError> {
        write_i64(self.out, v);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), WriteError> {
        write_u64(self.out, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), WriteError> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<(), WriteError> {
        // The client's types hold no floats; whole numbers are written (as
        // serde_json does, with `.0`) without float formatting code, anything
        // else is refused.
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
            write_i64(self.out, v as i64);
            self.out.push_str(".0");
            Ok(())
        } else {
            Err(WriteError("non-integer number".into()))
        }
    }
    fn serialize_char(self, v: char) -> Result<(), WriteError> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), WriteError> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), WriteError> {
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<(), WriteError> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), WriteError> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), WriteError> {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), WriteError> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
    ) -> Result<(), WriteError> {
        self.serialize_str(v)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), WriteError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), WriteError> {
        self.variant(variant);
        v.serialize(&mut *self)?;
        self.out.push('}');
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'w, 'a>, WriteError> {
        Ok(self.open("[", "]"))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'w, 'a>, WriteError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, WriteError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'w, 'a>, WriteError> {
        self.variant(variant);
        Ok(self.open("[", "]}"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'w, 'a>, WriteError> {
        Ok(self.open("{", "}"))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _: usize,
    ) -> Result<Compound<'w, 'a>, WriteError> {
        if name == RAW_TOKEN {
            return Ok(Compound {
                w: self,
                first: true,
                close: "",
                raw: true,
            });
        }
        Ok(self.open("{", "}"))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'w, 'a>, WriteError> {
        self.variant(variant);
        Ok(self.open("{", "}}"))
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), WriteError> {
        self.sep();
        v.serialize(&mut *self.w)
    }
    fn end(self) -> Result<(), WriteError> {
        self.w.out.push_str(self.close);
        Ok(())
    }
}

/// Tuples of every kind are written as arrays.
macro_rules! as_seq {
    ($($trait:ident::$method:ident),*) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = WriteError;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), WriteError> {
                ser::SerializeSeq::serialize_element(self, v)
            }
            fn end(self) -> Result<(), WriteError> {
                ser::SerializeSeq::end(self)
            }
        }
    )*};
}

as_seq!(
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), WriteError> {
        self.sep();
        key.serialize(KeyWriter(self.w.out))?;
        self.w.out.push(':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), WriteError> {
        v.serialize(&mut *self.w)
    }
    fn end(self) -> Result<(), WriteError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), WriteError> {
        if self.raw {
            // The raw text was validated when the RawJson was made.
            return v.serialize(RawWriter(self.w.out));
        }
        self.key(key);
        v.serialize(&mut *self.w)
    }
    fn end(self) -> Result<(), WriteError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), WriteError> {
        ser::SerializeStruct::serialize_field(self, key, v)
    }
    fn end(self) -> Result<(), WriteError> {
        ser::SerializeSeq::end(self)
    }
}

/// `Serializer` methods that refuse their input with `$what`.
macro_rules! refuse {
    ($what:literal; $($method:ident($($arg:ty),*) -> $ret:ty),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<$ret, WriteError> {
            Err(WriteError($what.into()))
        })*
    };
}

/// The compound half of a `Serializer` that writes only scalars.
macro_rules! no_compounds {
    ($what:literal) => {
        type SerializeSeq = ser::Impossible<(), WriteError>;
        type SerializeTuple = ser::Impossible<(), WriteError>;
        type SerializeTupleStruct = ser::Impossible<(), WriteError>;
        type SerializeTupleVariant = ser::Impossible<(), WriteError>;
        type SerializeMap = ser::Impossible<(), WriteError>;
        type SerializeStruct = ser::Impossible<(), WriteError>;
        type SerializeStructVariant = ser::Impossible<(), WriteError>;
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), WriteError> {
            Err(WriteError($what.into()))
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<(), WriteError> {
            Err(WriteError($what.into()))
        }
        refuse!($what;
            serialize_seq(Option<usize>) -> Self::SerializeSeq,
            serialize_tuple(usize) -> Self::SerializeTuple,
            serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct,
            serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant,
            serialize_map(Option<usize>) -> Self::SerializeMap,
            serialize_struct(&'static str, usize) -> Self::SerializeStruct,
            serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant,
        );
    };
}

/// Map keys: strings as they are, integers quoted (as serde_json does).
struct KeyWriter<'a>(&'a mut String);

impl ser::Serializer for KeyWriter<'_> {
    type Ok = ();
    type Error = WriteError;
    no_compounds!("map keys must be strings or integers");
    refuse!("map keys must be strings or integers";
        serialize_bool(bool) -> (),
        serialize_f32(f32) -> (),
        serialize_f64(f64) -> (),
        serialize_char(char) -> (),
        serialize_bytes(&[u8]) -> (),
        serialize_none() -> (),
        serialize_unit() -> (),
        serialize_unit_struct(&'static str) -> ());

    fn serialize_str(self, v: &str) -> Result<(), WriteError> {
        write_str(self.0, v);
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
    ) -> Result<(), WriteError> {
        self.serialize_str(v)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), WriteError> {
        v.serialize(self)
    }
    widen_ints!();
    fn serialize_i64(self, v: i64) -> Result<(), WriteError> {
        self.0.push('"');
        write_i64(self.0, v);
        self.0.push('"');
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), WriteError> {
        self.0.push('"');
        write_u64(self.0, v);
        self.0.push('"');
        Ok(())
    }
}

/// The string inside a raw-value struct, spliced in as JSON text.
struct RawWriter<'a>(&'a mut String);

impl ser::Serializer for RawWriter<'_> {
    type Ok = ();
    type Error = WriteError;
    no_compounds!("a raw JSON value must be a string");
    refuse!("a raw JSON value must be a string";
        serialize_bool(bool) -> (),
        serialize_f32(f32) -> (),
        serialize_f64(f64) -> (),
        serialize_char(char) -> (),
        serialize_bytes(&[u8]) -> (),
        serialize_none() -> (),
        serialize_unit() -> (),
        serialize_unit_struct(&'static str) -> (),
        serialize_i8(i8) -> (),
        serialize_i16(i16) -> (),
        serialize_i32(i32) -> (),
        serialize_i64(i64) -> (),
        serialize_u8(u8) -> (),
        serialize_u16(u16) -> (),
        serialize_u32(u32) -> (),
        serialize_u64(u64) -> ());

    fn serialize_str(self, v: &str) -> Result<(), WriteError> {
        self.0.push_str(v);
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), WriteError> {
        Err(WriteError("a raw JSON value must be a string".into()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), WriteError> {
        v.serialize(self)
    }
}

#[cfg(test)]
mod tests;
