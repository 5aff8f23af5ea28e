//! Small helpers to run commands and report each step.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Result of an xtask step; the message says what failed.
pub type Result<T = ()> = std::result::Result<T, String>;

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

/// Runs a command in the workspace root, streaming its output; fails on a non-zero exit.
pub fn run(program: &str, args: &[&str]) -> Result {
    run_in(&root(), program, args, &[])
}

/// Runs a command in `dir` with extra environment variables.
pub fn run_in(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> Result {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{program} {}` failed ({status})", args.join(" ")))
    }
}

/// Runs a command quietly and returns its trimmed stdout, or `None` if it cannot run or fails.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Prints a banner, runs `f`, and prints how long it took.
pub fn step(name: &str, f: impl FnOnce() -> Result) -> Result {
    println!("\n==> {name}");
    let started = Instant::now();
    let result = f();
    let secs = started.elapsed().as_secs_f32();
    match &result {
        Ok(()) => println!("<== {name}: ok ({secs:.1} s)"),
        Err(e) => println!("<== {name}: FAILED ({secs:.1} s): {e}"),
    }
    result
}

/// `PATH` with extra directories in front.
pub fn path_with(extra: &[PathBuf]) -> String {
    let mut parts: Vec<PathBuf> = extra.to_vec();
    if let Some(path) = std::env::var_os("PATH") {
        parts.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(parts)
        .expect("PATH entries contain no separator")
        .to_string_lossy()
        .into_owned()
}

/// Installs Debian's `packages` (without their recommends) unless
/// `present`, which the caller has probed (a binary on PATH, a file): prints
/// `present`, or what it installs, under the step's heading.
pub fn apt_install(present: bool, packages: &[&str]) -> Result {
    if present {
        println!("present");
        return Ok(());
    }
    println!("missing, installing with apt-get: {}", packages.join(" "));
    run("apt-get", &["update"])?;
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend(packages);
    run("apt-get", &args)
}
