//! `cargo xtask test`: every test layer, in order, after set-up.
//!
//! 1. format and lints (native, and wasm32 for the SDK crate);
//! 2. the native workspace suite (core, conformance data, property tests,
//!    server), the README's Rust snippet compared with its example, and
//!    `sse-dump` run on a captured stream;
//! 3. the core suite and the browser SDK suites compiled to wasm and run by
//!    wasm-bindgen-test in headless Chromium, against a live `replay-server`;
//! 4. the npm package: built and optimised, its declarations read with the
//!    TypeScript API (`tests/js/declarations.test.mjs`: JSDoc on every
//!    export, no wasm export declared that the module lacks), packed,
//!    checked by `publint` and `@arethetypeswrong/cli`, type-checked from a consumer with
//!    `tsc --strict` (with the README's npm quickstart and the bindings'
//!    types), bundled by Vite; the React, Vue and Svelte apps and the npm
//!    quickstart bundled by one more Vite build;
//! 5. end to end: Playwright drives the demo page (optimised package) through
//!    a seeded fault schedule and compares it with the server's transcript;
//!    the same page on two nodes of a throwaway Postgres and Redis (the
//!    live tail) behind a round-robin proxy (`tests/js/cluster.test.mjs`: faults, a node
//!    SIGKILLed mid-turn, Postgres restarted); then the binding apps and both README quickstarts run against a server
//!    of their own (`tests/js/bindings.test.mjs`);
//! 6. the engines: the demo in every mode on Firefox ESR, WebKitGTK and WPE
//!    WebKit (`tests/js/engines/`), two lanes in parallel.

use crate::cmd::{self, path_with, root, run_in, Result};
use crate::server::Server;
use crate::{demo, nginx, pkg, postgres, quickstarts, redis, setup, size_table};
use std::fs;
use std::path::Path;

/// Runs every layer; `--skip-setup` trusts the machine as it is,
/// `--only a,b` runs just the named layers (fmt, clippy, native, chromium,
/// package, e2e, engines) and `--test NAME` only that test target in Chromium (e.g.
/// `browser_js_api`), while developing.
pub fn run(args: &[String]) -> Result {
    use cmd::run;
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let only: Option<Vec<&str>> = value_of("--only").map(|list| list.split(',').collect());
    let test_target = value_of("--test").map(String::as_str);
    let wanted = |layer: &str| only.as_ref().is_none_or(|o| o.contains(&layer));
    if !args.iter().any(|a| a == "--skip-setup") {
        setup::ensure_all()?;
    }
    if wanted("fmt") {
        cmd::step("fmt", || run("cargo", &["fmt", "--all", "--check"]))?;
    }
    if wanted("clippy") {
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
    }
    if wanted("native") {
        cmd::step(
            "the core crate links no browser binding",
            core_has_no_browser_bindings,
        )?;
        // The README's promises first: they take seconds.
        cmd::step(
            "README: Rust quickstart = examples/rust-quickstart.rs",
            quickstarts::check_rust_snippet,
        )?;
        cmd::step(
            "README: sse-dump on a captured stream",
            quickstarts::run_sse_dump,
        )?;
        // The cluster tests need a Postgres and a Redis:
        // throwaway ones, removed when this layer ends, passed or failed.
        let pg = postgres::TempPostgres::start()?;
        let tail = redis::TempRedis::start()?;
        let restart = pg.restart_command();
        let (stop, start) = (pg.stop_command(), pg.start_command());
        cmd::step("native tests (with a throwaway Postgres and Redis)", || {
            run_in(
                &root(),
                "cargo",
                &["test", "--workspace"],
                &[
                    (postgres::URL_VAR, &pg.url),
                    (postgres::RESTART_VAR, &restart),
                    (postgres::STOP_VAR, &stop),
                    (postgres::START_VAR, &start),
                    (redis::URL_VAR, &tail.url),
                ],
            )
        })?;
        drop((pg, tail));
        // Ignored by a plain `cargo test` (about a minute); run here so the
        // server's documented memory bound is checked on every submission.
        cmd::step("server load test (memory bound)", || {
            run(
                "cargo",
                &[
                    "test",
                    "-p",
                    "replay-server",
                    "--test",
                    "load_bounds",
                    "--",
                    "--ignored",
                    "--nocapture",
                ],
            )
        })?;
    }
    if wanted("chromium") {
        cmd::step("core + browser SDK tests in headless Chromium", || {
            in_chromium(test_target)
        })?;
    }
    if wanted("package") {
        cmd::step("npm package: pack, tsc --strict, vite build", package)?;
    }
    if wanted("e2e") {
        cmd::step("end to end: demo page in Chromium (Playwright)", e2e)?;
    }
    if wanted("engines") {
        // The e2e layer, when it ran, built the demo site already.
        let built = wanted("e2e");
        cmd::step("engines: the demo on Firefox, WebKitGTK and WPE", || {
            engines(built)
        })?;
    }
    println!("\nall test layers passed");
    Ok(())
}

