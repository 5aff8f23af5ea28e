//! A check that no source file tells its own history: a comment, a test's
//! name or a step's label says why, never which round of work or which issue
//! wrote it (`session`, `issue`, `round` or `finding` and its number, or an
//! ordinal round). A newcomer cannot look such a number up in the code, and
//! it does not say whether the line is still true; the history is git's. Run by `cargo test -p xtask`.
//!
//! "Session" is also the protocol's word for a replay session, so only a
//! number right after the word counts (a session id in a sentence reads "the
//! session `s1`" or "seq 0 of a session").

use std::fs;
use std::path::{Path, PathBuf};

/// The folders whose sources are checked, from the repository's root.
const FOLDERS: [&str; 8] = [
    "src",
    "server",
    "pkg-template",
    "tests",
    "xtask",
    "www",
    "benches",
    "examples",
];

/// The extensions of the files checked.
const EXTENSIONS: [&str; 8] = ["rs", "js", "mjs", "ts", "html", "toml", "sh", "css"];

/// Folders never checked: installed packages, build output, test artifacts.
const SKIPPED: [&str; 4] = ["node_modules", "target", "artifacts", "pkg"];

/// Words that, followed by a number, name a round of work or an issue.
const NUMBERED: [&str; 8] = [
    "session", "sessions", "issue", "issues", "round", "rounds", "finding", "findings",
];

/// Phrases that name a round of work or an issue without a number (written
/// in pieces so that this file holds none of them).
const PHRASES: [&str; 5] = [
    concat!("second", " round"),
    concat!("third", " round"),
    concat!("fourth", " round"),
    concat!("fifth", " round"),
    concat!("the ", "issue's"),
];

/// Every checked file under `dir`, at any depth.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && !SKIPPED.contains(&name.as_str()) {
                    dirs.push(path);
                }
            } else if path
                .extension()
                .is_some_and(|e| EXTENSIONS.iter().any(|x| e == *x))
            {
                out.push(path);
            }
        }
    }
    out
}

/// A letter or digit: what may not touch a word or a number for it to count
/// (`_` may: a test's name in snake case is checked too).
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// The 1-based lines of `text` where a history reference starts. A number
/// may follow its word on the next line of the same comment.
fn references(text: &str) -> Vec<usize> {
    let lower = text.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut starts = Vec::new();
    for word in NUMBERED {
        for (at, _) in lower.match_indices(word) {
            let end = at + word.len();
            if (at > 0 && is_word(bytes[at - 1])) || bytes.get(end).copied().is_some_and(is_word) {
                continue;
            }
            let mut i = end;
            while bytes
                .get(i)
                .is_some_and(|b| matches!(b, b' ' | b'\t' | b'#' | b'_'))
            {
                i += 1;
            }
            if bytes.get(i) == Some(&b'\n') {
                // The next line of a comment: `//`, `///`, `//!`, ` * ` or `#`.
                while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
                    i += 1;
                }
                while bytes
                    .get(i)
                    .is_some_and(|b| matches!(b, b'/' | b'!' | b'*' | b'#' | b' ' | b'\t'))
                {
                    i += 1;
                }
            }
            let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            let after = bytes.get(i + digits).copied();
            if (1..=3).contains(&digits) && !after.is_some_and(is_word) {
                starts.push(at);
            }
        }
    }
    for phrase in PHRASES {
        starts.extend(
            lower
                .match_indices(phrase)
                .map(|(at, _)| at)
                .filter(|&at| at == 0 || !is_word(bytes[at - 1])),
        );
    }
    let mut lines: Vec<usize> = starts
        .into_iter()
        .map(|at| lower[..at].matches('\n').count() + 1)
        .collect();
    lines.sort_unstable();
    lines.dedup();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_source_names_the_round_or_issue_that_wrote_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        for folder in FOLDERS {
            for path in files(&root.join(folder)) {
                let text = fs::read_to_string(&path).expect("a source file");
                let rel = path
                    .strip_prefix(&root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                for line in references(&text) {
                    let said = text.lines().nth(line - 1).unwrap_or("").trim();
                    found.push((rel.clone(), line, said.to_owned()));
                }
            }
        }
        found.sort();
        let found: Vec<String> = found
            .into_iter()
            .map(|(file, line, said)| format!("{file}:{line}: {said}"))
            .collect();
        assert!(
            found.is_empty(),
            "{} lines name a round of work or an issue; say why instead:\n{}",
            found.len(),
            found.join("\n")
        );
    }

    #[test]
    fn a_history_reference_is_found() {
        // Written in pieces so that this file itself holds none.
        let text = [
            concat!("/// Bounded (", "issue", " 34)."),
            concat!("// after ", "Session", " 7's profile"),
            concat!("/// one key (", "issue"),
            "/// 12, item 4)",
            concat!("// ---- hardening, ", "second", " round ----"),
            concat!("//! ", "Finding", " 2: slow readers"),
            concat!("/// the ", "issue", "'s scale"),
            concat!("async fn rss_under_the_", "issue", "_26_probe() {"),
        ]
        .join("\n");
        assert_eq!(references(&text), vec![1, 2, 3, 5, 6, 7, 8]);
    }

    #[test]
    fn the_protocol_word_session_is_not_a_reference() {
        let text = [
            "/// seq 0 of a session with a 3 MB log",
            "let session = 1;",
            "fetch(`/v1/sessions/${id}`); // sessions: 2",
            "// 3 rounds, median; the first round's profile",
            "// a session\n// that ends",
            "let issues2 = 0; // sessions 1000 and up",
            "let session_id = 7; let round_trip = 2;",
        ]
        .join("\n");
        assert_eq!(references(&text), Vec::<usize>::new());
    }
}
