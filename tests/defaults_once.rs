//! A default the JS page halves need without the wasm is the core's own:
//! `CONNECT_TIMEOUT_MS` in `pkg-template/messages.js` (the one JS statement
//! of it) equals `Config::DEFAULT_CONNECT_TIMEOUT_MS`.

use replay_client::core::machine::Config;

#[test]
fn the_page_halves_wait_as_long_as_the_core_connect_timeout() {
    let js = include_str!("../pkg-template/messages.js");
    let line = js
        .lines()
        .find(|l| l.starts_with("export const CONNECT_TIMEOUT_MS = "))
        .expect("messages.js exports CONNECT_TIMEOUT_MS");
    let value: u64 = line
        .trim_start_matches("export const CONNECT_TIMEOUT_MS = ")
        .trim_end_matches(';')
        .replace('_', "")
        .parse()
        .expect("a number");
    assert_eq!(value, Config::DEFAULT_CONNECT_TIMEOUT_MS);
    // The one page half (`page-client.js`) waits that long; its two
    // entries state no default of their own.
    let page = include_str!("../pkg-template/page-client.js");
    assert!(
        page.contains("CONNECT_TIMEOUT_MS"),
        "the page half waits for the core's default"
    );
    for half in [
        page,
        include_str!("../pkg-template/worker-client.js"),
        include_str!("../pkg-template/shared-client.js"),
    ] {
        assert!(
            !half.contains("10_000"),
            "a page half states the default itself"
        );
    }
}
