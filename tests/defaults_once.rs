//! A default the JS page halves need without the wasm is the core's own:
//! `CONNECT_TIMEOUT_MS` and `TAIL` in `pkg-template/messages.js` (the one JS
//! statement of each) equal `Config::DEFAULT_CONNECT_TIMEOUT_MS` and
//! `Config::DEFAULT_TAIL`.

use replay_client::core::machine::Config;

/// The value of `export const {name} = …;` in `messages.js`.
fn messages_const(name: &str) -> u64 {
    let js = include_str!("../pkg-template/messages.js");
    let head = format!("export const {name} = ");
    let line = js
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("messages.js exports {name}"));
    line.trim_start_matches(&head)
        .trim_end_matches(';')
        .replace('_', "")
        .parse()
        .expect("a number")
}

#[test]
fn the_page_halves_wait_as_long_as_the_core_connect_timeout() {
    assert_eq!(
        messages_const("CONNECT_TIMEOUT_MS"),
        Config::DEFAULT_CONNECT_TIMEOUT_MS
    );
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

#[test]
fn the_page_halves_read_the_core_tail() {
    assert_eq!(messages_const("TAIL"), u64::from(Config::DEFAULT_TAIL));
}
