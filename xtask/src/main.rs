//! cargo xtask: placeholder, filled in next.
fn main() {}
