//! A small JSON pull reader for what the client decodes on every frame and
//! page. serde_json's derived decoders cost 2–5 KB of wasm per type; this
//! reader is shared by all types, so each one adds only its field match.
//!
//! Semantics follow serde's derives: unknown keys are skipped, `null` reads
//! as `None` for options, missing fields either fail (required) or take
//! their default. The wire types get both from one declaration
//! ([`wire_struct!`](crate::wire_struct) and friends, `json/schema.rs`).

use std::borrow::Cow;
use std::collections::VecDeque;

#[cfg(all(test, not(target_arch = "wasm32")))]
pub(crate) mod arb;
mod raw;
mod schema;
mod write;

pub use raw::RawJson;
pub use write::{to_string, write_str, WriteError};

/// Why a JSON text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at this byte offset.
    #[error("invalid JSON at byte {0}")]
    Syntax(usize),
    /// A value of the wrong kind at this byte offset.
    #[error("expected {1} at byte {0}")]
    Type(usize, &'static str),
    /// A required key is absent.
    #[error("missing field `{0}`")]
    Missing(&'static str),
}

/// Types that can be read from JSON by [`Reader`].
pub trait FromJson: Sized {
    /// Reads one value.
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError>;

    /// Reads one value over `self`, reusing what it holds (a string's
    /// buffer) where the type can: a stream's thousands of like events
    /// then allocate nothing. On an error `self` is left half-read.
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        *self = Self::read(r)?;
        Ok(())
    }

    /// Whether this is an `Option`. serde reads a missing `Option` field as
    /// `None`; a wire declaration must say `= default` for such a field, and
    /// [`wire_struct!`](crate::wire_struct) refuses to compile one that does not.
    const OPTIONAL: bool = false;

    /// Whether a `Vec` or an `Option` holding this type reads a value over
    /// the one it holds ([`FromJson::read_into`]) rather than anew: true
    /// where that reuses buffers on a hot path (a backlog page's envelopes,
    /// a delta's strings). For the others no in-place reader is compiled:
    /// for a page's nested structs those weighed ~1.4 KB gz of wasm.
    const READ_OVER: bool = false;
}

/// A struct field being read, whatever its type (see [`Reader::fields`]).
pub trait Slot {
    /// Reads the value into the slot.
    fn fill(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError>;
    /// Whether a value was read into it.
    fn filled(&self) -> bool;
}

/// A struct's own field as a [`Slot`], read over in place
/// ([`FromJson::read_into`]).
pub struct InPlace<'a, T>(pub &'a mut T, pub bool);

impl<T: FromJson> Slot for InPlace<'_, T> {
    fn fill(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        self.0.read_into(r)?;
        self.1 = true;
        Ok(())
    }

    fn filled(&self) -> bool {
        self.1
    }
}

impl<T: FromJson> Slot for Option<T> {
    fn fill(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        *self = Some(T::read(r)?);
        Ok(())
    }

    fn filled(&self) -> bool {
        self.is_some()
    }
}

/// Reads a whole text as one `T` (only whitespace may follow).
pub fn from_str<T: FromJson>(s: &str) -> Result<T, JsonError> {
    read_all(Reader::new(s))
}

/// Reads UTF-8 bytes as one `T`.
pub fn from_slice<T: FromJson>(b: &[u8]) -> Result<T, JsonError> {
    from_str(utf8(b)?)
}

/// [`from_str`], keeping event payloads opaque: every envelope but `hello`
/// and `heartbeat` is read as [`Event::Unknown`](crate::protocol::Event)
/// with its `data` as text. For logs, which show payloads but never look
/// inside them.
pub fn from_str_opaque<T: FromJson>(s: &str) -> Result<T, JsonError> {
    from_str_with(s, Payloads::Opaque)
}

/// [`from_str`], decoding the event payloads that `payloads` says.
pub fn from_str_with<T: FromJson>(s: &str, payloads: Payloads) -> Result<T, JsonError> {
    let mut r = Reader::new(s);
    r.payloads = payloads;
    read_all(r)
}

