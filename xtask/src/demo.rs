//! `cargo xtask demo`: package, server and page, one command.

use crate::cmd::{self, root, run, Result};
use crate::server::Server;
use crate::{pkg, setup};
use std::fs;
use std::path::Path;

/// Builds everything and serves the demo at http://127.0.0.1:8787 until Ctrl-C.
/// `--listen ADDR` moves it; each `--allow-origin ORIGIN` is passed to the
/// server, so an app served elsewhere (e.g. Vite's dev server) can use it.
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
    let db = root().join("target/replay-demo.sqlite");
    let mut server_args = vec![
        "--listen",
        listen,
        "--db",
        db.to_str().expect("utf-8 path"),
        "--faults",
        "--static",
        site.to_str().expect("utf-8 path"),
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
    use super::allowed_origins;

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
