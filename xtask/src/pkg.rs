//! `cargo xtask pkg`: the npm package in `pkg/`.
//!
//! Release build for wasm32, wasm-bindgen for the `web` and `bundler` targets,
//! wasm-opt (npm binaryen; Debian's is too old for reference types), esbuild
//! on the JS, short import names for `web` (`names.rs`), then the files of
//! `pkg-template/` merged in, with an `index.js` per target that also
//! exports the `ReplayError` class from the wasm-bindgen snippet and warns
//! of a second client of one target (`web`'s also guards `init()`), and the
//! two halves of a client run in a worker (`worker.js`, `worker-client.js`).

use crate::cmd::{self, root, run, Result};
use crate::{names, order, setup};
use std::fs;
use std::path::{Path, PathBuf};

/// The wasm-bindgen targets shipped, each in its own folder of the package.
const TARGETS: [&str; 2] = ["web", "bundler"];

/// Builds the package; returns its folder.
pub fn build() -> Result<PathBuf> {
    let wasm = build_wasm()?;
    let pkg = root().join("pkg");
    let _ = fs::remove_dir_all(&pkg);
    for target in TARGETS {
        let out = pkg.join(target);
        cmd::step(&format!("pkg: wasm-bindgen --target {target}"), || {
            run(
                "wasm-bindgen",
                &[
                    "--target",
                    target,
                    "--out-dir",
                    out.to_str().expect("utf-8 path"),
                    "--out-name",
                    "replay_client",
                    wasm.to_str().expect("utf-8 path"),
                ],
            )
        })?;
        cmd::step(&format!("pkg: wasm-opt ({target})"), || optimise(&out))?;
        cmd::step(&format!("pkg: minify glue ({target})"), || minify(&out))?;
        if target == "web" {
            cmd::step("pkg: short import names (web)", || {
                names::shorten_imports(&out)
            })?;
        }
        write_index(&out, target)?;
        add_worker_entries(&out)?;
        if target == "web" {
            bundle_entry(&out)?;
        }
    }
    add_binding_entries(&pkg.join("web"))?;
    for file in ["package.json", "README.md"] {
        fs::copy(root().join("pkg-template").join(file), pkg.join(file))
            .map_err(|e| format!("copy pkg-template/{file}: {e}"))?;
    }
    Ok(pkg)
}

/// Flags of the size build: std rebuilt with `panic=immediate-abort`, no
/// panic locations, no `Debug` text. Measured on this crate (wasm-opt -Oz,
/// gzip -9): 103.9 KB -> 93.6 KB. They are unstable flags, enabled with
/// RUSTC_BOOTSTRAP on the stable release pinned in `rust-toolchain.toml`
/// (so the bytes do not depend on the machine's default toolchain); they
/// change only what a panic prints (nothing: the module aborts) and what
/// `{:?}` writes.
const SIZE_RUSTFLAGS: &str =
    "-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none -Zfmt-debug=none";

/// `cargo build` of the SDK's release wasm.
const BUILD_ARGS: [&str; 7] = [
    "build",
    "--release",
    "--lib",
    "-p",
    "replay-client",
    "--target",
    "wasm32-unknown-unknown",
];

/// The release wasm: the size build when the toolchain allows it (needs the
/// rust-src component), else a plain stable release build. std is rebuilt
/// with `optimize_for_size` too (smaller std algorithms: 0.8 KB gz,
/// docs/size.md).
/// `REPLAY_PKG_STABLE=1` forces the plain build.
fn build_wasm() -> Result<PathBuf> {
    if std::env::var_os("REPLAY_PKG_STABLE").is_none() {
        let dir = root().join("target/size-build");
        let args = [
            &BUILD_ARGS[..],
            &[
                "-Z",
                "build-std=std,panic_abort",
                "-Z",
                "build-std-features=optimize_for_size",
            ],
        ]
        .concat();
        let env = [
            ("RUSTC_BOOTSTRAP", "1"),
            ("RUSTFLAGS", SIZE_RUSTFLAGS),
            ("CARGO_TARGET_DIR", dir.to_str().expect("utf-8 path")),
        ];
        let built = cmd::step("pkg: cargo build (wasm32, release, size build)", || {
            cmd::run_in(&root(), "cargo", &args, &env)
        });
        match built {
            Ok(()) => return Ok(dir.join("wasm32-unknown-unknown/release/replay_client.wasm")),
            Err(e) => eprintln!("warning: size build failed ({e}); using the stable release build"),
        }
    }
    cmd::step("pkg: cargo build (wasm32, release)", || {
        run("cargo", &BUILD_ARGS)
    })?;
    Ok(root().join("target/wasm32-unknown-unknown/release/replay_client.wasm"))
}

