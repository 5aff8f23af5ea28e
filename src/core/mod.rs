//! The sans-IO core: every protocol decision as a pure function of its inputs.

pub mod protocol;
pub mod json;
mod protocol_json;
pub mod sse;
pub mod fold;
pub mod machine;
pub mod transcript;
