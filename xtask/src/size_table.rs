//! The sizes in `docs/size.md` ("Today's sizes"): written from the build by
//! `cargo xtask pkg`, checked against it by `cargo xtask test`, never typed
//! by hand (typed sizes drifted from the build's). The
//! build is reproducible: the toolchain is pinned (`rust-toolchain.toml`),
//! so are wasm-opt and esbuild (npm), and wasm-bindgen's snippet folder is
//! named by the crate, not by where it is checked out.

use crate::cmd::{root, Result};
use crate::pkg;
use std::fs;
use std::path::Path;

const BEGIN: &str = "<!-- sizes: begin (written by `cargo xtask pkg`) -->";
const END: &str = "<!-- sizes: end -->";

/// The section between the markers, as the package in `pkg` gives it.
fn table(pkg: &Path) -> Result<String> {
    let mut out = String::from(
        "| what one context loads | bytes | gzipped | budget (gzipped) | to spare |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for c in pkg::context_sizes(pkg)? {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            c.name,
            c.raw,
            c.gz,
            c.budget,
            c.budget.saturating_sub(c.gz)
        ));
    }
    out.push_str("\n| file of `web/` | bytes | gzipped |\n|---|---:|---:|\n");
    let mut files = pkg::sizes(pkg)?;
    // The directory listing's order is the file system's.
    files.sort();
    for (name, raw, gz) in files {
        out.push_str(&format!("| `{name}` | {raw} | {gz} |\n"));
    }
    Ok(out)
}

fn doc() -> std::path::PathBuf {
    root().join("docs/size.md")
}

/// `text` split around its sizes section: before (through `BEGIN`'s
/// line), the section, after (from `END`).
fn split(text: &str) -> Result<(&str, &str, &str)> {
    let missing = || format!("docs/size.md has no `{BEGIN}` ... `{END}` section");
    let start = text.find(BEGIN).ok_or_else(missing)? + BEGIN.len() + 1;
    let end = start + text[start..].find(END).ok_or_else(missing)?;
    Ok((&text[..start], &text[start..end], &text[end..]))
}

/// Rewrites the section from the package in `pkg`.
pub fn rewrite(pkg: &Path) -> Result {
    let path = doc();
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (before, _, after) = split(&text)?;
    let new = format!("{before}{}{after}", table(pkg)?);
    fs::write(&path, new).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("sizes written to {}", path.display());
    Ok(())
}

/// Fails when the section is not what the package in `pkg` gives.
pub fn check(pkg: &Path) -> Result {
    let path = doc();
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (_, written, _) = split(&text)?;
    let built = table(pkg)?;
    if written == built {
        return Ok(());
    }
    let differ: Vec<String> = written
        .lines()
        .zip(built.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  docs: {a}\n  build: {b}"))
        .collect();
    Err(format!(
        "docs/size.md's sizes are not this build's: run `cargo xtask pkg` and \
         commit docs/size.md\n{}",
        differ.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::{split, BEGIN, END};

    #[test]
    fn the_section_is_what_lies_between_the_markers() {
        let text = format!("intro\n{BEGIN}\n| a |\n{END}\nrest\n");
        let (before, section, after) = split(&text).unwrap();
        assert_eq!(section, "| a |\n");
        assert!(before.ends_with(&format!("{BEGIN}\n")));
        assert!(after.starts_with(END));
        assert!(split("no markers").is_err());
    }
}
