//! The README's quickstart for Rust UIs (Yew, Leptos, ...): follow a session
//! and log its transcript as it changes. `cargo xtask test` builds it for
//! wasm32 and runs it in headless Chromium against the reference server
//! (`tests/js/bindings.test.mjs`); on other targets it is an empty program.
//!
//! The page passes the server and the session in its address:
//! `index.html?server=http://127.0.0.1:8787&session=ses_…`.

#[cfg(target_arch = "wasm32")]
mod quickstart {
    // README: the Rust quickstart, from here…
    use replay_client::core::protocol::TranscriptItem;
    use replay_client::wasm::{Client, Options, StorageChoice};
    use wasm_bindgen::prelude::*;

    #[wasm_bindgen]
    extern "C" {
        #[wasm_bindgen(js_namespace = console, js_name = log)]
        fn web_log(line: &str);
    }

    /// Follows a session for the rest of the page's life and sends "hello".
    pub fn follow(base_url: &str, session_id: &str) {
        let mut options = Options::session(base_url, session_id);
        options.storage = StorageChoice::Local;
        let client = Client::connect(options);

        // Called at most once per animation frame: read the view, then render.
        let weak = client.downgrade();
        let subscription = client.on_change(move || {
            let Some(client) = weak.upgrade() else { return };
            client.with_view(|view| {
                let Some(session) = view.and_then(|v| v.as_session()) else {
                    return;
                };
                for item in session.items() {
                    if let TranscriptItem::Message { role, text, .. } = item {
                        web_log(&format!("{role:?}: {text}"));
                    }
                }
            });
            web_log(&format!("status: {:?}", client.status().state));
        });

        let sent = client.send("hello", None);
        wasm_bindgen_futures::spawn_local(async move {
            match sent.await {
                Ok(turn_id) => web_log(&format!("turn {turn_id}")),
                Err(err) => web_log(&format!("send failed: {err}")),
            }
        });

        // Dropping the subscription unsubscribes and dropping the client
        // closes it: keep both as long as the view is shown (a component
        // keeps them in its state; this page keeps them until it unloads).
        std::mem::forget(subscription);
        std::mem::forget(client);
    }
    // …to here.

    /// The query parameter `name` of the page's address.
    pub fn page_param(name: &str) -> Option<String> {
        let global = js_sys::global();
        let location = js_sys::Reflect::get(&global, &"location".into()).ok()?;
        let search = js_sys::Reflect::get(&location, &"search".into())
            .ok()?
            .as_string()?;
        search.trim_start_matches('?').split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            let value = js_sys::decode_uri_component(value).ok()?;
            (key == name).then(|| String::from(value))
        })
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {
    let server = quickstart::page_param("server").unwrap_or_else(|| "http://127.0.0.1:8787".into());
    let session = quickstart::page_param("session").unwrap_or_else(|| "ses_123".into());
    quickstart::follow(&server, &session);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("rust-quickstart runs in the browser: build it for wasm32-unknown-unknown");
}
