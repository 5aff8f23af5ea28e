//! A byte-level, incremental `text/event-stream` parser that follows the
//! WHATWG HTML Standard §9.2.5–9.2.6 exactly.
//!
//! Bytes go in as they arrive from the network, in chunks of any size
//! (including one byte at a time); [`SseItem`]s come out in stream order.
//! Everything the standard leaves to the byte level is handled here:
//!
//! - one UTF-8 BOM is stripped at stream offset 0 only, also when it is split
//!   across chunks;
//! - CR, LF and CRLF end a line, also when the CR ends one chunk and the LF
//!   starts the next;
//! - invalid UTF-8 becomes U+FFFD exactly as a streaming `TextDecoder` would
//!   (lines are decoded whole, so a multi-byte character split across chunks
//!   is never replaced);
//! - the last event ID is committed only when a blank line ends the block,
//!   also when the block carries no data, and never for a partial block cut
//!   off by the end of the stream.
//!
//! Work is linear in the number of bytes: every byte is scanned once, and a
//! line that spans many chunks is appended to, never re-scanned.
//!
//! Memory is bounded by the maximum event size: a block whose buffered data
//! plus the line being read would exceed it is reported once as
//! [`SseError::EventTooLarge`], its bytes are dropped as they arrive, and
//! parsing resumes after the next blank line.

/// Whether a response's `Content-Type` is `text/event-stream` (any
/// parameters, any case): anything else is not a stream to parse.
pub fn is_event_stream(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    mime.eq_ignore_ascii_case("text/event-stream")
}

/// One dispatched event: the standard's `MessageEvent` `type`, `data` and
/// `lastEventId`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field of the block, or `"message"` when it had none (or
    /// an empty one).
    pub event_type: String,
    /// The `data:` lines joined with LF (the final LF removed).
    pub data: String,
    /// The last event ID as committed when this event was dispatched: sticky,
    /// it stays at the last `id:` seen until another `id:` changes it.
    pub last_event_id: String,
    /// Whether this block itself carried an accepted `id:` line (an `id`
    /// containing NUL is ignored and does not count). Lets the caller tell a
    /// durable frame from a transient one whose ID is only inherited.
    pub id_field_seen: bool,
}

/// A dispatched event as the parser holds it, lent to the `out` of
/// [`SseParser::push_borrowed`]: the same fields as [`SseEvent`], nothing
/// copied or allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// As [`SseEvent::event_type`].
    pub event_type: &'a str,
    /// As [`SseEvent::data`].
    pub data: &'a str,
    /// As [`SseEvent::last_event_id`].
    pub last_event_id: &'a str,
    /// As [`SseEvent::id_field_seen`].
    pub id_field_seen: bool,
}

impl SseEventRef<'_> {
    /// The event as an owned [`SseEvent`].
    pub fn to_event(self) -> SseEvent {
        SseEvent {
            event_type: self.event_type.to_owned(),
            data: self.data.to_owned(),
            last_event_id: self.last_event_id.to_owned(),
            id_field_seen: self.id_field_seen,
        }
    }
}

/// What the parser reports, in stream order: events owned ([`SseEvent`],
/// from [`SseParser::push`]) or borrowed ([`SseEventRef`], from
/// [`SseParser::push_borrowed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseItem<E = SseEvent> {
    /// A block ended by a blank line with a non-empty data buffer.
    Event(E),
    /// A `retry:` field whose value is all ASCII digits: the new reconnection
    /// time in milliseconds (saturating at `u64::MAX`). Reported when the line
    /// is read, without waiting for the blank line.
    Retry(u64),
    /// A problem with the stream that the parser recovered from.
    Error(SseError),
}

