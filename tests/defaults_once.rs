//! A default the JS needs without the wasm is the core's own:
//! `CONNECT_TIMEOUT_MS` in `pkg-template/messages.js` (the one JS statement
//! of it) equals `Config::DEFAULT_CONNECT_TIMEOUT_MS`, and the first page
//! `prefetch` asks for (`src/wasm/browser.js`), and the shared host's page
//! half (`pkg-template/first-page-url.js`), is the one the machine's start
//! asks for.

use replay_client::core::machine::Config;

/// The number of `const {name} = …;` in `js`.
fn js_const(js: &str, name: &str) -> u64 {
    let start = format!("const {name} = ");
    let line = js
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("{name} is stated"));
    line.trim_start_matches(&start)
        .trim_end_matches(';')
        .replace('_', "")
        .parse()
        .expect("a number")
}

#[test]
fn prefetch_asks_for_the_first_page_the_machine_asks_for() {
    let cfg = Config::session("s");
    // `prefetch` (the on-page client, the hosts) and the shared host's page
    // half, which asks for a first visit's first page itself.
    for js in [
        include_str!("../src/wasm/browser.js"),
        include_str!("../pkg-template/first-page-url.js"),
    ] {
        assert_eq!(
            js_const(js, "FIRST_PAGE_LIMIT"),
            u64::from(cfg.first_page_limit.min(cfg.replay_page_limit))
        );
        assert_eq!(js_const(js, "TAIL"), u64::from(cfg.tail));
    }
}

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
