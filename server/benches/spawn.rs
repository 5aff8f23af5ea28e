//! The benches' `replay-server`: the real binary on a loopback port, with
//! stream caps raised for a thousand readers; killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `replay-server`; `base` is its `http://…` address.
pub struct ServerProc {
    child: Child,
    pub base: String,
}

impl ServerProc {
    /// Its process id (the load bench reads its memory).
    #[allow(dead_code)] // each bench compiles this file; not every one needs it
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its `/v1/diagnostics`.
    #[allow(dead_code)] // each bench compiles this file; not every one needs it
    pub async fn diagnostics(&self, http: &reqwest::Client) -> serde_json::Value {
        http.get(format!("{}/v1/diagnostics", self.base))
            .send()
            .await
            .expect("diagnostics")
            .json()
            .await
            .expect("diagnostics json")
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server on `db` (a SQLite path or a `postgres://` URL), at
/// most `per_scope` streams per scope, up to 1 100 streams in all.
#[allow(dead_code)] // the cluster bench sizes its nodes ([`start_with`])
pub fn start(db: &str, per_scope: u32) -> ServerProc {
    start_with(db, per_scope, &[])
}

/// [`start`] with `extra` flags after the bench's own (the cluster bench's
/// `--redis`, `--delta-ms`).
pub fn start_with(db: &str, per_scope: u32, extra: &[&str]) -> ServerProc {
    let per_scope = per_scope.to_string();
    let child = Command::new(binary())
        .args(["--listen", "127.0.0.1:0", "--db", db, "--faults"])
        // Measures fan-out, not the disk: one sync per append (`full`)
        // would be most of every latency here (docs/server.md).
        .args(["--synchronous", "normal"])
        .args([
            "--max-streams",
            "1100",
            "--max-streams-per-scope",
            &per_scope,
        ])
        .args([
            "--max-streams-per-client",
            "1100",
            "--max-connections",
            "1100",
            // Every bench client is on loopback: one address.
            "--max-connections-per-address",
            "1100",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replay-server");
    listening(child)
}

/// The server on a loopback port with only `args` after `--listen` (the
/// hardening bench runs the defaults). `REPLAY_BENCH_SERVER`: another build
/// (an old one measures the "before" figures).
#[allow(dead_code)] // each bench compiles this file; not every one needs it
pub fn start_args(args: &[&str]) -> ServerProc {
    let child = Command::new(binary())
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replay-server");
    listening(child)
}

/// The server binary: `REPLAY_BENCH_SERVER` names another build (A/B runs
/// of one bench binary in the same period), else this one's.
fn binary() -> String {
    std::env::var("REPLAY_BENCH_SERVER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_replay-server").to_owned())
}

/// The started `child` once it printed the address it listens on.
fn listening(mut child: Child) -> ServerProc {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the listening line");
    let base = line
        .trim()
        .strip_prefix("replay-server listening on ")
        .expect("listening line")
        .to_owned();
    ServerProc { child, base }
}
