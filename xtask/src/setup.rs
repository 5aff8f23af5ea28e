//! Installs what the test and build layers need, skipping what is present.
//!
//! Fresh machines and CI start without the wasm toolchain, the browsers or the npm
//! tools; everything comes from the package registries this machine reaches.
//! Every task calls what it needs first, so any of them works on a fresh
//! clone. The Rust toolchain itself is pinned in `rust-toolchain.toml`;
//! the rustup steps below act on that toolchain (they run in the workspace).

use crate::cmd::{self, output, root, run, Result};
use std::path::{Path, PathBuf};

/// Where the browser and its driver are (Debian's packages).
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// ChromeDriver for wasm-bindgen-test.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The engine layer's browsers and drivers (Debian's packages), each with
/// the file that shows it is installed: Firefox ESR (driven over WebDriver
/// BiDi), WebKitGTK's driver with its MiniBrowser under Xvfb (about Safari
/// 26), and WPE WebKit's driver with Cog (about Safari 16, no X).
pub const ENGINE_PACKAGES: [(&str, &str); 6] = [
    ("firefox-esr", "/usr/bin/firefox-esr"),
    ("webkit2gtk-driver", "/usr/bin/WebKitWebDriver"),
    ("xvfb", "/usr/bin/Xvfb"),
    ("xauth", "/usr/bin/xauth"),
    ("wpewebkit-driver", "/usr/bin/WPEWebDriver"),
    ("cog", "/usr/bin/cog"),
];

/// Everything `test` and `demo` use, in dependency order.
pub fn ensure_all() -> Result {
    ensure_package_tools()?;
    cmd::step("setup: wasm-pack", ensure_wasm_pack)?;
    cmd::step("setup: postgresql (cluster tests)", crate::postgres::ensure)?;
    cmd::step(
        "setup: redis-server (the cluster's live tail)",
        crate::redis::ensure,
    )?;
    cmd::step(
        "setup: nginx-light (a proxy that mutes event streams)",
        crate::nginx::ensure,
    )?;
    ensure_browser()?;
    cmd::step(
        "setup: firefox, webkitgtk, wpe (engine layer)",
        ensure_engines,
    )
}

/// What `xtask pkg` needs: the wasm32 target, rust-src, wasm-bindgen-cli and
/// the npm tools (binaryen's wasm-opt, esbuild).
pub fn ensure_package_tools() -> Result {
    cmd::step("setup: wasm32 target", ensure_wasm_target)?;
    cmd::step(
        "setup: rust-src (size build of the package)",
        ensure_rust_src,
    )?;
    cmd::step("setup: wasm-bindgen-cli", ensure_wasm_bindgen)?;
    cmd::step("setup: npm tools", ensure_node_tools)
}

/// Headless Chromium and its driver, for the browser tests and benchmarks.
pub fn ensure_browser() -> Result {
    cmd::step("setup: chromium", ensure_chromium)
}

/// std's sources, for the package's size build. Not fatal: without them
/// `xtask pkg` falls back to a plain stable build.
fn ensure_rust_src() -> Result {
    let installed = output("rustup", &["component", "list", "--installed"]).unwrap_or_default();
    if installed.lines().any(|l| l.trim().starts_with("rust-src")) {
        println!("present");
        return Ok(());
    }
    if let Err(e) = run("rustup", &["component", "add", "rust-src"]) {
        eprintln!("warning: {e}; the package will use the stable build");
    }
    Ok(())
}

fn ensure_wasm_target() -> Result {
    let installed = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    if installed
        .lines()
        .any(|l| l.trim() == "wasm32-unknown-unknown")
    {
        println!("present");
        return Ok(());
    }
    run("rustup", &["target", "add", "wasm32-unknown-unknown"])
}

/// The wasm-bindgen version locked in Cargo.lock; the CLI must match it exactly.
pub fn locked_wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock"))
        .map_err(|e| format!("cannot read Cargo.lock: {e}"))?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"wasm-bindgen\"" {
            if let Some(version) = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("version = "))
            {
                return Ok(version.trim_matches('"').to_owned());
            }
        }
    }
    Err("wasm-bindgen is not in Cargo.lock".into())
}

fn ensure_wasm_bindgen() -> Result {
    let want = locked_wasm_bindgen_version()?;
    let have = output("wasm-bindgen", &["--version"]).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(want.as_str()) {
        println!("present: {have}");
        return Ok(());
    }
    println!("installing wasm-bindgen-cli {want} (was: {have:?}); this takes minutes");
    // `--locked` first, as upstream intends; the registry mirror here has been
    // seen to miss one crate version in that lock file, so fall back to a fresh resolve.
    run(
        "cargo",
        &[
            "install",
            "wasm-bindgen-cli",
            "--version",
            &want,
            "--locked",
            "--force",
        ],
    )
    .or_else(|_| {
        run(
            "cargo",
            &["install", "wasm-bindgen-cli", "--version", &want, "--force"],
        )
    })
}

fn ensure_wasm_pack() -> Result {
    if let Some(have) = output("wasm-pack", &["--version"]) {
        println!("present: {have}");
        return Ok(());
    }
    run("cargo", &["install", "wasm-pack", "--locked"])
        .or_else(|_| run("cargo", &["install", "wasm-pack"]))
}

fn ensure_chromium() -> Result {
    cmd::apt_install(
        Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists(),
        &["chromium", "chromium-driver"],
    )
}

/// The engine layer's packages that are missing, installed in one `apt-get`.
fn ensure_engines() -> Result {
    let missing: Vec<&str> = ENGINE_PACKAGES
        .iter()
        .filter(|(_, file)| !Path::new(file).exists())
        .map(|(package, _)| *package)
        .collect();
    cmd::apt_install(missing.is_empty(), &missing)
}

/// A fresh `TMPDIR` for a browser run, `target/browser-tmp`. Chromium
/// leaves a ~20 MB `org.chromium.Chromium.scoped_dir.*` profile in `TMPDIR`
/// for most pages the wasm-bindgen test runner opens (17 per run, ~340 MB);
/// here they are removed by the next run instead of filling `/tmp`.
pub fn browser_tmp() -> Result<PathBuf> {
    let dir = root().join("target/browser-tmp");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The npm tooling folder (TypeScript, Vite, Playwright core, puppeteer-core
/// and selenium-webdriver for the engine layer, binaryen,
/// publint and attw, and React, Vue and Svelte for the binding apps).
pub fn js_dir() -> PathBuf {
    root().join("tests/js")
}

/// A tool installed by npm in `tests/js/node_modules/.bin`.
pub fn node_bin(name: &str) -> PathBuf {
    js_dir().join("node_modules/.bin").join(name)
}

fn ensure_node_tools() -> Result {
    let dir = js_dir();
    let lock = dir.join("package-lock.json");
    let stamp = dir.join("node_modules/.package-lock.json");
    let fresh = match (std::fs::metadata(&lock), std::fs::metadata(&stamp)) {
        (Ok(l), Ok(s)) => s.modified().ok() >= l.modified().ok(),
        _ => false,
    };
    if fresh {
        println!("present");
        return Ok(());
    }
    cmd::run_in(&dir, "npm", &["ci", "--no-audit", "--no-fund"], &[])
}
