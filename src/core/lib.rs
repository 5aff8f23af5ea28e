//! # replay-core
//!
//! The sans-IO core of `replay-client`: every protocol decision as a pure
//! function of its inputs. No IO, no clock, no browser: inputs go in through
//! `handle_*`, actions come out of `poll_*`, time is passed in. The SDK
//! (`replay-client`) re-exports it as `replay_client::core`.

pub mod fold;
pub mod json;
pub mod machine;
pub mod protocol;
mod protocol_json;
pub mod share;
pub mod sse;
pub mod transcript;

// The core's unit tests also run in headless Chromium (`cargo xtask test`).
#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