fn optimise(out: &Path) -> Result {
    let file = out.join("replay_client_bg.wasm");
    let wasm = fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    fs::write(&file, order::sort_names(&wasm)?).map_err(|e| format!("{}: {e}", file.display()))?;
    let file = file.to_str().expect("utf-8 path");
    let wasm_opt = setup::node_bin("wasm-opt");
    cmd::run_in(
        &root(),
        wasm_opt.to_str().expect("utf-8 path"),
        &[
            "-Oz",
            // Repeats -Oz while it still shrinks the module: 0.3 KB gz
            // for a few seconds of build.
            "--converge",
            // Rust's wasm32 linker puts the stack first (it grows down from
            // 1 MiB towards 0, data above it), so the low 1 KiB is reached
            // only by a stack already overflowing: wasm-opt may fold
            // constant offsets into loads and stores (−0.45 KB gz).
            "--low-memory-unused",
            // Last, on the optimised module: functions ordered by the sort
            // keys `order.rs` wrote into the name section (one trait
            // method's impls, one type's methods side by side), so gzip
            // finds their repeats within its window: −0.96 KB gz by plain
            // names, −1.1 KB more by those keys. Order changes no code.
            "--reorder-functions-by-name",
            "--enable-bulk-memory",
            "--enable-nontrapping-float-to-int",
            "--enable-reference-types",
            "--enable-sign-ext",
            "--enable-mutable-globals",
            "--enable-multivalue",
            file,
            "-o",
            file,
        ],
        &[],
    )
}

/// Minifies wasm-bindgen's JS glue and the `browser.js` snippet in place
/// (esbuild, no bundling): plain `<script type="module">` users load them as
/// shipped (glue 6.6 -> 4.6 KB gz; snippet 3.0 -> 1.6 KB gz).
/// `new URL("….wasm", import.meta.url)` survives, so bundlers still find
/// the wasm asset.
fn minify(out: &Path) -> Result {
    let glue = out.join("replay_client.js");
    let text = fs::read_to_string(&glue).map_err(|e| format!("{}: {e}", glue.display()))?;
    fs::write(&glue, drop_duplicate_import_keys(&text))
        .map_err(|e| format!("{}: {e}", glue.display()))?;
    let mut files: Vec<PathBuf> = ["replay_client.js", "replay_client_bg.js"]
        .iter()
        .map(|name| out.join(name))
        .filter(|file| file.exists())
        .collect();
    js_files(&out.join("snippets"), &mut files)?;
    minify_files(&files)
}

/// wasm-bindgen 0.2.130 names the `browser.js` snippet twice in the web
/// glue's imports object (`"./snippets/…/browser.js": import1,` then
/// `…: import2,`, two namespace imports of the same module), which esbuild
/// reports as a duplicate key. Both name the same module, so the later entry
/// is dropped: the object is the same (a later key overwrote the earlier).
fn drop_duplicate_import_keys(js: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::with_capacity(js.len());
    for line in js.split_inclusive('\n') {
        let entry = line
            .trim()
            .strip_suffix(',')
            .and_then(|e| e.split_once("\": import"));
        if let Some((key, _)) = entry {
            if key.starts_with('"') && !seen.insert(key.to_owned()) {
                continue;
            }
        }
        out.push_str(line);
    }
    out
}

fn minify_files(files: &[PathBuf]) -> Result {
    let esbuild = setup::node_bin("esbuild");
    for file in files {
        let file = file.to_str().expect("utf-8 path");
        cmd::run_in(
            &root(),
            esbuild.to_str().expect("utf-8 path"),
            &[
                file,
                "--minify",
                "--format=esm",
                "--log-level=warning",
                "--allow-overwrite",
                &format!("--outfile={file}"),
            ],
            &[],
        )?;
    }
    Ok(())
}

/// Where wasm-bindgen put the snippet `src/wasm/{file}`, relative to `out`.
pub fn snippet(out: &Path, file: &str) -> Result<String> {
    let snippets = out.join("snippets");
    for entry in fs::read_dir(&snippets).map_err(|e| format!("{}: {e}", snippets.display()))? {
        let dir = entry.map_err(|e| e.to_string())?.path();
        if dir.join("src/wasm").join(file).exists() {
            let name = dir.file_name().expect("dir name").to_string_lossy();
            return Ok(format!("./snippets/{name}/src/wasm/{file}"));
        }
    }
    Err(format!("no snippet for src/wasm/{file}"))
}

/// The snippet of the `ReplayError` class (`src/wasm/replay_error.js`).
fn error_snippet(out: &Path) -> Result<String> {
    snippet(out, "replay_error.js")
}

/// Writes `text` to the file `name` in `out`.
fn write(out: &Path, name: &str, text: &str) -> Result {
    fs::write(out.join(name), text).map_err(|e| format!("write {name}: {e}"))
}

