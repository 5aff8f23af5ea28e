//! Page lifecycle and connectivity listeners, mapped to [`Lifecycle`]
//! inputs. `online`/`offline`/`pagehide`/`pageshow` are listened to on
//! `globalThis` (harmless in a Worker, where they never fire);
//! `visibilitychange`/`freeze`/`resume` only where a `document` exists.

use std::rc::Rc;

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::EventTarget;

use super::js;
use crate::core::machine::Lifecycle;

struct Listener {
    target: EventTarget,
    name: &'static str,
    f: Closure<dyn FnMut(JsValue)>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self
            .target
            .remove_event_listener_with_callback(self.name, self.f.as_ref().unchecked_ref());
    }
}

/// The installed listeners; dropping this removes them all.
pub struct Listeners {
    _list: Vec<Listener>,
}

/// True when the browser reports no network (`navigator.onLine === false`).
pub fn starts_offline() -> bool {
    js::global("navigator")
        .map(|n| js::get(&n, "onLine") == JsValue::FALSE)
        .unwrap_or(false)
}

/// Installs the listeners; `on` receives every mapped event.
pub fn install(on: Rc<dyn Fn(Lifecycle)>) -> Listeners {
    let mut list = Vec::new();
    let global: EventTarget = js_sys::global().unchecked_into();
    let document = js::global("document").and_then(|d| d.dyn_into::<EventTarget>().ok());
    let mut add = |target: &EventTarget, name: &'static str, map: fn(&JsValue) -> Lifecycle| {
        let on = on.clone();
        let f = Closure::<dyn FnMut(JsValue)>::new(move |ev: JsValue| on(map(&ev)));
        if target
            .add_event_listener_with_callback(name, f.as_ref().unchecked_ref())
            .is_ok()
        {
            list.push(Listener {
                target: target.clone(),
                name,
                f,
            });
        }
    };
    add(&global, "online", |_| Lifecycle::Online);
    add(&global, "offline", |_| Lifecycle::Offline);
    add(&global, "pagehide", |_| Lifecycle::PageHide);
    add(&global, "pageshow", |ev| Lifecycle::PageShow {
        persisted: js::get(ev, "persisted").is_truthy(),
    });
    if let Some(doc) = &document {
        add(doc, "visibilitychange", |_| {
            let visible = js::global("document")
                .map(|d| js::get(&d, "visibilityState").as_string().as_deref() == Some("visible"))
                .unwrap_or(true);
            if visible {
                Lifecycle::Visible
            } else {
                Lifecycle::Hidden
            }
        });
        add(doc, "freeze", |_| Lifecycle::Freeze);
        add(doc, "resume", |_| Lifecycle::Resume);
    }
    Listeners { _list: list }
}
