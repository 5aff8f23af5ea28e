//! Bindings to the JS globals the layer uses. Everything is looked up on
//! `globalThis`, never through `window`, so the client also runs in a Worker.

use js_sys::{Array, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

#[wasm_bindgen]
extern "C" {
    /// `globalThis.setTimeout(f, ms)`.
    #[wasm_bindgen(js_name = setTimeout)]
    pub fn set_timeout(f: &Function, ms: i32) -> JsValue;
    /// `globalThis.clearTimeout(handle)`.
    #[wasm_bindgen(js_name = clearTimeout)]
    pub fn clear_timeout(handle: &JsValue);
    /// `globalThis.queueMicrotask(f)`.
    #[wasm_bindgen(js_name = queueMicrotask)]
    pub fn queue_microtask(f: &Function);
    /// A promise, as [`settle`] uses it.
    type Thenable;
    #[wasm_bindgen(method)]
    fn then(this: &Thenable, ok: &JsValue, err: &JsValue);
}

/// `promise.then(ok, err)`, either may be `undefined`: a promise's outcome
/// as a call of a function made once per client, where awaiting it would
/// take a future and two closures per promise.
pub fn settle(promise: &Promise, ok: &JsValue, err: &JsValue) {
    promise.unchecked_ref::<Thenable>().then(ok, err);
}

/// The bytes of an array of `Uint8Array`s, end to end, copied once into
/// wasm memory (a frame's chunks of a streamed body). Sized exactly first:
/// grown chunk by chunk it doubled, and wasm memory never shrinks.
pub fn concat(chunks: &Array) -> Vec<u8> {
    let part = |i| Uint8Array::unchecked_from_js(chunks.get(i));
    let len = (0..chunks.length())
        .map(|i| part(i).length() as usize)
        .sum();
    let mut bytes = Vec::with_capacity(len);
    for i in 0..chunks.length() {
        let part = part(i);
        let at = bytes.len();
        bytes.resize(at + part.length() as usize, 0);
        part.copy_to(&mut bytes[at..]);
    }
    bytes
}

#[wasm_bindgen(module = "/src/wasm/replay_error.js")]
extern "C" {
    /// `new ReplayError(code, message, status)`.
    #[wasm_bindgen(js_name = makeReplayError)]
    pub fn make_replay_error(code: &str, message: &str, status: Option<u16>) -> JsValue;
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    /// Resolves to the stored string or `null`.
    #[wasm_bindgen(js_name = idbGet)]
    pub fn idb_get(key: &str) -> Promise;
    /// Writes `value` where nothing is stored, else what `merge(stored)`
    /// returns (`true`: `value`; `undefined`: nothing), in one
    /// transaction; resolves once done.
    #[wasm_bindgen(js_name = idbMerge)]
    pub fn idb_merge(key: &str, value: &str, merge: &JsValue) -> Promise;
    /// Resolves once removed.
    #[wasm_bindgen(js_name = idbRemove)]
    pub fn idb_remove(key: &str) -> Promise;
}

/// The machine's clock: monotonic milliseconds on the Unix epoch's scale
/// (`performance.timeOrigin + performance.now()`). It never steps back when
/// the system clock is set, and it keeps counting while a hidden tab's
/// timers are throttled, so a late timer sees the real elapsed time.
pub fn now() -> u64 {
    monotonic_now() as u64
}

/// The wall clock (`Date.now()`), which the machine reads only as data (an
/// HTTP date in `Retry-After`): [`now`] is the machine's clock.
pub fn wall_clock() -> u64 {
    js_sys::Date::now() as u64
}

#[wasm_bindgen(module = "/src/wasm/browser.js")]
extern "C" {
    #[wasm_bindgen(js_name = monotonicNow)]
    fn monotonic_now() -> f64;
}

/// `obj[name]`, `undefined` when absent or when the getter throws (a
/// sandboxed iframe's `localStorage` throws `SecurityError`).
pub fn get(obj: &JsValue, name: &'static str) -> JsValue {
    Reflect::get(obj, &key(name)).unwrap_or(JsValue::UNDEFINED)
}

/// Sets `obj[name] = value` on a fresh object being built.
pub fn set(obj: &Object, name: &'static str, value: &JsValue) {
    // Cannot fail on a plain, unfrozen object.
    let _ = Reflect::set(obj, &key(name), value);
}

thread_local! {
    static KEYS: std::cell::RefCell<Vec<(&'static str, JsValue)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A property name as a JS string, made once: a view is assembled on every
/// notification, and decoding the same short names each time showed up in
/// live-streaming profiles.
fn key(name: &'static str) -> JsValue {
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        // A few dozen distinct literals: by address first (one comparison
        // each), by text only if the same literal got another address.
        let hit = keys
            .iter()
            .find(|(k, _)| std::ptr::eq(*k, name))
            .or_else(|| keys.iter().find(|(k, _)| *k == name));
        if let Some((_, v)) = hit {
            return v.clone();
        }
        let v = JsValue::from_str(name);
        keys.push((name, v.clone()));
        v
    })
}

/// A global by name (`document`, `localStorage`, ...), if it exists.
pub fn global(name: &'static str) -> Option<JsValue> {
    let v = get(&js_sys::global(), name);
    (!v.is_undefined() && !v.is_null()).then_some(v)
}

/// The text of a JS exception or rejection reason.
pub fn error_text(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    e.as_string()
        .unwrap_or_else(|| "unknown JavaScript error".to_owned())
}

/// True for a thenable (a Promise or a Promise-like of another realm).
pub fn is_thenable(v: &JsValue) -> bool {
    v.is_object() && get(v, "then").is_function()
}

/// Parses a JSON text the client wrote; it is always valid.
pub fn parse_json(text: &str) -> JsValue {
    js_sys::JSON::parse(text).unwrap_or(JsValue::NULL)
}

/// Writes a value as JSON (the core's writer, already linked for the
/// stored state) and parses it in JS: one crossing, parsed natively.
pub fn to_js<T: serde::Serialize + ?Sized>(value: &T) -> JsValue {
    match crate::core::json::to_string(value) {
        Ok(text) => parse_json(&text),
        Err(_) => JsValue::NULL,
    }
}
