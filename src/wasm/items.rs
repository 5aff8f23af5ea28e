//! Transcript items handed to JS in one crossing per batch (see
//! `buildItems` in `browser.js`): their strings as one UTF-8 buffer, decoded
//! once in JS, and a layout of kinds and UTF-16 end offsets. Serialising to
//! JSON and parsing it again cost ~20 ms for a 10 000-event restore; this is
//! a few.

use js_sys::Array;
use wasm_bindgen::prelude::*;

use crate::core::protocol::TranscriptItem;

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[wasm_bindgen(js_name = buildItems)]
    fn build_items(text: &[u8], layout: &[u32]) -> Array;
}

/// The layout's mark of a null string (`browser.js` agrees).
const NONE: u32 = u32::MAX;

#[derive(Default)]
struct Batch {
    text: Vec<u8>,
    layout: Vec<u32>,
    /// UTF-16 length of `text`: what JS string offsets count.
    units: u32,
}

impl Batch {
    fn str(&mut self, s: &str) {
        self.text.extend_from_slice(s.as_bytes());
        self.units += utf16_len(s);
        self.layout.push(self.units);
    }

    fn opt(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.layout.push(NONE),
        }
    }

    fn item(&mut self, item: &TranscriptItem) {
        match item {
            TranscriptItem::Message {
                message_id,
                turn_id,
                role,
                text,
            } => {
                self.layout.push(0);
                self.str(message_id);
                self.str(turn_id);
                self.str(role.as_str());
                self.str(text);
            }
            TranscriptItem::Tool {
                call_id,
                turn_id,
                name,
                status,
                output,
                input,
            } => {
                self.layout.push(1);
                self.str(call_id);
                self.str(turn_id);
                self.str(name);
                self.str(status);
                self.opt(output.as_deref());
                // JSON text, parsed in JS.
                self.str(input.as_str());
            }
            TranscriptItem::TurnEnd {
                turn_id,
                outcome,
                reason,
            } => {
                self.layout.push(2);
                self.str(turn_id);
                self.str(outcome);
                self.opt(reason.as_deref());
            }
            TranscriptItem::Question {
                question_id,
                turn_id,
                prompt,
                outcome,
                answer,
                reason,
            } => {
                self.layout.push(3);
                self.str(question_id);
                self.str(turn_id);
                self.str(prompt);
                self.str(outcome);
                self.opt(answer.as_deref());
                self.opt(reason.as_deref());
            }
        }
    }
}

/// UTF-16 code units of `s`: one per UTF-8 leading byte, two for a
/// four-byte sequence (a surrogate pair). Eight bytes a step: every text of
/// a restore is measured.
fn utf16_len(s: &str) -> u32 {
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let bytes = s.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    let (mut continuation, mut four_byte_leads) = (0, 0);
    for chunk in &mut chunks {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        // Per byte, bit 7 of `x << k` is the byte's bit 7 - k.
        continuation += (x & !(x << 1) & HIGH).count_ones(); // 10xxxxxx
        four_byte_leads += (x & (x << 1) & (x << 2) & (x << 3) & HIGH).count_ones();
        // 1111xxxx
    }
    for &b in chunks.remainder() {
        continuation += u32::from(b & 0xC0 == 0x80);
        four_byte_leads += u32::from(b >= 0xF0);
    }
    bytes.len() as u32 - continuation + four_byte_leads
}

/// `items` as a JS array of plain objects, equal to their JSON.
pub fn items_to_js(items: &[TranscriptItem]) -> Array {
    let mut batch = Batch::default();
    for item in items {
        batch.item(item);
    }
    build_items(&batch.text, &batch.layout)
}

/// One item as a JS object, equal to its JSON.
pub fn item_to_js(item: &TranscriptItem) -> JsValue {
    items_to_js(std::slice::from_ref(item)).get(0)
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::core::json::RawJson;
    use crate::core::protocol::Role;

    fn stringify(v: &JsValue) -> String {
        js_sys::JSON::stringify(v).unwrap().as_string().unwrap()
    }

    #[test]
    fn items_cross_as_the_objects_of_their_json() {
        let s = |t: &str| t.to_owned();
        let items = vec![
            TranscriptItem::Message {
                message_id: s("m1"),
                turn_id: s(""),
                role: Role::User,
                text: s("plain"),
            },
            TranscriptItem::Message {
                message_id: s("m\"2\\"),
                turn_id: s("t1"),
                role: Role::Assistant,
                text: s("é ü — 😀 𝄞 a\nb\tc \u{1} \u{7f} end"),
            },
            TranscriptItem::Tool {
                call_id: s("c1"),
                turn_id: s("t1"),
                name: s("sh"),
                status: s("running"),
                output: None,
                input: RawJson::parse(r#"{"cmd":"ls","n":[1,"é"]}"#).unwrap(),
            },
            TranscriptItem::Tool {
                call_id: s("c2"),
                turn_id: s("t1"),
                name: s("読む"),
                status: s("ok"),
                output: Some(s("😀")),
                input: RawJson::null(),
            },
            TranscriptItem::TurnEnd {
                turn_id: s("t1"),
                outcome: s("completed"),
                reason: None,
            },
            TranscriptItem::TurnEnd {
                turn_id: s("t2"),
                outcome: s("failed"),
                reason: Some(s("worker restarted ✓")),
            },
        ];
        let all = items_to_js(&items);
        assert_eq!(stringify(&all), serde_json::to_string(&items).unwrap());
        for item in &items {
            let one = item_to_js(item);
            assert_eq!(stringify(&one), serde_json::to_string(item).unwrap());
        }
        assert_eq!(items_to_js(&[]).length(), 0);
    }

    #[test]
    fn utf16_lengths_count_surrogate_pairs() {
        for t in ["", "abc", "é", "—", "😀", "a😀é𝄞z"] {
            assert_eq!(utf16_len(t) as usize, t.encode_utf16().count(), "{t}");
        }
        // Every mix of widths at every alignment of the eight-byte steps.
        let pieces = [
            "a",
            "é",
            "—",
            "😀",
            "\u{7f}",
            "\u{80}",
            "\u{ffff}",
            "\u{10000}",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..40 {
            let t: String = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    pieces[(x % pieces.len() as u64) as usize]
                })
                .collect();
            assert_eq!(utf16_len(&t) as usize, t.encode_utf16().count(), "{t:?}");
        }
    }
}
