//! A check that no message the package can show is formatted with `{:?}`:
//! the size build (`pkg.rs`, `-Zfmt-debug=none`) writes nothing for Debug,
//! so `wrong content type: {0:?}` reached users as `wrong content type: `.
//! Run by `cargo test -p xtask`. Test modules (after a `#[cfg(test)]`) and
//! `tests/` folders are not shipped and not checked.

use std::fs;
use std::path::Path;

/// `file:line` of every shipped line under `root` that formats with Debug.
fn debug_formats(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let shipped =
        |p: &Path| p.iter().all(|c| c != "tests") && p.file_name().is_some_and(|n| n != "tests.rs");
    for path in crate::sources::rust_files(root) {
        if !shipped(path.strip_prefix(root).expect("under the root")) {
            continue;
        }
        let text = fs::read_to_string(&path).expect("a source file");
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") || line.contains("#[cfg(all(test") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            let formats = code.contains("format!(") || code.contains("#[error(");
            if formats && code.contains(":?}") {
                out.push(format!("{}:{}", path.display(), i + 1));
            }
        }
    }
    out
}

#[test]
fn shipped_messages_never_format_with_debug() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    // The SDK's own files and the core crate nested in them.
    let mut found = debug_formats(&src);
    found.extend(debug_formats(&src.join("core")));
    assert!(
        found.is_empty(),
        "Debug formatting in shipped messages: {found:?}"
    );
}