/// Reads a whole text over `value` ([`FromJson::read_into`]), decoding the
/// event payloads that `payloads` says. On an error `value` is left
/// half-read.
pub fn read_over<T: FromJson>(s: &str, value: &mut T, payloads: Payloads) -> Result<(), JsonError> {
    let mut r = Reader::new(s);
    r.payloads = payloads;
    value.read_into(&mut r)?;
    r.end()
}

/// Which event payloads a reader decodes into types (`hello` and
/// `heartbeat` always are: every machine looks inside them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Payloads {
    /// Every known type: what a session's client reads.
    #[default]
    Typed,
    /// None: kept as text ([`from_str_opaque`]), what a log's client
    /// reads (it shows payloads but never looks inside them).
    Opaque,
    /// A session's typed, every other scope's as text: what each scope's
    /// client reads. The share hub reads a multiplexed stream so, and hands
    /// each machine its events read once.
    AsTheirClients,
}

/// Checks that bytes are UTF-8 (what every reading starts with).
pub fn utf8(b: &[u8]) -> Result<&str, JsonError> {
    std::str::from_utf8(b).map_err(|e| JsonError::Syntax(e.valid_up_to()))
}

fn read_all<T: FromJson>(mut r: Reader<'_>) -> Result<T, JsonError> {
    let v = T::read(&mut r)?;
    r.end()?;
    Ok(v)
}

// serde_json's limit too: deeper nesting is refused rather than overflowing
// the stack. An envelope counts from its own root ([`Reader::enter_root`]).
const MAX_DEPTH: u32 = 128;

