//! The TypeScript unions of `src/wasm/api.d.ts` against what the code says,
//! so that a program can switch on them: `ReplayErrorCode` lists every
//! code the client emits (the core's and the wasm layer's `code()` arms,
//! the JS halves' own) and, beside them, only codes the reference server
//! answers with; `InterruptedTurn.reason` is the fold's two reasons.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use replay_client::core::fold::REASON_BOOT_CHANGED;
use replay_client::core::protocol::REASON_WORKER_RESTART;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The quoted lowercase words of `text` (`"a_b"`).
fn quoted(text: &str) -> BTreeSet<String> {
    // A `'"'` char literal is no string's start or end.
    text.replace("'\"'", "")
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .map(str::to_owned)
        .collect()
}

/// The string literals of the union that starts at `start` (through its `;`).
fn union(dts: &str, start: &str) -> BTreeSet<String> {
    let at = dts.find(start).unwrap_or_else(|| panic!("no `{start}`"));
    let end = at + dts[at..].find(';').expect("a declaration ends");
    // Comments hold no quoted codes but may hold quotes of other words.
    let body: String = dts[at..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| !l.trim_start().starts_with("/**"))
        .collect::<Vec<_>>()
        .join("\n");
    quoted(&body)
}

/// The codes a `code()` of this file returns: its `=> "code"` arms.
fn code_arms(path: &str) -> BTreeSet<String> {
    read(path)
        .split("=> \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn replay_error_code_lists_every_code_the_client_emits_and_only_real_ones() {
    let dts = read("src/wasm/api.d.ts");
    let listed = union(&dts, "export type ReplayErrorCode =");
    let mut emitted = code_arms("src/core/machine/error.rs");
    emitted.extend(code_arms("src/wasm/error.rs"));
    // The JS halves' own codes.
    for (file, code) in [
        ("pkg-template/messages.js", "schema_mismatch"),
        ("xtask/src/pkg.rs", "not_initialized"),
    ] {
        assert!(
            read(file).contains(&format!("\"{code}\"")),
            "{file} says {code}"
        );
        emitted.insert(code.to_owned());
    }
    // Never reaches the application: a message whose claim another client
    // holds stays queued (tests/machine_outbox.rs).
    assert!(emitted.remove("claimed"));
    let missing: Vec<_> = emitted.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "emitted, not in ReplayErrorCode: {missing:?}"
    );
    // What is listed and not the client's is a code the server answers with.
    let mut server = BTreeSet::new();
    for dir in ["server/src", "server/src/api"] {
        for entry in fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                server.extend(quoted(&fs::read_to_string(path).unwrap()));
            }
        }
    }
    let unknown: Vec<_> = listed
        .iter()
        .filter(|c| !emitted.contains(*c) && !server.contains(*c))
        .collect();
    assert!(unknown.is_empty(), "listed, emitted by nobody: {unknown:?}");
}

#[test]
fn an_interrupted_turns_reason_is_one_of_the_folds() {
    let dts = read("src/wasm/api.d.ts");
    let interface = &dts[dts
        .find("export interface InterruptedTurn")
        .expect("declared")..];
    let listed = union(interface, "reason:");
    let reasons: BTreeSet<String> = [REASON_WORKER_RESTART, REASON_BOOT_CHANGED]
        .map(str::to_owned)
        .into();
    assert_eq!(listed, reasons);
}