/// The web entry's `init`/`initSync`: the glue's, noting that the wasm is
/// loaded, so that `ReplayClient.connect` before it throws a `ReplayError`
/// that says what to do instead of the glue's `TypeError` (a newcomer's
/// first mistake; the check is `NOT_INITIALIZED`). The bundler
/// target instantiates the wasm on import: it has neither. The hosts
/// (`shared.js`, `worker.js`) import the glue itself and await its `init`
/// before any client exists.
const INIT_GUARD: &str = r#"import glueInit, { initSync as glueInitSync, ReplayClient } from "./replay_client.js";
let loaded = false;
/** Loads the wasm (once); await it before `ReplayClient.connect`. */
export default async function init(options) {
  const out = await glueInit(options);
  loaded = true;
  return out;
}
/** Loads the wasm from bytes or a `WebAssembly.Module`, synchronously. */
export function initSync(options) {
  const out = glueInitSync(options);
  loaded = true;
  return out;
}
"#;

/// The web entry's call of the glue's `connect`, at `CONNECT_CALL` in
/// `SECOND_CLIENT_WARNING`. `loaded` alone cannot say the wasm is missing:
/// a host script (`shared.js`, `worker.js`) loads it through the glue, and
/// importing this entry too (for `init`'s exports, say) installs this
/// wrapper on the same class. So the glue is called, and its own
/// `TypeError` of an unloaded module (it reads an export of `undefined`)
/// becomes `not_initialized`.
const NOT_INITIALIZED: &str = r#"  let client;
  try {
    client = connect.call(this, options);
  } catch (err) {
    if (loaded || !(err instanceof TypeError)) throw err;
    throw new ReplayError(
      "not_initialized",
      "the client's wasm is not loaded yet: call `await init()` (the package's default export) once before ReplayClient.connect",
    );
  }
"#;

/// Where an entry calls the glue's `connect` in `SECOND_CLIENT_WARNING`.
const CONNECT_CALL: &str = "  const client = connect.call(this, options);\n";

/// Both entries' `ReplayClient.connect`: warns once of a second client of
/// one target (a newcomer's mistake), one text for the `web` and `bundler` targets.
/// `ReplayClient` is imported before it (`INIT_GUARD` imports it with the
/// loaders: one import of the glue, the web entry's bytes unchanged).
const SECOND_CLIENT_WARNING: &str = r#"import { targetKey } from "./messages.js";
// Clients open per target (`targetKey`, the JS halves' one target rule): a
// second one opens a second stream and writes the same stored value, almost
// always a component that connects on every render. Warned once per target
// in the console, not refused (two views of one session may be meant).
const open = new Map();
const warned = new Set();
const release = (key) => open.set(key, (open.get(key) ?? 1) - 1);
const collected = new FinalizationRegistry(release);
const connect = ReplayClient.connect;
ReplayClient.connect = function (options) {
  const client = connect.call(this, options);
  const key = targetKey(options);
  open.set(key, (open.get(key) ?? 0) + 1);
  if (open.get(key) > 1 && !warned.has(key)) {
    warned.add(key);
    console.warn(`replay-client: a second client connected to ${key} while the first is open: two streams, one stored state. Connect once and share the client, or close() the first.`);
  }
  const token = {};
  collected.register(client, key, token);
  const close = client.close;
  let closed = false;
  client.close = function () {
    if (!closed) {
      closed = true;
      collected.unregister(token);
      release(key);
    }
    return close.call(this);
  };
  return client;
};
"#;

/// The entry's code after its exports: for `web` the init guard and the
/// warning with the not-initialized check, for `bundler` the warning alone.
fn entry_code(target: &str) -> String {
    debug_assert_eq!(SECOND_CLIENT_WARNING.matches(CONNECT_CALL).count(), 1);
    if target == "web" {
        let connect = SECOND_CLIENT_WARNING.replacen(CONNECT_CALL, NOT_INITIALIZED, 1);
        format!("{INIT_GUARD}{connect}")
    } else {
        format!("import {{ ReplayClient }} from \"./replay_client.js\";\n{SECOND_CLIENT_WARNING}")
    }
}

