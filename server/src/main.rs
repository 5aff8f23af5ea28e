//! replay-server: placeholder until the reference runtime lands.
fn main() {}