/// A cursor over one JSON text.
pub struct Reader<'a> {
    s: &'a str,
    pos: usize,
    depth: u32,
    payloads: Payloads,
    /// [`Reader::tag`] consumed an object's `{` and first member: the next
    /// object read continues that object.
    resume: bool,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `s`.
    pub fn new(s: &'a str) -> Self {
        Reader {
            s,
            pos: 0,
            depth: 0,
            payloads: Payloads::Typed,
            resume: false,
        }
    }

    /// Which event payloads are decoded into types.
    pub fn payloads(&self) -> Payloads {
        self.payloads
    }

    /// Byte offset of the next unread character.
    pub fn pos(&self) -> usize {
        self.pos
    }

    fn peek(&mut self) -> Option<u8> {
        let b = self.s.as_bytes();
        while let Some(&c) = b.get(self.pos) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
            self.pos += 1;
        }
        None
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.pos += hit as usize;
        hit
    }

    fn word(&mut self, w: &str) -> bool {
        let hit = self.s.as_bytes()[self.pos..].starts_with(w.as_bytes());
        if hit {
            self.pos += w.len();
        }
        hit
    }

    fn syntax(&self) -> JsonError {
        JsonError::Syntax(self.pos)
    }

    fn kind(&self, what: &'static str) -> JsonError {
        JsonError::Type(self.pos, what)
    }

    /// Fails unless only whitespace is left.
    pub fn end(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.syntax()),
        }
    }

    /// Consumes a `null` if one is next.
    pub fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.word("null")
    }

    /// Reads an object, calling `f` with each key; `f` must read the value.
    pub fn object(
        &mut self,
        f: &mut dyn FnMut(&mut Reader<'a>, &str) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        self.keyed(|r, key| f(r, key).map(|()| true))
    }

    /// Reads an object's members while `f`, given each key, returns true;
    /// `f` reads the value before it does. Once `f` returns false (its value
    /// read or not) the rest is left unread and the reader is spent: for a
    /// value's head, when the rest may be megabytes.
    pub fn object_while(
        &mut self,
        f: &mut dyn FnMut(&mut Reader<'a>, &str) -> Result<bool, JsonError>,
    ) -> Result<(), JsonError> {
        self.keyed(f)
    }

    /// An object's members as `key:` then `f` (see [`Reader::members`]).
    fn keyed(
        &mut self,
        mut f: impl FnMut(&mut Reader<'a>, &str) -> Result<bool, JsonError>,
    ) -> Result<(), JsonError> {
        self.members(b'{', b'}', "an object", |r| {
            if r.peek() != Some(b'"') {
                return Err(r.syntax());
            }
            let key = r.string()?;
            if !r.eat(b':') {
                return Err(r.syntax());
            }
            f(r, &key)
        })
    }

    /// Reads an object field by field: the value of `keys[i]` fills
    /// `slots[i]`, other keys are skipped; then a slot left empty where
    /// `required[i]` is [`JsonError::Missing`] of its key. One loop for
    /// every struct ([`json_struct!`](crate::json_struct)): per-struct
    /// matches cost ~2x the bytes, and per-field checks 1 KB gz of package.
    pub fn fields(
        &mut self,
        keys: &[&'static str],
        required: &[bool],
        slots: &mut [&mut dyn Slot],
    ) -> Result<(), JsonError> {
        self.object(&mut |r, key| match keys.iter().position(|k| *k == key) {
            Some(i) => slots[i].fill(r),
            None => r.skip(),
        })?;
        match (0..slots.len()).find(|&i| required[i] && !slots[i].filled()) {
            Some(i) => Err(JsonError::Missing(keys[i])),
            None => Ok(()),
        }
    }

    /// Reads the string value of key `tag` of the object ahead, and leaves
    /// the reader so that the next [`Reader::object`] (or [`Reader::fields`])
    /// reads that object's members (`tag` among them, to be skipped, unless
    /// it came first). For internally tagged enums
    /// ([`wire_tagged!`](crate::wire_tagged)): when the tag is the first key,
    /// as writers put it, the object is read once; elsewhere, twice.
    pub fn tag(&mut self, tag: &'static str) -> Result<Cow<'a, str>, JsonError> {
        self.peek();
        let start = self.pos;
        if self.eat(b'{') && self.peek() == Some(b'"') && self.string()? == tag && self.eat(b':') {
            let value = self.string()?;
            self.resume = true;
            return Ok(value);
        }
        self.pos = start;
        let mut value = None;
        self.object(&mut |r, key| {
            if key == tag {
                value = Some(r.string()?.into_owned());
                Ok(())
            } else {
                r.skip()
            }
        })?;
        self.pos = start;
        value.map(Cow::Owned).ok_or(JsonError::Missing(tag))
    }

    /// Reads an array, calling `f` once per element; `f` must read it.
    pub fn array(
        &mut self,
        f: &mut dyn FnMut(&mut Reader<'a>) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        self.members(b'[', b']', "an array", |r| f(r).map(|()| true))
    }

    /// The comma-separated members between `open` and `close`, while
    /// `member` returns true (false: the rest is left unread).
    fn members(
        &mut self,
        open: u8,
        close: u8,
        what: &'static str,
        mut member: impl FnMut(&mut Reader<'a>) -> Result<bool, JsonError>,
    ) -> Result<(), JsonError> {
        // After `tag`, the object is open and its first member read.
        let resumed = std::mem::take(&mut self.resume);
        if !resumed && !self.eat(open) {
            return Err(self.kind(what));
        }
        self.nest()?;
        let mut go_on = resumed || !self.eat(close) && member(self)?;
        while go_on && !self.eat(close) {
            if !self.eat(b',') {
                return Err(self.syntax());
            }
            go_on = member(self)?;
        }
        self.depth -= 1;
        Ok(())
    }

    /// Counts nesting from the value ahead, as if it were the whole text,
    /// until [`Reader::leave_root`] is given what this returns: an event
    /// nests as deep inside a page as alone on the stream. Only for values
    /// that cannot hold themselves (an envelope), so the stack still holds
    /// at most the container's few levels plus [`MAX_DEPTH`].
    pub fn enter_root(&mut self) -> u32 {
        std::mem::take(&mut self.depth)
    }

    /// Counts nesting from the container again (see [`Reader::enter_root`]).
    pub fn leave_root(&mut self, outer: u32) {
        self.depth = outer;
    }

    fn nest(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.syntax());
        }
        Ok(())
    }

    /// Reads a string, borrowed when it has no escapes.
    pub fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        if !self.eat(b'"') {
            return Err(self.kind("a string"));
        }
        let b = self.s.as_bytes();
        let start = self.pos;
        let mut owned: Option<String> = None;
        let mut run = start;
        loop {
            self.pos = write::plain_until(b, self.pos);
            let Some(&c) = b.get(self.pos) else {
                return Err(self.syntax());
            };
            match c {
                b'"' => {
                    let tail = &self.s[run..self.pos];
                    self.pos += 1;
                    return Ok(match owned {
                        None => Cow::Borrowed(tail),
                        Some(mut o) => {
                            o.push_str(tail);
                            Cow::Owned(o)
                        }
                    });
                }
                b'\\' => {
                    let o = owned.get_or_insert_with(String::new);
                    o.push_str(&self.s[run..self.pos]);
                    self.pos += 1;
                    let e = b.get(self.pos).copied();
                    self.pos += 1;
                    o.push(match e {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => return Err(JsonError::Syntax(self.pos - 1)),
                    });
                    run = self.pos;
                }
                // A raw control character.
                _ => return Err(self.syntax()),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let h = self.s.get(self.pos..self.pos + 4).ok_or(self.syntax())?;
        let v = u32::from_str_radix(h, 16).map_err(|_| self.syntax())?;
        // from_str_radix accepts a leading '+'; JSON does not.
        if h.starts_with('+') {
            return Err(self.syntax());
        }
        self.pos += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let hi = self.hex4()?;
        let code = match hi {
            0xD800..=0xDBFF => {
                if !self.word("\\u") {
                    return Err(self.syntax());
                }
                let lo = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return Err(self.syntax());
                }
                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
            }
            _ => hi,
        };
        char::from_u32(code).ok_or(self.syntax())
    }

    /// Reads an integer; fractions and exponents are refused.
    fn integer(&mut self, signed: bool) -> Result<(bool, u64), JsonError> {
        let at = match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.pos,
            _ => return Err(self.kind("an integer")),
        };
        let neg = self.s.as_bytes()[at] == b'-';
        self.pos += neg as usize;
        let digits = self.pos;
        let mut v: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.s.as_bytes().get(self.pos).copied() {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or(JsonError::Type(at, "a smaller number"))?;
            self.pos += 1;
        }
        let n = self.pos - digits;
        if n == 0 || (n > 1 && self.s.as_bytes()[digits] == b'0') {
            return Err(JsonError::Syntax(at));
        }
        if matches!(self.s.as_bytes().get(self.pos), Some(b'.' | b'e' | b'E')) {
            return Err(JsonError::Type(at, "an integer"));
        }
        if neg && !signed && v != 0 {
            return Err(JsonError::Type(at, "an unsigned integer"));
        }
        Ok((neg, v))
    }

    /// Skips one value of any kind.
    pub fn skip(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            Some(b'{') => self.object(&mut |r, _| r.skip()),
            Some(b'[') => self.array(&mut |r| r.skip()),
            Some(b'"') => self.string().map(drop),
            Some(b't') if self.word("true") => Ok(()),
            Some(b'f') if self.word("false") => Ok(()),
            Some(b'n') if self.word("null") => Ok(()),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.syntax()),
        }
    }

    fn number(&mut self) -> Result<(), JsonError> {
        let b = self.s.as_bytes();
        let at = self.pos;
        self.pos += (b[self.pos] == b'-') as usize;
        let digits = |r: &mut Self| {
            let from = r.pos;
            while b.get(r.pos).is_some_and(u8::is_ascii_digit) {
                r.pos += 1;
            }
            r.pos - from
        };
        let int_at = self.pos;
        let n = digits(self);
        if n == 0 || (n > 1 && b[int_at] == b'0') {
            return Err(JsonError::Syntax(at));
        }
        if b.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(JsonError::Syntax(at));
            }
        }
        if matches!(b.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            self.pos += matches!(b.get(self.pos), Some(b'+' | b'-')) as usize;
            if digits(self) == 0 {
                return Err(JsonError::Syntax(at));
            }
        }
        Ok(())
    }

    /// Skips one value and returns its text.
    pub fn raw(&mut self) -> Result<&'a str, JsonError> {
        self.peek();
        let start = self.pos;
        self.skip()?;
        Ok(&self.s[start..self.pos])
    }
}