fn write_index(out: &Path, target: &str) -> Result {
    let snippet = error_snippet(out)?;
    let default_export = if target == "web" {
        "export { default, initSync } from \"./replay_client.js\";\n"
    } else {
        ""
    };
    let guard = entry_code(target);
    let browser = self::snippet(out, "browser.js")?;
    let js = format!(
        "// Entry point: the wasm-bindgen glue plus the ReplayError class.\n\
         import {{ ReplayError }} from \"{snippet}\";\n\
         export * from \"./replay_client.js\";\n\
         export {{ prefetch }} from \"{browser}\";\n\
         export {{ ReplayError }};\n{guard}"
    );
    let dts = format!(
        "export * from \"./replay_client.js\";\n{default_export}\
         export {{ ReplayError }} from \"./replay_error.js\";\n\
         export {{ prefetch }} from \"./prefetch.js\";\n"
    );
    write(out, "index.js", &js)?;
    soften_dispose_typing(&out.join("replay_client.d.ts"))?;
    document_glue_types(out)?;
    write(out, "index.d.ts", &dts)?;
    // The class alone, beside its types: what `worker-client.js` imports
    // (it loads no glue), the same class as the entry's.
    write(
        out,
        "replay_error.js",
        &format!("export {{ ReplayError }} from \"{snippet}\";\n"),
    )?;
    fs::copy(
        root().join("pkg-template/replay_error.d.ts"),
        out.join("replay_error.d.ts"),
    )
    .map_err(|e| format!("copy replay_error.d.ts: {e}"))?;
    // `prefetch` alone: a first visit's first page asked for before the
    // wasm is loaded (the `bundler` entry instantiates it on import).
    write(
        out,
        "prefetch.js",
        &format!("export {{ prefetch }} from \"{browser}\";\n"),
    )?;
    fs::copy(
        root().join("pkg-template/prefetch.d.ts"),
        out.join("prefetch.d.ts"),
    )
    .map_err(|e| format!("copy prefetch.d.ts: {e}"))?;
    // wasm-bindgen writes a package.json and README only with wasm-pack; make sure
    // nothing stale shadows the package root's files.
    let _ = fs::remove_file(out.join(".gitignore"));
    Ok(())
}

/// The halves of a client hosted by a worker (`pkg-template/`), each
/// speaking the one schema of `messages.js` / `messages.d.ts`: in a
/// dedicated worker `worker.js` (`serve`) and the page's `worker-client.js`
/// (`WorkerClient`); in the SharedWorker `shared.js` (`serveShared`) and the
/// page's `shared-client.js` (`SharedClient`). The hosts are one `Host`
/// (`host.js`), the page halves one `PageClient` (`page-client.js`). The
/// page halves load no wasm: they take `ReplayError` from
/// `replay_error.js`, written by `write_index`.
fn add_worker_entries(out: &Path) -> Result {
    for file in [
        "messages.js",
        "messages.d.ts",
        "worker.d.ts",
        "worker-client.d.ts",
        "shared.d.ts",
        "shared-client.d.ts",
    ] {
        fs::copy(root().join("pkg-template").join(file), out.join(file))
            .map_err(|e| format!("copy pkg-template/{file}: {e}"))?;
    }
    // `messages.js` ships for the entry's target rule (`index.js`).
    minify_files(&[out.join("messages.js")])?;
    // Each entry is one file, with what it shares with the others (`host.js`
    // or `page-client.js`, and `messages.js`) inlined: a context loads one
    // module of its own (a module more costs its own gzip, ~100 B, and the
    // SharedWorker has less to spare). Inlined is only what no other module
    // needs as the same instance; what must be one stays an import: the
    // glue, `ReplayError`, the entry.
    let error = error_snippet(out)?;
    let browser = snippet(out, "browser.js")?;
    let web = out.file_name().is_some_and(|name| name == "web");
    for entry in [
        "worker.js",
        "worker-client.js",
        "shared.js",
        "shared-client.js",
    ] {
        if web && (entry == "worker.js" || entry == "shared.js") {
            bundle_host(entry, out)?;
            continue;
        }
        bundle(
            &root().join("pkg-template").join(entry),
            &out.join(entry),
            &error,
            &browser,
        )?;
    }
    Ok(())
}

/// The `web` entry (`index.js`, with its init guard) minified like the
/// glue, with what it takes of `messages.js` (the target rule of its
/// second-client warning) inlined: the glue and the snippets stay imports
/// (one instance each, `ReplayError` the page halves' too). Two modules
/// fewer on the page (`messages.js` and `replay_error.js`): over HTTP/1.1
/// a browser opens six connections to an origin, and the page's module,
/// the wasm and the entry's four made eight, the last two a round trip
/// behind the rest on a first visit.
fn bundle_entry(out: &Path) -> Result {
    let esbuild = setup::node_bin("esbuild");
    let entry = out.join("index.js");
    cmd::run_in(
        out,
        esbuild.to_str().expect("utf-8 path"),
        &[
            "index.js",
            "--bundle",
            "--minify",
            "--format=esm",
            "--log-level=warning",
            "--allow-overwrite",
            "--external:./replay_client.js",
            "--external:./snippets/*",
            "--outfile=index.js",
        ],
        &[],
    )?;
    let code = fs::read_to_string(&entry).map_err(|e| e.to_string())?;
    if code.contains("from\"./messages.js\"") || code.contains("from\"./replay_error.js\"") {
        return Err(format!(
            "{} should carry messages.js inlined",
            entry.display()
        ));
    }
    Ok(())
}

