//! Where the persisted `{epoch, cursor, state}` value lives between page
//! loads. The machine decides what and when (one value, throttled, flushed
//! on pagehide); this module only reads and writes one string per key.
//!
//! Any failure (no storage in this context, quota exceeded, a rejected
//! promise) is reported to the machine, which then keeps its state in memory
//! and tells the application with a `storage_fallback` notice.

use std::borrow::Cow;

use js_sys::{Object, Promise};
use wasm_bindgen::{JsCast, JsValue};

use super::js;
use super::options::StorageChoice;
use crate::core::machine::merge_stored;
use wasm_bindgen::closure::Closure;

/// The stored value, now or later.
pub enum Loaded {
    /// Read synchronously.
    Ready(Option<String>),
    /// An asynchronous read; resolves to a string, `null` or `undefined`.
    Pending(Promise),
}

#[derive(Clone)]
enum Backend {
    Web(web_sys::Storage),
    IndexedDb,
    Memory,
    Custom(Object),
}

/// One key in one storage. Cloning clones the handle, not the data.
#[derive(Clone)]
pub struct Store {
    key: String,
    backend: Backend,
    label: &'static str,
}

impl Store {
    /// Opens `choice` for `key`. An unavailable web storage falls back to
    /// memory at once; the error text says why.
    pub fn open(choice: &StorageChoice, key: String) -> (Store, Option<String>) {
        let (backend, label) = match choice {
            StorageChoice::Local => (web_storage("localStorage"), "local"),
            StorageChoice::Session => (web_storage("sessionStorage"), "session"),
            StorageChoice::IndexedDb => (Ok(Backend::IndexedDb), "indexeddb"),
            StorageChoice::Memory => (Ok(Backend::Memory), "memory"),
            StorageChoice::Custom(o) => (Ok(Backend::Custom(o.clone())), "custom"),
        };
        let (backend, unavailable) = match backend {
            Ok(b) => (b, None),
            Err(e) => (Backend::Memory, Some(e)),
        };
        let store = Store {
            key,
            backend,
            label,
        };
        (store, unavailable)
    }

    /// True when nothing is kept (memory, or a fallback to it).
    pub fn keeps_nothing(&self) -> bool {
        matches!(self.backend, Backend::Memory)
    }

    /// The storage chosen: `local`, `session`, `indexeddb`, `memory` or `custom`.
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// Reads the stored value.
    pub fn load(&self) -> Result<Loaded, String> {
        match &self.backend {
            Backend::Web(s) => s
                .get_item(&self.key)
                .map(Loaded::Ready)
                .map_err(|e| js::error_text(&e)),
            Backend::IndexedDb => Ok(Loaded::Pending(js::idb_get(&self.key))),
            // The machine holds the state in memory; nothing outlives the page.
            Backend::Memory => Ok(Loaded::Ready(None)),
            Backend::Custom(o) => {
                let v = call(o, "get", &self.key, None)?;
                if js::is_thenable(&v) {
                    Ok(Loaded::Pending(Promise::resolve(&v)))
                } else {
                    Ok(Loaded::Ready(v.as_string()))
                }
            }
        }
    }

    /// Writes `value` merged with the stored one, which another tab of the
    /// scope may have written ([`merge_stored`] decides: the state of the
    /// larger cursor, the union of both outboxes). `Ok(Some(p))`: the write
    /// completes (or fails) with `p`. `Err`: it failed now (quota
    /// exceeded). A custom storage's value is replaced: its adapter has no
    /// compare-and-write.
    ///
    /// Web storage reads, merges and writes in one task: a Web Lock around
    /// it would not make another process's write visible sooner, so it
    /// would add a wait and no order. IndexedDB merges inside the write's
    /// own readwrite transaction, which the browser serialises across tabs.
    pub fn save(&self, value: &str) -> Result<Option<Promise>, String> {
        match &self.backend {
            Backend::Web(s) => {
                let stored = s.get_item(&self.key).ok().flatten();
                let merged = match &stored {
                    Some(old) => merge_stored(value, old),
                    None => Some(value.into()),
                };
                let Some(merged) = merged else {
                    return Ok(None);
                };
                s.set_item(&self.key, &merged)
                    .map(|_| None)
                    .map_err(|e| js::error_text(&e))
            }
            Backend::IndexedDb => {
                // `true`: the value as it is, which JS holds already (a
                // state of megabytes is not copied back).
                let new = value.to_owned();
                let merge = Closure::<dyn FnMut(String) -> JsValue>::new(move |old: String| {
                    match merge_stored(&new, &old) {
                        None => JsValue::UNDEFINED,
                        Some(Cow::Borrowed(_)) => JsValue::TRUE,
                        Some(Cow::Owned(v)) => JsValue::from_str(&v),
                    }
                });
                Ok(Some(js::idb_merge(
                    &self.key,
                    value,
                    &merge.into_js_value(),
                )))
            }
            Backend::Memory => Ok(None),
            Backend::Custom(o) => {
                let v = call(o, "set", &self.key, Some(value))?;
                Ok(js::is_thenable(&v).then(|| Promise::resolve(&v)))
            }
        }
    }

    /// Removes the stored value (best effort; a corrupt value is removed at once).
    pub fn remove(&self) {
        match &self.backend {
            Backend::Web(s) => {
                let _ = s.remove_item(&self.key);
            }
            Backend::IndexedDb => {
                let _ = js::idb_remove(&self.key);
            }
            Backend::Memory => {}
            Backend::Custom(o) => {
                let _ = call(o, "remove", &self.key, None);
            }
        }
    }
}

/// `globalThis[name]` as a `Storage`, after a probe write (Safari's private
/// mode used to expose a storage whose writes all throw).
fn web_storage(name: &'static str) -> Result<Backend, String> {
    let s: web_sys::Storage = js::global(name)
        .and_then(|v| v.dyn_into().ok())
        .ok_or_else(|| name.to_owned() + " is not available here")?;
    let probe = "replay-client:probe";
    s.set_item(probe, "1").map_err(|e| js::error_text(&e))?;
    let _ = s.remove_item(probe);
    Ok(Backend::Web(s))
}

/// `adapter[method](key[, value])`; a throw becomes `Err`.
fn call(
    o: &Object,
    method: &'static str,
    key: &str,
    value: Option<&str>,
) -> Result<JsValue, String> {
    let f: js_sys::Function = js::get(o, method).unchecked_into();
    let key = JsValue::from_str(key);
    let r = match value {
        Some(v) => f.call2(o, &key, &JsValue::from_str(v)),
        None => f.call1(o, &key),
    };
    r.map_err(|e| js::error_text(&e))
}
