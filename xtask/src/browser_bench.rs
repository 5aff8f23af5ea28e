//! The browser half of `cargo xtask bench`: package sizes, then a Playwright
//! run of `tests/js/bench.mjs` in headless Chromium against a live server
//! serving the optimised package and the bench page (`tests/js/bench/`).

use crate::cmd::{self, root, Result};
use crate::link::{self, Link};
use crate::server::Server;
use crate::{demo, nginx, pkg, setup};
use std::process::Command;

/// Measures and reports each figure through `record`; `only` names the parts
/// of `tests/js/bench.mjs` to run (`live`, `burst`, `restore`, `cold`,
/// `memory`, `shared`, `paint`, `link`, `proxy`, `send`; comma-separated), all when `None`.
pub fn run(only: Option<&str>, record: &mut dyn FnMut(&str, f64)) -> Result {
    setup::ensure_package_tools()?;
    setup::ensure_browser()?;
    let site = demo::build_site()?;
    demo::copy_dir(&root().join("tests/js/bench"), &site.join("bench"))?;
    copy_base_package(&site)?;
    // [wasm, js]: raw and gzipped bytes; JS sums every file a page loads.
    let mut totals = [(0, 0); 2];
    for (name, raw, gz) in pkg::sizes(&site.join("pkg"))? {
        let t = &mut totals[usize::from(!name.ends_with(".wasm"))];
        t.0 += raw;
        t.1 += gz;
    }
    for (key, (raw, gz)) in ["wasm", "js"].into_iter().zip(totals) {
        record(&format!("browser_{key}_bytes"), raw as f64);
        record(&format!("browser_{key}_gzip_bytes"), gz as f64);
    }
    let total_gz = totals[0].1 + totals[1].1;
    record("browser_total_gzip_kb", total_gz as f64 / 1000.0);

    // The preloading tabs' lines name the snippets' folder, which changes
    // with the build.
    let snippets = pkg::snippet(&site.join("pkg/web"), "browser.js")?;
    let folder = snippets
        .trim_start_matches("./")
        .trim_end_matches("/browser.js");
    // The shared host's worker as an app's build gives it (Vite and
    // webpack bundle a `new SharedWorker(new URL(...))` script into one
    // chunk): one file beside the wasm, so its glue finds the wasm next to
    // it. tab-shared.html starts and preloads this one. Made after the
    // sizes above: it is the bench's file, not the package's.
    let esbuild = setup::node_bin("esbuild");
    let bundle = site.join("pkg/web/bench-shared.js");
    cmd::run(
        esbuild.to_str().expect("utf-8 path"),
        &[
            site.join("bench/sdk-shared.js")
                .to_str()
                .expect("utf-8 path"),
            "--bundle",
            "--minify",
            "--format=esm",
            "--log-level=warning",
            &format!("--outfile={}", bundle.to_str().expect("utf-8 path")),
        ],
    )?;
    // Every preloading tab: the README's two and the variants a run may
    // weigh against them (BENCH_LINK_VARIANTS).
    let tabs = std::fs::read_dir(site.join("bench")).map_err(|e| format!("bench site: {e}"))?;
    for entry in tabs {
        let tab = entry.map_err(|e| format!("bench site: {e}"))?.path();
        let name = tab.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with("tab-") && name.ends_with(".html")) {
            continue;
        }
        let html = std::fs::read_to_string(&tab).map_err(|e| format!("{}: {e}", tab.display()))?;
        std::fs::write(&tab, html.replace("SNIPPETS", folder))
            .map_err(|e| format!("{}: {e}", tab.display()))?;
    }
    cmd::step("bench: build replay-server (server profile)", || {
        cmd::run(
            "cargo",
            &["build", "--profile", "server", "-p", "replay-server"],
        )
    })?;
    // A file, as a runtime keeps it (WAL: page reads run beside the writer).
    let db = root().join("target/bench-browser.sqlite");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    let server = Server::start(
        &root().join("target/server/replay-server"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--db",
            db.to_str().expect("utf-8 path"),
            "--faults",
            "--static",
            site.to_str().expect("utf-8 path"),
            "--delta-ms",
            "2",
            "--heartbeat-ms",
            "1000",
            // The burst part's 5 700 back-to-back deltas fit a subscriber's
            // buffer: measured as followed, not as lagged and repaired.
            "--subscriber-buffer",
            "8192",
        ],
    )?;
    // The same server through each link of the bench (link.rs): the page
    // is loaded from the link's own port, so its files and the runtime's
    // answers cross it.
    let backend = server.url.trim_start_matches("http://");
    let mut links = vec![format!("lo={}", server.url)];
    for (name, shape) in link::SHAPES {
        links.push(format!("{name}={}", Link::start(backend, *shape)?.url));
    }
    // The proxy part: the same server behind nginx compressing event
    // streams (nginx.rs), its pages loaded through it.
    let proxy = nginx::TempNginx::start(&server.url)?;
    let tmp = setup::browser_tmp()?;
    cmd::step("bench: headless Chromium (tests/js/bench.mjs)", || {
        let mut node = Command::new("node");
        if let Some(parts) = only {
            node.env("BENCH_ONLY", parts);
        }
        let out = node
            .arg("bench.mjs")
            .current_dir(setup::js_dir())
            .env("TMPDIR", &tmp)
            .env("BENCH_URL", &server.url)
            .env("BENCH_LINKS", links.join(","))
            .env("BENCH_PROXY_URL", &proxy.url)
            .env("BENCH_PROXY_DIR", &proxy.dir)
            .env("BENCH_CHROMIUM", setup::CHROMIUM)
            .output()
            .map_err(|e| format!("node: {e}"))?;
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            return Err("tests/js/bench.mjs failed".into());
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            println!("  {line}");
            let mut parts = line.split_whitespace();
            if let (Some(name), Some(Ok(value))) = (parts.next(), parts.next().map(str::parse)) {
                record(name, value);
            }
        }
        Ok(())
    })
}

/// `BENCH_BASE_PKG=dir` (a `pkg/` of an earlier build, e.g. `main`'s) is
/// served at `/pkg-base/` and measured beside this build in the restore and
/// live parts: a before/after within one run, on a machine too noisy to
/// compare runs.
fn copy_base_package(site: &std::path::Path) -> Result {
    let target = site.join("pkg-base");
    let _ = std::fs::remove_dir_all(&target);
    match std::env::var_os("BENCH_BASE_PKG") {
        Some(dir) => demo::copy_dir(std::path::Path::new(&dir), &target),
        None => Ok(()),
    }
}