/// A host of the `web` target (`shared.js`, `worker.js`) with the glue and
/// its snippets inlined: a worker's module graph is its own (nothing else
/// in it needs the glue's instance, and errors reach pages as messages),
/// so one file replaces a chain of three module levels (host, glue,
/// snippet: each fetched only once the level above has come, a round trip
/// each on a first visit) and ~1 KB gz of per-file gzip overhead in the
/// SharedWorker. The glue's `new URL("…_bg.wasm", import.meta.url)` then
/// resolves beside the host, where the wasm is. The `bundler` target keeps
/// the glue an import: its wasm imports the glue's module by name, which
/// an inlined copy would not be.
fn bundle_host(entry: &str, out: &Path) -> Result {
    // Bundled from inside `out`, where the glue, `prefetch.js` and
    // `messages.js` are; the host's own module only for this build.
    let host = out.join("host.js");
    let source = out.join(format!("{entry}.src.js"));
    fs::copy(root().join("pkg-template/host.js"), &host)
        .map_err(|e| format!("copy host.js: {e}"))?;
    // What the host takes of the snippet beside `prefetch`, for this build
    // only: no entry of the package (apps have no use for it).
    let first_page = out.join("first-page.js");
    write(
        out,
        "first-page.js",
        &format!(
            "export {{ adoptFirstPage }} from \"{}\";\n",
            snippet(out, "browser.js")?
        ),
    )?;
    fs::copy(root().join("pkg-template").join(entry), &source)
        .map_err(|e| format!("copy pkg-template/{entry}: {e}"))?;
    let esbuild = setup::node_bin("esbuild");
    let outfile = out.join(entry);
    let built = cmd::run_in(
        &root(),
        esbuild.to_str().expect("utf-8 path"),
        &[
            source.to_str().expect("utf-8 path"),
            "--bundle",
            "--minify",
            "--format=esm",
            "--log-level=warning",
            "--external:./index.js",
            &format!("--outfile={}", outfile.to_str().expect("utf-8 path")),
        ],
        &[],
    );
    let _ = fs::remove_file(&host);
    let _ = fs::remove_file(&source);
    let _ = fs::remove_file(&first_page);
    built?;
    let code = fs::read_to_string(&outfile).map_err(|e| e.to_string())?;
    // Minified imports read `from"./…"`; the wasm's import object keeps
    // the snippets' paths as names, which is no import.
    if code.contains("from\"./") || !code.contains("import.meta.url") {
        return Err(format!(
            "{} should import nothing of the package and find the wasm beside it",
            outfile.display()
        ));
    }
    Ok(())
}

/// `entry` and the package's stateless modules it imports, minified into
/// `outfile`; the glue, `ReplayError` and `index.js` stay imports.
/// `ReplayError` is imported from its snippet (`error`), where
/// `replay_error.js` re-exports it from: the same class, one module fewer
/// in a row before the entry runs (a first visit fetches each level of
/// imports only once the level above has come).
fn bundle(entry: &Path, outfile: &Path, error: &str, browser: &str) -> Result {
    let esbuild = setup::node_bin("esbuild");
    cmd::run_in(
        &root(),
        esbuild.to_str().expect("utf-8 path"),
        &[
            entry.to_str().expect("utf-8 path"),
            "--bundle",
            "--minify",
            "--format=esm",
            "--log-level=warning",
            "--external:./replay_client.js",
            "--external:./replay_error.js",
            "--external:./index.js",
            "--external:./prefetch.js",
            "--external:./first-page.js",
            &format!("--outfile={}", outfile.to_str().expect("utf-8 path")),
        ],
        &[],
    )?;
    let code = fs::read_to_string(outfile).map_err(|e| e.to_string())?;
    let from = "\"./replay_error.js\"";
    if !code.contains(from) {
        return Err(format!("{} no longer imports {from}", outfile.display()));
    }
    // `prefetch` too, from the snippet the glue imports (`prefetch.js`
    // re-exports it): one module fewer in a row.
    let code = code
        .replace("\"./prefetch.js\"", &format!("\"{browser}\""))
        .replace("\"./first-page.js\"", &format!("\"{browser}\""));
    fs::write(outfile, code.replace(from, &format!("\"{error}\"")))
        .map_err(|e| format!("write {}: {e}", outfile.display()))
}