/// Stream problems the parser recovers from by skipping an event.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// An event block grew past the limit; it was skipped up to the next
    /// blank line and its `id` was not committed.
    #[error("event larger than {limit} bytes (at least {size} bytes seen); skipped")]
    EventTooLarge {
        /// The configured maximum event size.
        limit: usize,
        /// Bytes buffered for the block (data plus the line being read, with
        /// its line end) when the limit was crossed. Always above `limit`; how
        /// far above depends on how the bytes were chunked.
        size: usize,
    },
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Incremental parser for one `text/event-stream` body at a time.
///
/// [`finish`](Self::finish) ends a stream and keeps the committed last event
/// ID, like a browser's `EventSource` across a reconnect;
/// [`reset`](Self::reset) forgets it too. The client manages its own cursors,
/// so it can seed one with [`set_last_event_id`](Self::set_last_event_id).
#[derive(Debug, Clone)]
pub struct SseParser {
    limit: usize,
    /// Bytes of the BOM matched so far at offset 0; `None` once past it.
    bom_matched: Option<u8>,
    /// The previous byte was a CR ending a line: a LF right after it belongs
    /// to the same line end.
    pending_cr: bool,
    /// The line being read, when it spans chunks.
    line: Vec<u8>,
    /// Skipping an oversized block until the next blank line.
    skipping: bool,
    /// While skipping: the current line has bytes (so its end is not blank).
    skipped_line_nonempty: bool,
    data: String,
    event_type: String,
    /// The `id:` of the current block, committed at dispatch.
    block_id: Option<String>,
    last_event_id: String,
    /// Bytes examined by the line-end scan (tests check linearity with it).
    #[cfg(test)]
    scanned: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// Default maximum event size: 1 MiB.
    pub const DEFAULT_MAX_EVENT_SIZE: usize = 1 << 20;

    /// A parser with the default maximum event size.
    pub fn new() -> Self {
        Self::with_max_event_size(Self::DEFAULT_MAX_EVENT_SIZE)
    }

    /// A parser that skips events whose buffered bytes exceed `limit`.
    pub fn with_max_event_size(limit: usize) -> Self {
        SseParser {
            limit,
            bom_matched: Some(0),
            pending_cr: false,
            line: Vec::new(),
            skipping: false,
            skipped_line_nonempty: false,
            data: String::new(),
            event_type: String::new(),
            block_id: None,
            last_event_id: String::new(),
            #[cfg(test)]
            scanned: 0,
        }
    }

    /// The configured maximum event size.
    pub fn max_event_size(&self) -> usize {
        self.limit
    }

    /// The committed last event ID (empty until a block with `id:` ends).
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// Seeds the committed last event ID, e.g. from a stored cursor.
    pub fn set_last_event_id(&mut self, id: impl Into<String>) {
        self.last_event_id = id.into();
    }

    /// Feeds the next bytes of the stream; items are passed to `out` in order.
    pub fn push(&mut self, chunk: &[u8], out: &mut impl FnMut(SseItem)) {
        self.push_borrowed(chunk, &mut |item| {
            out(match item {
                SseItem::Event(e) => SseItem::Event(e.to_event()),
                SseItem::Retry(ms) => SseItem::Retry(ms),
                SseItem::Error(e) => SseItem::Error(e),
            })
        });
    }

