//! The browser layer: executes the core machine's actions with `fetch`,
//! timers, storage and page lifecycle events, and exposes the result to JS
//! (`ReplayClient`, see `api.d.ts`) and to Rust UIs ([`Client`]).
//!
//! It decides nothing: every protocol decision is the machine's
//! ([`crate::core::machine`]). Globals are bound on `globalThis`, so the
//! client also runs in a Worker.

mod api;
mod browser_io;
mod client;
mod driver;
mod error;
mod frames;
mod http;
mod hub;
mod items;
mod js;
mod lifecycle;
mod options;
mod reports;
mod requests;
mod stage;
mod storage;
mod timer;
mod view;

pub use crate::core::machine::ClientNotice;
pub use api::ReplayClient;
pub use client::{Client, ClientRef, Subscription, WeakClient};
pub use error::WasmError;
pub use options::{Notify, Options, StorageChoice, TokenFuture, TokenRequest, TokenSource};

use wasm_bindgen::prelude::*;

// Talc instead of the default dlmalloc: a restore allocates a few strings per
// event, and talc is both faster and smaller (measured in docs/size.md).
#[cfg(not(target_feature = "atomics"))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

// The TypeScript contract of the JS API, appended to the generated `.d.ts`.
#[wasm_bindgen(typescript_custom_section)]
const API_TYPES: &str = include_str!("api.d.ts");
