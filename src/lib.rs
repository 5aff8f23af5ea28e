//! # replay-client
//!
//! Keeps a web app attached to an agent runtime across disconnects, tab
//! sleeps, reloads and server restarts, losing nothing and duplicating
//! nothing (see `docs/protocol.md`).
//!
//! - [`core`]: the sans-IO brain, the crate `replay-core` (re-exported here).
//!   Protocol types, the SSE parser, the client state machine and the fold
//!   into a view. No IO, no clock: inputs go in through `handle_*`, actions
//!   come out of `poll_*`, time is passed in. Its dependency tree holds no
//!   wasm-bindgen, js-sys or web-sys.
//! - [`exec`]: the drive loop that carries out a machine's outputs over a
//!   platform ([`exec::Io`]), the same natively (tests) and in the browser.
//! - `wasm` (only on `wasm32`): the browser's `Io` and the JS API.

pub use replay_core as core;
pub mod exec;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

// The core's unit tests also run in headless Chromium (`wasm-pack test --chrome`).
#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
