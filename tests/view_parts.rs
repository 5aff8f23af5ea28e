//! The view's parts in the one order the halves share: bit `i` of a page
//! update (`PageUpdate::parts`) is the `i`th name of
//! `tests/fixtures/view_parts.json`, which the core's `PAGE_PARTS` must
//! list as it does; `tests/js/view_parts.test.mjs` checks the JS view
//! object (`viewObject`, browser.js, and a client of the package), whose
//! keys in order are what a worker host (host.js) names the bits by,
//! against the same file. A part renamed, added or moved on either side
//! fails one of the two, instead of pages being posted the wrong parts.

#![cfg(not(target_arch = "wasm32"))]

use replay_client::core::machine::{PageUpdate, PAGE_PARTS};

#[test]
fn the_cores_parts_are_the_fixtures_in_bit_order() {
    let parts: Vec<String> =
        serde_json::from_str(include_str!("fixtures/view_parts.json")).unwrap();
    assert_eq!(PAGE_PARTS.as_slice(), parts.as_slice());
    // Every bit a part: the whole view is every name, in the same order.
    assert_eq!(PageUpdate::WHOLE.names(), parts);
}
