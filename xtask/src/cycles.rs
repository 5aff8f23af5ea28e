//! A check that no module of `src/`, `src/core/` or `server/src/` imports a module that
//! imports it back (so that the browser layer decides nothing): cycles are
//! what made the browser layer hard to change. Run by `cargo test -p xtask`,
//! which `cargo xtask test` runs with the workspace.
//!
//! Modules are files; a dependency is any `crate::…`, `super::…` or
//! `self::…` path outside comments that names another module. A parent and
//! its children may name each other (a module declares its children).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

type Module = Vec<String>;

/// Every `.rs` file under `root`, as a module path (`mod.rs`, `lib.rs` and
/// `main.rs` stand for their folder).
fn modules(root: &Path) -> BTreeMap<Module, String> {
    let mut out = BTreeMap::new();
    for path in crate::sources::rust_files(root) {
        let rel = path.strip_prefix(root).expect("under the root");
        let mut name: Module = rel
            .with_extension("")
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        if matches!(
            name.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            name.pop();
        }
        let text = fs::read_to_string(&path).expect("a source file");
        out.insert(name, without_comments(&text));
    }
    out
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths starting with `crate::`, `super::` or `self::` in `text`.
fn paths(text: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bytes = text.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(start) {
            if at > 0 && is_word(bytes[at - 1] as char) {
                continue;
            }
            let end = text[at..]
                .find(|c: char| !(is_word(c) || c == ':'))
                .map_or(text.len(), |e| at + e);
            out.push(
                text[at..end]
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .collect(),
            );
        }
    }
    out
}

/// The modules each module names.
fn dependencies(mods: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut graph = BTreeMap::new();
    for (m, text) in mods {
        let mut deps = BTreeSet::new();
        for path in paths(text) {
            let (mut base, mut rest): (Module, &[&str]) = (m.clone(), &path[..]);
            match rest.first() {
                Some(&"crate") => {
                    base.clear();
                    rest = &rest[1..];
                }
                Some(&"self") => rest = &rest[1..],
                _ => {
                    while rest.first() == Some(&"super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
            }
            let full: Module = base
                .into_iter()
                .chain(rest.iter().map(|s| s.to_string()))
                .collect();
            let named = (1..=full.len())
                .rev()
                .map(|k| full[..k].to_vec())
                .find(|c| mods.contains_key(c));
            if let Some(d) = named.filter(|d| d != m) {
                deps.insert(d);
            }
        }
        graph.insert(m.clone(), deps);
    }
    graph
}

/// Pairs of modules that import each other (parents and children aside).
pub fn mutual_imports(root: &Path) -> Vec<String> {
    let graph = dependencies(&modules(root));
    let mut out = Vec::new();
    for (a, deps) in &graph {
        for b in deps {
            let related = a.starts_with(b) || b.starts_with(a);
            if !related && a < b && graph.get(b).is_some_and(|d| d.contains(a)) {
                out.push(format!("{} <-> {}", a.join("::"), b.join("::")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        for dir in ["src", "src/core", "server/src", "xtask/src"] {
            let found = mutual_imports(&root().join(dir));
            assert!(found.is_empty(), "{dir}: {found:?}");
        }
    }

    #[test]
    fn a_mutual_import_is_found() {
        let dir = std::env::temp_dir().join(format!("cycles-{}", std::process::id()));
        fs::create_dir_all(dir.join("a")).unwrap();
        fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
        fs::write(
            dir.join("a/mod.rs"),
            "use crate::b::f; // crate::c\nmod x;\n",
        )
        .unwrap();
        fs::write(dir.join("a/x.rs"), "use super::super::b;\n").unwrap();
        fs::write(dir.join("b.rs"), "pub fn f() { crate::a::g() }\n").unwrap();
        let found = mutual_imports(&dir);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, vec!["a <-> b".to_owned()]);
    }
}