impl FromJson for String {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        r.string().map(Cow::into_owned)
    }

    const READ_OVER: bool = true;

    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        let s = r.string()?;
        self.clear();
        self.push_str(&s);
        Ok(())
    }
}

impl FromJson for u64 {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        r.integer(false).map(|(_, v)| v)
    }
}

impl FromJson for i64 {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let at = r.pos;
        let (neg, v) = r.integer(true)?;
        let v = if neg {
            0i64.checked_sub_unsigned(v)
        } else {
            i64::try_from(v).ok()
        };
        v.ok_or(JsonError::Type(at, "a smaller number"))
    }
}

impl FromJson for bool {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        match r.peek() {
            Some(b't') if r.word("true") => Ok(true),
            Some(b'f') if r.word("false") => Ok(false),
            _ => Err(r.kind("a boolean")),
        }
    }
}

impl<T: FromJson> FromJson for Option<T> {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        if r.null() {
            return Ok(None);
        }
        T::read(r).map(Some)
    }

    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        match self {
            _ if r.null() => *self = None,
            Some(value) if T::READ_OVER => value.read_into(r)?,
            _ => *self = Some(T::read(r)?),
        }
        Ok(())
    }

    const OPTIONAL: bool = true;
}

impl<T: FromJson> FromJson for Vec<T> {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let mut v = Vec::new();
        r.array(&mut |r| {
            v.push(T::read(r)?);
            Ok(())
        })?;
        Ok(v)
    }

    /// Element `i` is read over the `i`th held (see
    /// [`FromJson::READ_OVER`]), and the rest dropped: a backlog page
    /// read over the one before allocates only what its events give the
    /// view.
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), JsonError> {
        let mut n = 0;
        r.array(&mut |r| {
            match self.get_mut(n) {
                Some(held) if T::READ_OVER => held.read_into(r)?,
                Some(held) => *held = T::read(r)?,
                None => self.push(T::read(r)?),
            }
            n += 1;
            Ok(())
        })?;
        self.truncate(n);
        Ok(())
    }
}

