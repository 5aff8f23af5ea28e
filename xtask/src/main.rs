//! `cargo xtask`: the project's only entry points. Each installs what it
//! needs and is missing first (`setup.rs`), so each works on a fresh clone.
//!
//! - `cargo xtask test`: runs every test layer.
//! - `cargo xtask bench`: measures and rewrites `docs/benchmarks.md`.
//! - `cargo xtask pkg`: builds the npm package into `pkg/`.
//! - `cargo xtask demo`: builds, starts the reference server and serves the demo
//!   (`--cluster N`: N servers on a throwaway Postgres and Redis behind one address).
//! - `cargo xtask setup`: only the set-up of all of them.

mod bench;
mod browser_bench;
mod cmd;
#[cfg(test)]
mod cycles;
#[cfg(test)]
mod debug_fmt;
mod demo;
#[cfg(test)]
mod history;
mod link;
mod names;
mod nginx;
mod order;
mod pkg;
mod postgres;
mod proxy;
mod quickstarts;
mod redis;
mod server;
mod setup;
mod size_table;
#[cfg(test)]
mod sources;
mod test;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((task, rest)) => (task.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match task {
        "test" => test::run(rest),
        "setup" => setup::ensure_all(),
        "pkg" => pkg::run_task().and_then(|pkg| size_table::rewrite(&pkg)),
        "bench" => bench::run_task(rest),
        "demo" => demo::run_task(rest),
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <test|bench|pkg|demo|setup>");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`; try `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask {task}: {message}");
            ExitCode::FAILURE
        }
    }
}