    /// [`push`](Self::push) with each event lent from the parser's buffers
    /// for the call of `out`: no copy and no allocation per event (three
    /// otherwise: 8.3 % of the client's instructions per streamed event,
    /// `docs/benchmarks.md`).
    pub fn push_borrowed(&mut self, chunk: &[u8], out: &mut impl FnMut(SseItem<SseEventRef<'_>>)) {
        self.push_dyn(chunk, out);
    }

    /// The parser itself, compiled once for every caller (the machine's
    /// stream and the multiplexed one's hub), not once per closure type: a
    /// call through `dyn` per event costs nothing beside reading it, and a
    /// second copy was ~1.8 KB of the browser package (docs/size.md).
    fn push_dyn(&mut self, chunk: &[u8], out: &mut dyn FnMut(SseItem<SseEventRef<'_>>)) {
        let mut chunk = chunk;
        if let Some(matched) = self.bom_matched {
            let mut m = usize::from(matched);
            while m < BOM.len() {
                match chunk.first() {
                    None => {
                        self.bom_matched = Some(m as u8);
                        return;
                    }
                    Some(&b) if b == BOM[m] => {
                        m += 1;
                        chunk = &chunk[1..];
                    }
                    Some(_) => break,
                }
            }
            self.bom_matched = None;
            if m < BOM.len() {
                // Not a BOM after all: the bytes held back are content.
                self.feed(&BOM[..m], out);
            }
        }
        self.feed(chunk, out);
    }

    /// Ends the stream: a partial block is discarded (its `id` never
    /// committed) and the parser is ready for the next stream, at offset 0.
    /// The committed last event ID is kept.
    pub fn finish(&mut self) {
        self.bom_matched = Some(0);
        self.pending_cr = false;
        self.line.clear();
        self.skipping = false;
        self.skipped_line_nonempty = false;
        self.clear_block();
    }

    /// Fresh state for a new connection: like [`finish`](Self::finish), and
    /// the committed last event ID is cleared too. The limit is kept.
    pub fn reset(&mut self) {
        self.finish();
        self.last_event_id.clear();
    }

    fn clear_block(&mut self) {
        self.data.clear();
        self.event_type.clear();
        self.block_id = None;
    }

    /// Splits `input` (BOM already handled) into lines.
    fn feed(&mut self, mut input: &[u8], out: &mut dyn FnMut(SseItem<SseEventRef<'_>>)) {
        if self.pending_cr {
            let Some(&first) = input.first() else { return };
            self.pending_cr = false;
            if first == b'\n' {
                input = &input[1..];
            }
        }
        while !input.is_empty() {
            let Some(end) = find_line_end(input) else {
                #[cfg(test)]
                {
                    self.scanned += input.len();
                }
                self.partial_line(input, out);
                return;
            };
            #[cfg(test)]
            {
                self.scanned += end + 1;
            }
            let cr = input[end] == b'\r';
            if self.line.is_empty() {
                self.complete_line(&input[..end], out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&input[..end]);
                self.complete_line(&line, out);
                line.clear();
                self.line = line;
            }
            input = &input[end + 1..];
            if cr {
                match input.first() {
                    None => self.pending_cr = true,
                    Some(b'\n') => input = &input[1..],
                    Some(_) => {}
                }
            }
        }
    }

    /// The start or middle of a line whose end has not arrived yet.
    fn partial_line(&mut self, bytes: &[u8], out: &mut dyn FnMut(SseItem<SseEventRef<'_>>)) {
        if self.skipping {
            self.skipped_line_nonempty = true;
            return;
        }
        let size = self.data.len() + self.line.len() + bytes.len() + 1;
        if size > self.limit {
            self.line.clear();
            self.start_skipping(size, out);
            self.skipped_line_nonempty = true;
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    fn start_skipping(&mut self, size: usize, out: &mut dyn FnMut(SseItem<SseEventRef<'_>>)) {
        self.clear_block();
        self.skipping = true;
        out(SseItem::Error(SseError::EventTooLarge {
            limit: self.limit,
            size,
        }));
    }

    /// One whole line, without its line end.
    fn complete_line(&mut self, line: &[u8], out: &mut dyn FnMut(SseItem<SseEventRef<'_>>)) {
        if self.skipping {
            if line.is_empty() && !self.skipped_line_nonempty {
                self.skipping = false;
            }
            self.skipped_line_nonempty = false;
            return;
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        let size = self.data.len() + line.len() + 1;
        if size > self.limit {
            self.start_skipping(size, out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &line[line.len()..]),
        };
        match name {
            b"data" => {
                push_utf8(&mut self.data, value);
                self.data.push('\n');
            }
            b"event" => {
                self.event_type.clear();
                push_utf8(&mut self.event_type, value);
            }
            // An id containing NUL is ignored (the earlier one stands).
            b"id" if !value.contains(&0) => {
                let mut id = self.block_id.take().unwrap_or_default();
                id.clear();
                push_utf8(&mut id, value);
                self.block_id = Some(id);
            }
            // Only a non-empty all-digit value counts; anything else is ignored.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                let ms = value.iter().fold(0u64, |acc, &d| {
                    acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                out(SseItem::Retry(ms));
            }
            _ => {}
        }
    }

    /// A blank line: commit the block's id, then dispatch if there is data.
    fn dispatch(&mut self, out: &mut dyn FnMut(SseItem<SseEventRef<'_>>)) {
        let id_field_seen = match self.block_id.take() {
            Some(id) => {
                self.last_event_id = id;
                true
            }
            None => false,
        };
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        self.data.pop(); // the LF after the last data line
        let event_type = match self.event_type.as_str() {
            "" => "message",
            named => named,
        };
        out(SseItem::Event(SseEventRef {
            event_type,
            data: &self.data,
            last_event_id: &self.last_event_id,
            id_field_seen,
        }));
        // Cleared, not dropped: the buffers keep their capacity.
        self.clear_block();
    }
}

/// Index of the first CR or LF. `memchr2` scans a word (or SIMD vector) at
/// a time: about 1.5x the throughput of a byte loop in `benches/sse_parse.rs`.
#[inline]
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', bytes)
}

/// Appends `bytes` decoded as UTF-8, invalid sequences as U+FFFD (the
/// WHATWG "maximal subpart" rule, which `from_utf8_lossy` implements).
#[inline]
fn push_utf8(dst: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => dst.push_str(s),
        Err(_) => dst.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests;
