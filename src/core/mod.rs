//! The sans-IO core: every protocol decision as a pure function of its inputs.

pub mod fold;
pub mod json;
pub mod machine;
pub mod protocol;
mod protocol_json;
pub mod share;
pub mod sse;
pub mod transcript;