/// `replay-core`'s dependency tree, for every target, holds no
/// wasm-bindgen, js-sys or web-sys: the core is sans-IO by construction.
fn core_has_no_browser_bindings() -> Result {
    let tree = cmd::output(
        "cargo",
        &[
            "tree",
            "-p",
            "replay-core",
            "--target",
            "all",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ],
    )
    .ok_or("cargo tree -p replay-core failed")?;
    let found: Vec<&str> = tree
        .lines()
        .filter(|l| {
            ["wasm-bindgen", "js-sys", "web-sys"]
                .iter()
                .any(|b| l.starts_with(b))
        })
        .collect();
    if !found.is_empty() {
        return Err(format!(
            "replay-core depends on browser bindings: {found:?}"
        ));
    }
    println!("cargo tree -p replay-core: no wasm-bindgen, js-sys or web-sys");
    Ok(())
}

/// The debug server binary, built by the native test step.
fn server_binary() -> std::path::PathBuf {
    root().join("target/debug/replay-server")
}

/// A throwaway server tuned for tests: short heartbeats and fast deltas.
fn test_server(extra: &[&str]) -> Result<Server> {
    let mut args = vec!["--allow-origin", "*"];
    args.extend_from_slice(extra);
    test_server_without_cors(&args)
}

/// A test server that sends no CORS headers (no `--allow-origin`): a page
/// on another origin gets no answer it may read.
fn test_server_without_cors(extra: &[&str]) -> Result<Server> {
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--db",
        ":memory:",
        "--faults",
        "--heartbeat-ms",
        "500",
        "--delta-ms",
        "5",
    ];
    args.extend_from_slice(extra);
    Server::start(&server_binary(), &args)
}

/// Core suite plus `tests/browser_*.rs` (or only the test target `only`),
/// compiled to wasm32, in Chromium.
fn in_chromium(only: Option<&str>) -> Result {
    cmd::run("cargo", &["build", "-p", "replay-server"])?;
    let server = test_server(&[])?;
    println!("replay-server for the browser suites: {}", server.url);
    // `browser_credentials.rs`: a runtime at another origin than the test
    // page that takes a cookie, so it names the page's origin (CORS with
    // credentials allows no `*`): the page's address is chosen here.
    let page = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port for the test page: {e}"))?;
    let page_origin = format!("http://{page}");
    let credentials_server = test_server_without_cors(&[
        "--token",
        CREDENTIALS_TOKEN,
        "--allow-credentials",
        "--allow-origin",
        &page_origin,
    ])?;
    // `browser_proxy.rs`: the same runtime behind a proxy that mutes streams.
    let proxy = nginx::TempNginx::start(&server.url)?;
    let path = path_with(&[setup::js_dir().join("node_modules/.bin")]);
    let tmp = setup::browser_tmp()?;
    let mut args = vec![
        "test",
        "--headless",
        "--chrome",
        "--chromedriver",
        setup::CHROMEDRIVER,
        "--",
        "-p",
        "replay-client",
    ];
    match only {
        Some(target) => args.extend(["--test", target]),
        // The core crate's own unit tests, in the same browser.
        None => args.extend(["-p", "replay-core"]),
    }
    run_in(
        &root(),
        "wasm-pack",
        &args,
        &[
            ("PATH", &path),
            ("CHROMEDRIVER", setup::CHROMEDRIVER),
            ("WASM_BINDGEN_TEST_TIMEOUT", "300"),
            ("REPLAY_SERVER_URL", &server.url),
            ("REPLAY_CREDENTIALS_URL", &credentials_server.url),
            ("REPLAY_CREDENTIALS_TOKEN", CREDENTIALS_TOKEN),
            ("WASM_BINDGEN_TEST_ADDRESS", &page.to_string()),
            (nginx::URL_VAR, &proxy.url),
            ("TMPDIR", tmp.to_str().expect("utf-8 path")),
        ],
    )
}