/// The framework bindings (`replay-client/react`, `/vue`, `/svelte`) and
/// what they share (`connection.js`), in `web/` only: they use no wasm and
/// no glue, so one copy serves both targets. Each imports its framework,
/// an optional peer dependency, and nothing of the package's wasm.
fn add_binding_entries(web: &Path) -> Result {
    let mut minified = Vec::new();
    for name in ["connection", "react", "vue", "svelte"] {
        for file in [format!("{name}.js"), format!("{name}.d.ts")] {
            fs::copy(root().join("pkg-template").join(&file), web.join(&file))
                .map_err(|e| format!("copy pkg-template/{file}: {e}"))?;
        }
        minified.push(web.join(format!("{name}.js")));
    }
    minify_files(&minified)
}

/// wasm-bindgen types `[Symbol.dispose]()`, which only exists in TypeScript's
/// `esnext` lib; consumers on ES2022 would fail to compile. The line is kept
/// for `using` users and ignored elsewhere (as emscripten's typings do).
/// And it declares the glue's `free()`, which releases the Rust value: any
/// call after it fails with "null pointer passed to rust". Not
/// declared, it is not part of the API: `close()` ends a client, and the
/// value is released when it is collected (or by `using`).
fn soften_dispose_typing(dts: &Path) -> Result {
    let text = fs::read_to_string(dts).map_err(|e| format!("{}: {e}", dts.display()))?;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.trim() == "free(): void;" {
            continue;
        }
        if line.trim_start().starts_with("[Symbol.dispose]") {
            let indent = &line[..line.len() - line.trim_start().len()];
            // The JSDoc above the `@ts-ignore`, which covers the next line only.
            out.push_str(indent);
            out.push_str(DISPOSE_DOC);
            out.push('\n');
            out.push_str(indent);
            out.push_str("// @ts-ignore: Symbol.dispose needs lib esnext; older libs skip it\n");
        }
        out.push_str(line);
        out.push('\n');
    }
    fs::write(dts, out).map_err(|e| format!("{}: {e}", dts.display()))
}

/// `[Symbol.dispose]`'s JSDoc: wasm-bindgen writes none.
const DISPOSE_DOC: &str = "/** `using client = ReplayClient.connect(…)`: closes the client and releases its Rust value at the block's end; a call after it throws. */";

/// The JSDoc of the web glue's loaders, instead of wasm-bindgen's (which
/// says nothing of `connect`, and names parameters the package does not).
const INIT_DOC: &str = "/**
 * Loads the wasm, once (later calls resolve to the same): await it before
 * `ReplayClient.connect`, which throws a `ReplayError` with code
 * `not_initialized` until then. Without an argument it fetches
 * `replay_client_bg.wasm` beside this module (`new URL(…, import.meta.url)`,
 * which bundlers follow); `{ module_or_path }` gives another URL, a
 * `Response`, the bytes or a compiled `WebAssembly.Module` (passing it bare
 * is deprecated). Resolves to the module's raw exports.
 */";
const INIT_SYNC_DOC: &str = "/**
 * Loads the wasm synchronously from `{ module }`, its bytes or a compiled
 * `WebAssembly.Module` (passing it bare is deprecated), e.g. in a worker
 * that was handed the module; then `ReplayClient.connect` may be called.
 * Returns the module's raw exports.
 */";
const INIT_INPUT_DOC: &str = "/** What `init()` loads the wasm from: a URL or request, a `Response`, the bytes or a compiled module. */";
const SYNC_INIT_INPUT_DOC: &str =
    "/** What `initSync()` loads the wasm from: the bytes or a compiled module. */";
const INIT_OUTPUT_DOC: &str = "/** The wasm module's exports, as `init()` resolves them: wasm-bindgen's ABI, which the glue calls (the API is `ReplayClient`). */";
const GLUE_ONLY_DOC: &str =
    "/** Part of wasm-bindgen's ABI, called by the glue only (not an API). */";