impl FromJson for usize {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        let at = r.pos;
        let v = u64::read(r)?;
        usize::try_from(v).map_err(|_| JsonError::Type(at, "a smaller number"))
    }
}

impl<T: FromJson> FromJson for VecDeque<T> {
    fn read(r: &mut Reader<'_>) -> Result<Self, JsonError> {
        Vec::read(r).map(VecDeque::from)
    }
}

/// `FromJson` for a struct whose JSON keys are its field names (or
/// `field = "key"`). Each field is
/// `req` (missing fails) or `def` (missing takes `Default::default()`, and
/// an `Option` is `None`, as serde does).
#[macro_export]
#[doc(hidden)]
macro_rules! json_struct {
    ($ty:ident { $( $field:ident $(= $key:literal)? : $mode:ident ),* $(,)? }) => {
        impl $crate::json::FromJson for $ty {
            fn read(r: &mut $crate::json::Reader<'_>) -> Result<Self, $crate::json::JsonError> {
                $( let mut $field = None; )*
                let slots: &mut [&mut dyn $crate::json::Slot] = &mut [$( &mut $field ),*];
                r.fields(
                    &[$( $crate::json_struct!(@key $field $($key)?) ),*],
                    &[$( $crate::json_struct!(@required $mode) ),*],
                    slots,
                )?;
                Ok($ty { $( $field: $crate::json_struct!(@take $mode $field), )* })
            }
        }
    };
    (@key $field:ident) => { stringify!($field) };
    (@key $field:ident $key:literal) => { $key };
    (@required req) => { true };
    (@required def) => { false };
    // `fields` has checked that a required slot is filled.
    (@take req $field:ident) => {
        match $field {
            Some(value) => value,
            None => unreachable!(),
        }
    };
    (@take def $field:ident) => {
        $field.unwrap_or_default()
    };
}

#[cfg(test)]
mod tests;
