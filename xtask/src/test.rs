//! `cargo xtask test`: every test layer, in order, after set-up.
//!
//! Layers: format, lints (native and wasm32), the native workspace suite, then
//! the core's suite compiled to wasm in headless Chromium. Later layers (the
//! browser SDK against a live server, package and e2e) are added beside these.

use crate::cmd::{self, path_with, root, run_in, Result};
use crate::setup;

/// Runs every layer; `--skip-setup` trusts the machine as it is.
pub fn run(args: &[String]) -> Result {
    use cmd::run;
    if !args.iter().any(|a| a == "--skip-setup") {
        setup::ensure_all()?;
    }
    cmd::step("fmt", || run("cargo", &["fmt", "--all", "--check"]))?;
    cmd::step("clippy (native)", || {
        run(
            "cargo",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    cmd::step("clippy (wasm32)", || {
        run(
            "cargo",
            &[
                "clippy",
                "-p",
                "replay-client",
                "--all-targets",
                "--target",
                "wasm32-unknown-unknown",
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    cmd::step("native tests", || run("cargo", &["test", "--workspace"]))?;
    cmd::step("core tests in headless Chromium", core_in_chromium)?;
    println!("\nall test layers passed");
    Ok(())
}

/// The same core suite, compiled to wasm32 and run by wasm-bindgen-test in Chromium.
fn core_in_chromium() -> Result {
    let path = path_with(&[setup::js_dir().join("node_modules/.bin")]);
    run_in(
        &root(),
        "wasm-pack",
        &[
            "test",
            "--headless",
            "--chrome",
            "--chromedriver",
            setup::CHROMEDRIVER,
            "--",
            "-p",
            "replay-client",
        ],
        &[
            ("PATH", &path),
            ("CHROMEDRIVER", setup::CHROMEDRIVER),
            ("WASM_BINDGEN_TEST_TIMEOUT", "300"),
        ],
    )
}
