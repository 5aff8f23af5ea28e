//! Animation frames: whether they run, and one asked for
//! (`requestFrame` in `browser.js`).

use js_sys::Function;
use wasm_bindgen::prelude::*;

use crate::core::machine::Frames;

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[wasm_bindgen(js_name = requestFrame)]
    fn request_frame(f: &Function);

    #[wasm_bindgen(js_name = frames)]
    fn frames_code() -> u32;
}

/// Whether frames run in this context now.
pub fn now() -> Frames {
    match frames_code() {
        2 => Frames::Running,
        1 => Frames::Paused,
        _ => Frames::Absent,
    }
}

/// Calls `f` in the next animation frame; asked again before it came, the
/// browser is asked anew.
pub fn request(f: &Function) {
    request_frame(f);
}
