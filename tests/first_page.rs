//! What `prefetch` (src/wasm/browser.js) asks for before the wasm is what a
//! client's machine asks for first on a first visit, and the stored value
//! it looks for first is the one the client keeps: for every case of
//! `tests/fixtures/first_page.json`, the machine's first replay page and
//! the core's storage key (`Target::storage_key`) are the fixture's, which
//! `tests/js/targets.test.mjs` checks `prefetch` against. A drift on either
//! side (the path segments' encoding, the query, the key) fails one of the
//! two.

#![cfg(not(target_arch = "wasm32"))]

mod machine_support;

use machine_support::events::hello;
use machine_support::rig::{Rig, BOOT, EPOCH};
use replay_client::core::machine::{Config, Target};

#[test]
fn prefetch_names_the_machines_first_page_and_storage_key() {
    let cases: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/first_page.json")).unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 4);
    for case in cases {
        let options = &case["options"];
        // As the wasm's options do (options.rs).
        let base = options["baseUrl"].as_str().unwrap().trim_end_matches('/');
        let id = options["sessionId"].as_str().unwrap();
        let mut cfg = Config::session(id);
        if let Some(tail) = options["tail"].as_u64() {
            cfg.tail = tail as u32;
        }
        let mut r = Rig::with(cfg, None);
        if r.fetch_paths().is_empty() {
            r.open_ok();
            r.send(&[hello(EPOCH, 90, BOOT)]);
        }
        let first = r.fetch_paths().first().cloned().expect("a first page");
        assert_eq!(
            format!("{base}{first}"),
            case["url"].as_str().unwrap(),
            "{case}"
        );
        assert_eq!(
            Target::session(id).storage_key(base),
            case["key"].as_str().unwrap(),
            "{case}"
        );
    }
}