/// JSDoc for what wasm-bindgen declares bare: `init()`'s input and output
/// types in the web glue's `replay_client.d.ts`, and every wasm export in it
/// (`InitOutput`) and in `replay_client_bg.wasm.d.ts`, so that every
/// exported item of the package has some (`tests/js/declarations.test.mjs`).
fn document_glue_types(out: &Path) -> Result {
    for name in ["replay_client.d.ts", "replay_client_bg.wasm.d.ts"] {
        let path = out.join(name);
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let wasm_dts = name.ends_with(".wasm.d.ts");
        fs::write(&path, document_declarations(&text, wasm_dts))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// `dts` with the JSDoc of `document_glue_types` added (wasm-bindgen's own on
/// `initSync` and the default export replaced). `wasm_dts`: it is the
/// `.wasm.d.ts`, whose `export const`s are the wasm's exports.
fn document_declarations(dts: &str, wasm_dts: bool) -> String {
    let mut out = String::with_capacity(dts.len() * 2);
    // A JSDoc block read but not yet written: the line after it decides.
    let mut pending = String::new();
    let mut in_block = false;
    let mut in_init_output = false;
    for line in dts.lines() {
        let trimmed = line.trim_start();
        if in_block || trimmed.starts_with("/**") {
            pending.push_str(line);
            pending.push('\n');
            in_block = !trimmed.trim_end().ends_with("*/");
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        let export = if in_init_output {
            trimmed.strip_prefix("readonly ")
        } else if wasm_dts {
            trimmed.strip_prefix("export const ")
        } else {
            None
        }
        .and_then(|rest| rest.split_once(':'))
        .map(|(name, _)| name.trim());
        let own = if let Some(name) = export {
            Some(format!("{indent}{}", wasm_export_doc(name)))
        } else if trimmed.starts_with("export function initSync(") {
            Some(INIT_SYNC_DOC.to_owned())
        } else if trimmed.starts_with("export default function __wbg_init") {
            Some(INIT_DOC.to_owned())
        } else if trimmed.starts_with("export type InitInput ") {
            Some(INIT_INPUT_DOC.to_owned())
        } else if trimmed.starts_with("export type SyncInitInput ") {
            Some(SYNC_INIT_INPUT_DOC.to_owned())
        } else if trimmed.starts_with("export interface InitOutput ") {
            in_init_output = true;
            Some(INIT_OUTPUT_DOC.to_owned())
        } else {
            if in_init_output && trimmed.starts_with('}') {
                in_init_output = false;
            }
            None
        };
        // Ours replaces wasm-bindgen's block, if there was one.
        match own {
            Some(doc) => {
                out.push_str(&doc);
                out.push('\n');
            }
            None => out.push_str(&pending),
        }
        pending.clear();
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&pending);
    out
}

/// One line of JSDoc for the wasm export `name`.
fn wasm_export_doc(name: &str) -> String {
    if name == "memory" {
        return "/** The module's linear memory. */".to_owned();
    }
    match name.strip_prefix("replayclient_") {
        Some(method) => format!(
            "/** `ReplayClient.{method}` in wasm-bindgen's ABI: call the class's method instead. */"
        ),
        None => GLUE_ONLY_DOC.to_owned(),
    }
}

/// Raw and gzipped sizes of the shipped wasm and JS glue of the web target.
pub fn sizes(pkg: &Path) -> Result<Vec<(String, u64, u64)>> {
    let web = pkg.join("web");
    let mut files = vec![web.join("replay_client_bg.wasm")];
    // Every JS file a browser loads: entry, glue and snippets.
    js_files(&web, &mut files)?;
    let mut rows = Vec::new();
    for file in files {
        let bytes = fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let name = file
            .strip_prefix(&web)
            .unwrap_or(&file)
            .display()
            .to_string();
        rows.push((name, bytes.len() as u64, gzip_len(&file)?));
    }
    Ok(rows)
}

/// Size budgets, gzipped (docs/size.md): what one context loads.
const PAGE_HALF_BUDGET: u64 = 6 * 1024;
const CONTEXT_BUDGET: u64 = 120 * 1024;

/// What each context loads from the `web` target, summed file by file
/// (each is fetched and gzipped on its own): the page half of the shared
/// host, everything the SharedWorker loads, the on-page client. Fails when
/// one is over its budget.
pub fn context_sizes(pkg: &Path) -> Result<Vec<ContextSize>> {
    let web = pkg.join("web");
    let error = error_snippet(&web)?;
    let error = error.trim_start_matches("./");
    let browser = snippet(&web, "browser.js")?;
    let browser = browser.trim_start_matches("./");
    // The entry imports the glue; the hosts (`shared.js`, `worker.js`)
    // carry it inlined (`bundle_host`).
    let glue = ["replay_client.js", browser, error, "replay_client_bg.wasm"];
    // The entry carries the JS halves' target rule (`messages.js`, for its
    // second-client warning) inlined (`bundle_entry`).
    let client = [&["index.js"][..], &glue[..]].concat();
    // `shared-client.js` and `shared.js` are bundles: `messages.js` is in
    // them (`add_worker_entries`); the page half imports `ReplayError` from
    // its snippet.
    let contexts: [(&str, Vec<&str>, u64); 3] = [
        (
            "page half of the shared host (shared-client.js, no wasm)",
            vec!["shared-client.js", error],
            PAGE_HALF_BUDGET,
        ),
        (
            "the SharedWorker (shared.js, the glue inlined)",
            vec!["shared.js", "replay_client_bg.wasm"],
            CONTEXT_BUDGET,
        ),
        (
            "the on-page client (index.js)",
            client.to_vec(),
            CONTEXT_BUDGET,
        ),
    ];
    let mut rows = Vec::new();
    for (name, files, budget) in contexts {
        let (mut raw, mut gz) = (0, 0);
        for file in files {
            let path = web.join(file);
            raw += fs::metadata(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            gz += gzip_len(&path)?;
        }
        if gz > budget {
            return Err(format!(
                "{name}: {gz} bytes gzipped, over its budget of {budget}"
            ));
        }
        rows.push(ContextSize {
            name: name.to_owned(),
            raw,
            gz,
            budget,
        });
    }
    Ok(rows)
}

/// What one context loads, summed over its files, and its gzipped budget.
pub struct ContextSize {
    /// Which context.
    pub name: String,
    /// Bytes as shipped.
    pub raw: u64,
    /// Bytes after `gzip -9`, file by file.
    pub gz: u64,
    /// Its budget, gzipped.
    pub budget: u64,
}

fn js_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    for entry in fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            js_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "js") {
            out.push(path);
        }
    }
    Ok(())
}

fn gzip_len(file: &Path) -> Result<u64> {
    let out = std::process::Command::new("gzip")
        .args(["-9", "-c"])
        .arg(file)
        .output()
        .map_err(|e| format!("gzip: {e}"))?;
    Ok(out.stdout.len() as u64)
}

/// `cargo xtask pkg`: set up, build, print sizes, and `npm pack` into
/// `target/npm/`. Returns the package's folder.
pub fn run_task() -> Result<PathBuf> {
    setup::ensure_package_tools()?;
    let pkg = build()?;
    for (name, raw, gz) in sizes(&pkg)? {
        println!("{name}: {raw} bytes, {gz} gzipped");
    }
    for c in context_sizes(&pkg)? {
        println!("{}: {} bytes, {} gzipped", c.name, c.raw, c.gz);
    }
    let packs = root().join("target/npm");
    fs::create_dir_all(&packs).map_err(|e| format!("{}: {e}", packs.display()))?;
    cmd::run_in(
        &pkg,
        "npm",
        &[
            "pack",
            "--pack-destination",
            packs.to_str().expect("utf-8 path"),
        ],
        &[],
    )?;
    println!(
        "package: {} (tarball in {})",
        pkg.display(),
        packs.display()
    );
    Ok(pkg)
}

#[cfg(test)]
mod tests {
    use super::{document_declarations, drop_duplicate_import_keys, entry_code, INIT_SYNC_DOC};

    #[test]
    fn both_entries_warn_of_a_second_client_and_only_web_checks_init() {
        let (web, bundler) = (entry_code("web"), entry_code("bundler"));
        for code in [&web, &bundler] {
            assert!(code.contains("replay-client: a second client connected to"));
            assert!(!code.contains("/* before connect */"));
        }
        assert!(web.contains("\"not_initialized\""));
        assert!(web.contains("export default async function init("));
        assert!(!bundler.contains("loaded") && !bundler.contains("init("));
    }

    #[test]
    fn the_glue_types_get_jsdoc_and_ours_replaces_wasm_bindgens() {
        let glue = "export interface InitOutput {\n    readonly memory: WebAssembly.Memory;\n    readonly za: (a: number) => void;\n}\n\n/**\n * wasm-bindgen's.\n */\nexport function initSync(module: SyncInitInput): InitOutput;\n";
        let out = document_declarations(glue, false);
        assert!(out.contains("    /** The module's linear memory. */\n    readonly memory"));
        assert!(out.contains("    /** Part of wasm-bindgen's ABI"));
        assert!(out.contains(&format!("{INIT_SYNC_DOC}\nexport function initSync(")));
        assert!(!out.contains("wasm-bindgen's.\n"));
        let wasm = "export const replayclient_view: (a: number) => any;\n";
        assert_eq!(
            document_declarations(wasm, true),
            format!("/** `ReplayClient.view` in wasm-bindgen's ABI: call the class's method instead. */\n{wasm}")
        );
        // Outside `InitOutput` and the `.wasm.d.ts`, declarations keep their own.
        let class = "export class A {\n    /** Kept. */\n    readonly x: number;\n}\n";
        assert_eq!(document_declarations(class, false), class);
    }

    #[test]
    fn a_module_named_twice_in_the_imports_object_is_named_once() {
        let glue = "return {\n    __proto__: null,\n    \"./replay_client_bg.js\": import0,\n    \"./s/browser.js\": import1,\n    \"./s/browser.js\": import2,\n};\n";
        assert_eq!(
            drop_duplicate_import_keys(glue),
            "return {\n    __proto__: null,\n    \"./replay_client_bg.js\": import0,\n    \"./s/browser.js\": import1,\n};\n"
        );
        let plain = "const a = { \"k\": 1 };\n";
        assert_eq!(drop_duplicate_import_keys(plain), plain);
    }
}