/// The `--token` of the runtime `browser_credentials.rs` sends a cookie to.
const CREDENTIALS_TOKEN: &str = "cookie-token";

/// Packs the package, installs the tarball into a consumer, type-checks and bundles it.
fn package() -> Result {
    let pkg = pkg::build()?;
    for (name, raw, gz) in pkg::sizes(&pkg)? {
        println!("{name}: {raw} bytes, {gz} gzipped");
    }
    for c in pkg::context_sizes(&pkg)? {
        println!("{}: {} bytes, {} gzipped", c.name, c.raw, c.gz);
    }
    size_table::check(&pkg)?;
    // The shipped `.d.ts` of both targets, read with the TypeScript API:
    // JSDoc on every export, no wasm export declared that the module lacks.
    run_in(
        &setup::js_dir(),
        "node",
        &["--test", "--test-reporter=spec", "declarations.test.mjs"],
        &[],
    )?;
    check_js_halves(&pkg)?;
    let packs = root().join("target/npm");
    let _ = fs::remove_dir_all(&packs);
    fs::create_dir_all(&packs).map_err(|e| e.to_string())?;
    run_in(
        &pkg,
        "npm",
        &["pack", "--pack-destination", packs.to_str().expect("utf-8")],
        &[],
    )?;
    let tarball = fs::read_dir(&packs)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or("npm pack wrote no tarball")?;

    let app = install_app("consumer", &tarball, &["vue"])?;
    // The README's npm quickstart, as written (tsconfig.json lists it).
    fs::write(app.join("quickstart.ts"), quickstarts::npm_snippet()?).map_err(|e| e.to_string())?;
    let tsc = setup::node_bin("tsc");
    run_in(
        &app,
        tsc.to_str().expect("utf-8"),
        &["--noEmit", "--strict", "-p", "tsconfig.json"],
        &[],
    )?;
    println!("tsc --noEmit --strict: the consumer compiles against the packed types");
    let vite = setup::node_bin("vite");
    run_in(
        &app,
        vite.to_str().expect("utf-8"),
        &["build", "--logLevel", "warn"],
        &[],
    )?;
    let assets = app.join("dist/assets");
    let emitted: Vec<String> = fs::read_dir(&assets)
        .map_err(|e| format!("{}: {e}", assets.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if !emitted.iter().any(|name| name.ends_with(".wasm")) {
        return Err("the Vite build did not emit the .wasm asset".into());
    }
    // `new Worker(new URL("./replay.worker.ts", import.meta.url))`: a chunk of its own.
    if !emitted.iter().any(|name| name.starts_with("replay.worker")) {
        return Err("the Vite build did not emit the worker (replay.worker.ts)".into());
    }
    // `new SharedWorker(new URL("./replay.shared.ts", import.meta.url))` too.
    if !emitted.iter().any(|name| name.starts_with("replay.shared")) {
        return Err("the Vite build did not emit the shared worker (replay.shared.ts)".into());
    }
    println!("vite build: bundled, .wasm asset and both workers emitted");
    lint_package(&tarball)?;
    build_binding_apps(&tarball)
}

/// The hand-written JS of the worker-hosted client (`pkg-template/`, each
/// `// @ts-check`), as written (not minified: the types are in its JSDoc),
/// type-checked by `tsc --strict --checkJs` beside the built declarations
/// of the `web` target, which its imports of the glue and of
/// `replay_error.js` resolve to.
const JS_HALVES: [&str; 8] = [
    "messages.js",
    "first-page-url.js",
    "page-client.js",
    "shared-client.js",
    "worker-client.js",
    "host.js",
    "shared.js",
    "worker.js",
];

fn check_js_halves(pkg: &Path) -> Result {
    let dir = root().join("target/js-halves");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let web = pkg.join("web");
    for entry in fs::read_dir(&web).map_err(|e| format!("{}: {e}", web.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".d.ts") {
            fs::copy(&path, dir.join(&name)).map_err(|e| format!("copy {name}: {e}"))?;
        }
    }
    // The host's import of what it bundles from the snippet (not shipped).
    fs::copy(
        root().join("pkg-template/first-page.d.ts"),
        dir.join("first-page.d.ts"),
    )
    .map_err(|e| format!("copy first-page.d.ts: {e}"))?;
    for file in JS_HALVES {
        let source = root().join("pkg-template").join(file);
        let text = fs::read_to_string(&source).map_err(|e| format!("{}: {e}", source.display()))?;
        if !text.starts_with("// @ts-check") {
            return Err(format!(
                "pkg-template/{file} does not start with // @ts-check"
            ));
        }
        fs::write(dir.join(file), text).map_err(|e| e.to_string())?;
    }
    let tsc = setup::node_bin("tsc");
    let mut args = vec![
        "--noEmit",
        "--strict",
        "--allowJs",
        "--checkJs",
        "--target",
        "ES2022",
        "--module",
        "ESNext",
        "--moduleResolution",
        "bundler",
        "--lib",
        "ES2022,DOM",
        "--types",
        "",
    ];
    args.extend(JS_HALVES);
    run_in(&dir, tsc.to_str().expect("utf-8"), &args, &[])?;
    println!("tsc --strict --checkJs: the JS halves agree with their JSDoc");
    Ok(())
}

/// `tests/js/NAME` copied to `target/NAME`, with the packed package installed
/// from `tarball` and the npm tools' copies of `frameworks` linked in (the
/// registry is not asked: they are `tests/js`'s devDependencies).
fn install_app(name: &str, tarball: &Path, frameworks: &[&str]) -> Result<std::path::PathBuf> {
    let app = root().join("target").join(name);
    let _ = fs::remove_dir_all(&app);
    demo::copy_dir(&root().join("tests/js").join(name), &app)?;
    let manifest = format!(
        "{{\"name\":\"{name}\",\"private\":true,\"type\":\"module\",\
         \"dependencies\":{{\"replay-client\":\"file:{}\"}}}}\n",
        tarball.display()
    );
    fs::write(app.join("package.json"), manifest).map_err(|e| e.to_string())?;
    run_in(
        &app,
        "npm",
        &["install", "--no-audit", "--no-fund", "--offline"],
        &[],
    )?;
    for framework in frameworks {
        let link = app.join("node_modules").join(framework);
        fs::create_dir_all(link.parent().expect("in node_modules")).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(setup::js_dir().join("node_modules").join(framework), &link)
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(app)
}

/// The packed tarball, as a registry would serve it: `publint` (package.json
/// fields, exports, files) and `@arethetypeswrong/cli` (each entry's types
/// resolve, for ESM importers: the package is ESM only).
fn lint_package(tarball: &Path) -> Result {
    let tarball = tarball.to_str().expect("utf-8 path");
    let publint = setup::node_bin("publint");
    run_in(
        &root(),
        publint.to_str().expect("utf-8"),
        &["run", "--strict", tarball],
        &[],
    )?;
    let attw = setup::node_bin("attw");
    run_in(
        &root(),
        attw.to_str().expect("utf-8"),
        &[
            tarball,
            "--profile",
            "esm-only",
            "--no-definitely-typed",
            "--format",
            "table-flipped",
        ],
        &[],
    )
}

/// React, Vue and Svelte apps using the bindings, plus the README's npm
/// quickstart (its base URL made the page's origin), built by one Vite
/// run into `target/apps/dist`; the e2e layer runs them.
fn build_binding_apps(tarball: &Path) -> Result {
    let app = install_app(
        "apps",
        tarball,
        &[
            "react",
            "react-dom",
            "vue",
            "svelte",
            "@sveltejs/vite-plugin-svelte",
        ],
    )?;
    let snippet = quickstarts::npm_snippet()?;
    let origin = "\"http://127.0.0.1:8787\"";
    if !snippet.contains(origin) {
        return Err(format!("the npm quickstart no longer uses {origin}"));
    }
    fs::write(
        app.join("quickstart.ts"),
        snippet.replacen(origin, "location.origin", 1),
    )
    .map_err(|e| e.to_string())?;
    let vite = setup::node_bin("vite");
    run_in(
        &app,
        vite.to_str().expect("utf-8"),
        &["build", "--mode", "development"],
        // A development build (React's StrictMode double mount is dev only).
        &[("NODE_ENV", "development")],
    )?;
    println!("vite build: the React, Vue and Svelte apps and the npm quickstart");
    Ok(())
}

/// Playwright drives the demo page against a live server.
fn e2e() -> Result {
    let site = demo::build_site()?;
    // The page halves of the worker tests (`worker.test.mjs`,
    // `shared.test.mjs`), beside the demo.
    for page in ["worker-page", "shared-page"] {
        demo::copy_dir(&root().join("tests/js").join(page), &site.join(page))?;
    }
    let server = test_server(&["--static", site.to_str().expect("utf-8")])?;
    // `auth.test.mjs`: a runtime that requires a bearer token.
    let token = "e2e-token";
    let token_server = test_server(&["--token", token])?;
    // `scoped.test.mjs`: a runtime without the multiplexed stream (§4.6).
    let no_mux_server =
        test_server(&["--static", site.to_str().expect("utf-8"), "--no-multiplex"])?;
    // `newcomer.test.mjs`: a runtime that forgot the page's origin.
    let no_cors_server = test_server_without_cors(&[])?;
    // `proxy.test.mjs`: the page and its runtime behind nginx compressing
    // event streams. The test starts (and stops, and starts again) the
    // runtime itself at the address nginx forwards to.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port for the proxied runtime: {e}"))?
        .to_string();
    let proxy = nginx::TempNginx::start(&format!("http://{upstream}"))?;
    let proxy_dir = proxy.dir.to_str().expect("utf-8 path");
    let server_bin = server_binary();
    let artifacts = root().join("tests/artifacts");
    fs::create_dir_all(&artifacts).map_err(|e| e.to_string())?;
    let js = setup::js_dir();
    let tmp = setup::browser_tmp()?;
    // `E2E_ONLY=FILE` runs that file of the list alone (and nothing after).
    let only = std::env::var("E2E_ONLY").ok();
    // One file after the other: the fault schedule's faults are server-wide.
    for file in [
        "e2e.test.mjs",
        "worker.test.mjs",
        "shared.test.mjs",
        "auth.test.mjs",
        "scoped.test.mjs",
        // A newcomer's first mistakes with the packaged client.
        "newcomer.test.mjs",
        // A first visit's first page asked for before the wasm (`prefetch`).
        "start.test.mjs",
        // The demo's outbox with the runtime stopped (the test starts and
        // kills its own server on one SQLite file, behind a front of its own).
        "outbox.test.mjs",
        // Behind a proxy that mutes event streams: polling, and back.
        "proxy.test.mjs",
        // No browser, no server: the JS halves' target rule.
        "targets.test.mjs",
        // No browser, no server: the view's parts in the core's bit order.
        "view_parts.test.mjs",
    ]
    .into_iter()
    .filter(|file| only.as_deref().is_none_or(|o| o == *file))
    {
        run_in(
            &js,
            "node",
            &["--test", "--test-reporter=spec", file],
            &[
                ("TMPDIR", tmp.to_str().expect("utf-8 path")),
                ("E2E_URL", &server.url),
                ("E2E_TOKEN_URL", &token_server.url),
                ("E2E_TOKEN", token),
                ("E2E_NO_MUX_URL", &no_mux_server.url),
                ("E2E_NO_CORS_URL", &no_cors_server.url),
                ("E2E_PROXY_URL", &proxy.url),
                ("E2E_PROXY_DIR", proxy_dir),
                ("E2E_PROXY_UPSTREAM", &upstream),
                ("E2E_SERVER", server_bin.to_str().expect("utf-8 path")),
                ("E2E_SITE", site.to_str().expect("utf-8 path")),
                ("E2E_ARTIFACTS", artifacts.to_str().expect("utf-8")),
                ("E2E_CHROMIUM", setup::CHROMIUM),
            ],
        )?;
    }
    if only.is_some() {
        return Ok(());
    }
    cmd::step(
        "the demo page on a two-node cluster (Postgres, Redis)",
        || cluster(&js, &tmp, &site),
    )?;
    report_artifacts(&artifacts);
    bindings(&js, &tmp)
}

/// `cluster.test.mjs`: the page against two nodes on a throwaway Postgres
/// and Redis (the test starts the nodes and its proxy; both are removed
/// after).
fn cluster(js: &Path, tmp: &Path, site: &Path) -> Result {
    let pg = postgres::TempPostgres::start()?;
    let tail = redis::TempRedis::start()?;
    let restart = pg.restart_command();
    let server = server_binary();
    run_in(
        js,
        "node",
        &["--test", "--test-reporter=spec", "cluster.test.mjs"],
        &[
            ("TMPDIR", tmp.to_str().expect("utf-8 path")),
            ("E2E_CHROMIUM", setup::CHROMIUM),
            ("CLUSTER_SERVER", server.to_str().expect("utf-8 path")),
            ("CLUSTER_SITE", site.to_str().expect("utf-8 path")),
            ("CLUSTER_POSTGRES", &pg.url),
            ("CLUSTER_POSTGRES_RESTART", &restart),
            ("CLUSTER_REDIS", &tail.url),
        ],
    )
}

/// The binding apps (built by the package layer) and the README quickstarts
/// in Chromium, on a server of their own: the test counts its open streams.
fn bindings(js: &Path, tmp: &Path) -> Result {
    let apps = root().join("target/apps");
    if !apps.join("dist").exists() {
        return Err("target/apps/dist is missing: run the package layer first".into());
    }
    let site = root().join("target/bindings-site");
    let _ = fs::remove_dir_all(&site);
    demo::copy_dir(&apps.join("dist"), &site.join("apps"))?;
    quickstarts::build_rust_quickstart(&site)?;
    let server = test_server(&["--static", site.to_str().expect("utf-8")])?;
    run_in(
        js,
        "node",
        &["--test", "--test-reporter=spec", "bindings.test.mjs"],
        &[
            ("TMPDIR", tmp.to_str().expect("utf-8 path")),
            ("E2E_URL", &server.url),
            ("E2E_CHROMIUM", setup::CHROMIUM),
            ("BINDINGS_APPS", apps.to_str().expect("utf-8")),
        ],
    )
}

fn report_artifacts(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            println!("artifact: {}", entry.path().display());
        }
    }
}

/// The engine layer (`tests/js/engines/*.test.mjs`: `engines.test.mjs`, the
/// demo in every mode on each engine, against a server of its own (the
/// schedule's faults and the stream counts are server-wide); `proxy.test.mjs`,
/// the same runtime behind nginx compressing event streams; `outbox.test.mjs`,
/// the outbox with a runtime it stops and starts behind a front of its own),
/// in two lanes for the two cores:
/// Firefox beside WebKitGTK then WPE (one window: no schedule). Each
/// engine's output is kept in `target/engines/ENGINE.log`, printed after.
/// `built`: the e2e layer built the demo site (`target/demo`) in this run.
fn engines(built: bool) -> Result {
    use std::process::Command;
    use std::time::Instant;
    let demo_site = if built {
        root().join("target/demo")
    } else {
        demo::build_site()?
    };
    let site = engine_site(&demo_site)?;
    let site = site.to_str().expect("utf-8 path");
    let logs = root().join("target/engines");
    fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let tmp = setup::browser_tmp()?;
    // Every `tests/js/engines/*.test.mjs`, one after the other (each starts
    // its browser; outbox.test.mjs its own server, behind a front).
    let mut files: Vec<String> = fs::read_dir(setup::js_dir().join("engines"))
        .map_err(|e| e.to_string())?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".test.mjs"))
        .map(|name| format!("engines/{name}"))
        .collect();
    files.sort();
    let server_bin = server_binary();
    let run_engine = |engine: &str, schedule: bool| -> Result {
        let server = test_server(&["--static", site])?;
        // `proxy.test.mjs`: the same runtime behind nginx compressing
        // event streams, the pages loaded through it.
        let proxy = nginx::TempNginx::start(&server.url)?;
        let log =
            fs::File::create(logs.join(format!("{engine}.log"))).map_err(|e| e.to_string())?;
        let mut node = Command::new("node");
        node.args(["--test", "--test-concurrency=1", "--test-reporter=spec"])
            .args(&files)
            .current_dir(setup::js_dir())
            .env("ENGINE", engine)
            .env("E2E_URL", &server.url)
            .env("E2E_PROXY_URL", &proxy.url)
            .env("E2E_SERVER", &server_bin)
            .env("E2E_SITE", site)
            .env("E2E_CHROMIUM", setup::CHROMIUM)
            .env("TMPDIR", &tmp)
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if schedule {
            node.env("SCHEDULE", "1");
        }
        let status = node
            .status()
            .map_err(|e| format!("cannot start node: {e}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("{engine}: {status}"))
    };
    let lanes: [&[(&str, bool)]; 2] =
        [&[("firefox", true)], &[("webkitgtk", true), ("wpe", false)]];
    let outcomes: Vec<(&str, Result, f32)> = std::thread::scope(|scope| {
        let running: Vec<_> = lanes
            .iter()
            .map(|lane| {
                scope.spawn(|| {
                    lane.iter()
                        .map(|&(engine, schedule)| {
                            let started = Instant::now();
                            let outcome = run_engine(engine, schedule);
                            (engine, outcome, started.elapsed().as_secs_f32())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        running
            .into_iter()
            .flat_map(|lane| lane.join().expect("an engine lane panicked"))
            .collect()
    });
    let mut failed = Vec::new();
    for (engine, outcome, secs) in &outcomes {
        let log = fs::read_to_string(logs.join(format!("{engine}.log"))).unwrap_or_default();
        println!("---- {engine} ----\n{log}");
        println!(
            "engine {engine}: {secs:.1} s, {}",
            if outcome.is_ok() { "passed" } else { "FAILED" }
        );
        if let Err(e) = outcome {
            failed.push(e.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the engine layer failed: {}", failed.join("; ")))
    }
}

/// The demo `site` copied to `target/engine-site` with the engine layer's
/// error hooks (`tests/js/engines/site/`; the WebKit drivers give no
/// console logs): `error-hook.js` runs before the page's module script, and
/// each worker script imports `worker-hook.js` before the demo's; the
/// abort probe's page loads the executor's module as `executor.js`.
fn engine_site(site: &Path) -> Result<std::path::PathBuf> {
    let out = root().join("target/engine-site");
    let _ = fs::remove_dir_all(&out);
    demo::copy_dir(site, &out)?;
    demo::copy_dir(&setup::js_dir().join("engines/site"), &out)?;
    let page = out.join("index.html");
    let html = fs::read_to_string(&page).map_err(|e| e.to_string())?;
    let script = "<script type=\"module\" src=\"app.js\"></script>";
    if !html.contains(script) {
        return Err(format!("www/index.html no longer loads `{script}`"));
    }
    let hooked = html.replacen(
        script,
        &format!("<script src=\"error-hook.js\"></script>{script}"),
        1,
    );
    fs::write(&page, hooked).map_err(|e| e.to_string())?;
    for worker in ["replay.shared", "replay.worker"] {
        let demo_script = format!("{worker}.demo.js");
        fs::rename(out.join(format!("{worker}.js")), out.join(&demo_script))
            .map_err(|e| format!("{worker}.js: {e}"))?;
        let wrapper = format!("import \"./worker-hook.js\";\nimport \"./{demo_script}\";\n");
        fs::write(out.join(format!("{worker}.js")), wrapper).map_err(|e| e.to_string())?;
    }
    // The abort probe (abort-probe.js) runs the executor's request code
    // itself: its module, re-exported at a name that does not change with
    // the snippet directory's hash.
    let snippets = out.join("pkg/web/snippets");
    let executor = fs::read_dir(&snippets)
        .map_err(|e| format!("{}: {e}", snippets.display()))?
        .filter_map(|entry| Some(entry.ok()?.path().join("src/wasm/browser.js")))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("no src/wasm/browser.js under {}", snippets.display()))?;
    let relative = executor.strip_prefix(&out).expect("under the site");
    let reexport = format!("export * from \"./{}\";\n", relative.display());
    fs::write(out.join("executor.js"), reexport).map_err(|e| e.to_string())?;
    Ok(out)
}
