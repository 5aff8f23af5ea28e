//! The `.rs` files of a source folder, for the source checks run by
//! `cargo test -p xtask` (`cycles.rs`, `debug_fmt.rs`).

use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file of the crate whose sources are under `root`, at any
/// depth, except those of a crate nested in it (a folder with its own
/// `Cargo.toml`: `src/core/` is the crate `replay-core`).
pub fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !path.join("Cargo.toml").exists() {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}
