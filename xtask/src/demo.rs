//! `cargo xtask demo`: package, server and page, one command.

use crate::cmd::{self, root, run, Result};
use crate::server::Server;
use crate::{pkg, postgres, proxy, redis, setup};
use std::fs;
use std::path::Path;

/// Builds everything and serves the demo at http://127.0.0.1:8787 until Ctrl-C.
/// `--listen ADDR` moves it; each `--allow-origin ORIGIN` is passed to the
/// server, so an app served elsewhere (e.g. Vite's dev server) can use it.
/// `--cluster N` runs N servers on one throwaway Postgres and Redis (their
/// shared live tail) instead, behind a round-robin proxy at that address
/// (as behind a load balancer).
pub fn run_task(args: &[String]) -> Result {
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
        .map_or("127.0.0.1:8787", String::as_str);
    let origins = allowed_origins(args)?;
    setup::ensure_all()?;
    let site = build_site()?;
    cmd::step("demo: build replay-server (server profile)", || {
        run(
            "cargo",
            &["build", "--profile", "server", "-p", "replay-server"],
        )
    })?;
    if let Some(nodes) = cluster_size(args)? {
        return run_cluster(listen, nodes, &site, &origins);
    }
    let db = root().join("target/replay-demo.sqlite");
    let mut server_args = vec![
        "--listen",
        listen,
        "--db",
        db.to_str().expect("utf-8 path"),
        "--faults",
        "--static",
        site.to_str().expect("utf-8 path"),
        // Every file revalidated: a rebuild shows at the next reload.
        "--static-max-age",
        "0",
    ];
    for origin in &origins {
        server_args.extend(["--allow-origin", origin]);
    }
    let server = Server::start(&root().join("target/server/replay-server"), &server_args)?;
    println!(
        "\nreplay-client demo: open {}/ (Ctrl-C stops it)",
        server.url
    );
    println!("data: {} (delete it to start fresh)", db.display());
    server.wait()
}

/// `--cluster N`: how many nodes (2 to 8), if asked for.
fn cluster_size(args: &[String]) -> Result<Option<usize>> {
    let Some(i) = args.iter().position(|a| a == "--cluster") else {
        return Ok(None);
    };
    match args.get(i + 1).and_then(|n| n.parse::<usize>().ok()) {
        Some(n) if (2..=8).contains(&n) => Ok(Some(n)),
        _ => Err("--cluster needs a number of nodes from 2 to 8".into()),
    }
}

/// N nodes on a Postgres in `target/replay-demo-pg` (a fresh one each run),
/// each connection to `listen` sent to the next node.
fn run_cluster(listen: &str, nodes: usize, site: &Path, origins: &[String]) -> Result {
    let pg = postgres::TempPostgres::start_in(&root().join("target/replay-demo-pg"))?;
    let tail = redis::TempRedis::start()?;
    let site = site.to_str().expect("utf-8 path");
    // The nodes share this machine's cores (docs/server.md, `--threads`).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / nodes).max(1).to_string();
    let mut servers = Vec::new();
    for _ in 0..nodes {
        let mut args = vec!["--listen", "127.0.0.1:0", "--db", &pg.url, "--faults"];
        args.extend(["--threads", &threads]);
        args.extend(["--redis", &tail.url]);
        args.extend(["--static", site, "--static-max-age", "0"]);
        for origin in origins {
            args.extend(["--allow-origin", origin]);
        }
        servers.push(Server::start(
            &root().join("target/server/replay-server"),
            &args,
        )?);
    }
    let backends: Vec<String> = servers
        .iter()
        .map(|s| s.url.trim_start_matches("http://").to_owned())
        .collect();
    println!(
        "\nreplay-client demo on a {nodes}-node cluster: open http://{listen}/ \
         (each connection goes to the next of {}; Ctrl-C stops it)",
        backends.join(", ")
    );
    println!(
        "data: a throwaway Postgres ({}) and Redis for the live tail ({}), removed when the demo stops",
        pg.url, tail.url
    );
    proxy::round_robin(listen, &backends)
}

/// The values of every `--allow-origin` in `args` (`--allow-origin=O` too).
fn allowed_origins(args: &[String]) -> Result<Vec<String>> {
    let mut origins = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--allow-origin" {
            let origin = rest.next().ok_or("--allow-origin needs an origin")?;
            origins.push(origin.clone());
        } else if let Some(origin) = arg.strip_prefix("--allow-origin=") {
            origins.push(origin.to_owned());
        }
    }
    Ok(origins)
}

/// `www/` plus the package under `pkg/`, in `target/demo/`.
pub fn build_site() -> Result<std::path::PathBuf> {
    let pkg = pkg::build()?;
    let site = root().join("target/demo");
    let _ = fs::remove_dir_all(&site);
    copy_dir(&root().join("www"), &site)?;
    copy_dir(&pkg, &site.join("pkg"))?;
    Ok(site)
}

pub fn copy_dir(from: &Path, to: &Path) -> Result {
    fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target).map_err(|e| format!("{}: {e}", target.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{allowed_origins, cluster_size};

    #[test]
    fn cluster_takes_two_to_eight_nodes() {
        let args = |n: &str| vec!["--cluster".to_owned(), n.to_owned()];
        assert_eq!(cluster_size(&[]).unwrap(), None);
        assert_eq!(cluster_size(&args("2")).unwrap(), Some(2));
        assert!(cluster_size(&args("1")).is_err());
        assert!(cluster_size(&args("x")).is_err());
    }

    #[test]
    fn every_allow_origin_is_passed_to_the_server() {
        let args: Vec<String> = [
            "--listen",
            "127.0.0.1:9000",
            "--allow-origin",
            "http://localhost:5173",
            "--allow-origin=*",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            allowed_origins(&args).unwrap(),
            ["http://localhost:5173", "*"]
        );
        assert!(allowed_origins(&["--allow-origin".to_owned()]).is_err());
    }
}
