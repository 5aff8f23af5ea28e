//! The README's quickstart for Rust UIs (Yew, Leptos, ...): follow a session
//! and re-render on change. Compiled for wasm32 by `cargo xtask test`'s lint
//! layer; on other targets it is an empty program.

#[cfg(target_arch = "wasm32")]
fn main() {
    use replay_client::core::protocol::TranscriptItem;
    use replay_client::wasm::{Client, Options, StorageChoice};

    let mut options = Options::session("http://127.0.0.1:8787", "ses_123");
    options.storage = StorageChoice::Local;
    let client = Client::connect(options);

    // Called at most once per animation frame; read the view, then render.
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
            if let Some(live) = session.overlay() {
                web_log(&format!("typing: {}", live.text));
            }
        });
        web_log(&format!("status: {:?}", client.status().state));
    });

    wasm_bindgen_futures::spawn_local(async move {
        match client.send("hello", None).await {
            Ok(turn_id) => web_log(&format!("turn {turn_id}")),
            Err(err) => web_log(&format!("send failed: {err}")),
        }
        // Dropping the subscription unsubscribes; dropping the client closes it.
        drop(subscription);
        client.close();
    });
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = log)]
    fn web_log(line: &str);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("rust-quickstart runs in the browser: build it for wasm32-unknown-unknown");
}
