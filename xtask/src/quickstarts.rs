//! The README quickstarts, run as written: the npm snippet is taken from the
//! READMEs (type-checked, bundled and run by the package and e2e layers), the
//! Rust snippet must be `examples/rust-quickstart.rs`'s code (built for
//! wasm32 and run in Chromium), and `sse-dump` is run on a captured stream.

use crate::cmd::{self, root, Result};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// Where the example marks the code the README shows.
const RUST_FROM: &str = "// README: the Rust quickstart, from here…\n";
const RUST_TO: &str = "// …to here.";

/// The first fenced block of language `lang` after the heading `heading` in `markdown`.
fn block_after(markdown: &str, heading: &str, lang: &str) -> Result<String> {
    let start = markdown
        .find(&format!("\n{heading}\n"))
        .ok_or_else(|| format!("no heading {heading:?}"))?;
    let fence = format!("\n```{lang}\n");
    let open = markdown[start..]
        .find(&fence)
        .ok_or_else(|| format!("no ```{lang} block after {heading:?}"))?
        + start
        + fence.len();
    let close = markdown[open..]
        .find("\n```\n")
        .ok_or_else(|| format!("unterminated ```{lang} block after {heading:?}"))?
        + open;
    Ok(markdown[open..=close].to_owned())
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The npm quickstart: the same code in the repository README and the npm
/// README (the latter is what npm users see).
pub fn npm_snippet() -> Result<String> {
    let repo = block_after(
        &read(&root().join("README.md"))?,
        "## Quickstart: npm",
        "ts",
    )?;
    let npm = block_after(
        &read(&root().join("pkg-template/README.md"))?,
        "## Quickstart",
        "ts",
    )?;
    if repo != npm {
        return Err("README.md and pkg-template/README.md show different npm quickstarts".into());
    }
    Ok(repo)
}

/// Fails unless the README's Rust snippet is the example's marked code.
pub fn check_rust_snippet() -> Result {
    let readme = block_after(
        &read(&root().join("README.md"))?,
        "## Quickstart: Rust (Yew, Leptos, ...)",
        "rust",
    )?;
    let example = read(&root().join("examples/rust-quickstart.rs"))?;
    let from = example.find(RUST_FROM).ok_or("example: no start marker")? + RUST_FROM.len();
    let to = example.find(RUST_TO).ok_or("example: no end marker")?;
    // The example's code sits in a module: one level (4 spaces) deeper.
    let code: String = example[from..to]
        .lines()
        .map(|line| format!("{}\n", line.strip_prefix("    ").unwrap_or(line)))
        .collect();
    if code.trim_end() != readme.trim_end() {
        return Err(
            "README.md's Rust quickstart differs from examples/rust-quickstart.rs (between its README markers)"
                .into(),
        );
    }
    println!("README Rust quickstart = examples/rust-quickstart.rs");
    Ok(())
}

/// `cargo run --example sse-dump` on a stream captured from the reference
/// server, read 7 bytes at a time; its lines must be the expected ones.
pub fn run_sse_dump() -> Result {
    let dir = root().join("tests/fixtures/sse-dump");
    let input = fs::File::open(dir.join("session.sse")).map_err(|e| format!("session.sse: {e}"))?;
    let out = Command::new("cargo")
        .args([
            "run",
            "-q",
            "--example",
            "sse-dump",
            "--",
            "--chunk-size",
            "7",
        ])
        .current_dir(root())
        .stdin(Stdio::from(input))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("sse-dump failed ({})", out.status));
    }
    let got = String::from_utf8_lossy(&out.stdout);
    let want = read(&dir.join("session.jsonl"))?;
    if got != want {
        return Err(format!(
            "sse-dump printed other lines than tests/fixtures/sse-dump/session.jsonl:\n{got}"
        ));
    }
    println!("sse-dump: {} lines as expected", got.lines().count());
    Ok(())
}

/// Builds `examples/rust-quickstart.rs` for wasm32 and writes it, with its
/// page (`tests/js/rust-quickstart/`), into `site/rust-quickstart/`.
pub fn build_rust_quickstart(site: &Path) -> Result {
    cmd::run(
        "cargo",
        &[
            "build",
            "--example",
            "rust-quickstart",
            "--target",
            "wasm32-unknown-unknown",
        ],
    )?;
    let wasm = root().join("target/wasm32-unknown-unknown/debug/examples/rust-quickstart.wasm");
    let out = site.join("rust-quickstart");
    cmd::run(
        "wasm-bindgen",
        &[
            "--target",
            "web",
            "--out-dir",
            out.to_str().expect("utf-8 path"),
            "--out-name",
            "quickstart",
            wasm.to_str().expect("utf-8 path"),
        ],
    )?;
    let page = "tests/js/rust-quickstart/index.html";
    fs::copy(root().join(page), out.join("index.html")).map_err(|e| format!("{page}: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_found_after_its_heading() {
        let md =
            "# t\n\n```ts\nno\n```\n\n## Q\n\ntext\n\n```sh\nx\n```\n\n```ts\nlet a = 1;\n```\n";
        assert_eq!(block_after(md, "## Q", "ts").unwrap(), "let a = 1;\n");
        assert!(block_after(md, "## R", "ts").is_err());
    }
}
