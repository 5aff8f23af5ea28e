//! Shared helpers of the cluster tests (issue 27): a fresh database on the
//! throwaway Postgres that `cargo xtask test` starts (its URL in
//! `REPLAY_TEST_POSTGRES`), real `replay-server` processes on it, and a
//! reader of a stream's durable events.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use replay_core::protocol::Envelope;

use crate::common::{listening_base, Server};

/// A database of its own for one test, on the test Postgres; `None` (the
/// test then returns at once, saying so) when no Postgres was given.
pub async fn fresh_db(name: &str) -> Option<String> {
    let Ok(base) = std::env::var("REPLAY_TEST_POSTGRES") else {
        eprintln!("skipped: REPLAY_TEST_POSTGRES is not set (cargo xtask test sets it)");
        return None;
    };
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("the test Postgres accepts connections");
    tokio::spawn(conn);
    let db = format!("{name}_{}", replay_server::util::entropy() % 1_000_000_000);
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .expect("CREATE DATABASE");
    let (prefix, _) = base.rsplit_once('/').expect("a URL with a database");
    Some(format!("{prefix}/{db}"))
}

/// A `replay-server` process on the shared database; SIGKILLed when dropped.
pub struct Node {
    child: Child,
    pub server: Server,
}

impl Node {
    /// Starts a node on `db_url` with test timings plus `extra` flags
    /// (`--delta-ms` there replaces the default 0).
    pub fn start(db_url: &str, extra: &[&str]) -> Node {
        let mut child = Command::new(env!("CARGO_BIN_EXE_replay-server"))
            .args(["--listen", "127.0.0.1:0", "--db", db_url, "--faults"])
            .args(["--heartbeat-ms", "300", "--seed", "7"])
            .args(
                ["--delta-ms", "0"]
                    .iter()
                    .filter(|_| !extra.contains(&"--delta-ms")),
            )
            // Followers that read everything must not be cut for lag.
            .args(["--subscriber-buffer", "100000"])
            .args(["--subscriber-buffer-bytes", "100000000"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("REPLAY_TEST_NODE_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn replay-server");
        let base = listening_base(&mut child);
        Node {
            child,
            server: Server::remote(base),
        }
    }

    /// SIGKILL: no shutdown, no last write.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Durable envelopes read from `sse` until `done(&all)` holds; panics after
/// `timeout` or if the stream ends.
pub async fn durable_until(
    sse: &mut crate::common::Sse,
    timeout: Duration,
    done: impl Fn(&[Envelope]) -> bool,
) -> Vec<Envelope> {
    let deadline = Instant::now() + timeout;
    let mut out: Vec<Envelope> = Vec::new();
    while !done(&out) {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("timed out with {} durable events", out.len()));
        let Some(frame) = sse.next(left).await else {
            panic!(
                "stream ended or timed out with {} durable events",
                out.len()
            );
        };
        if let Some(env) = frame.env().filter(|e| e.is_durable()) {
            out.push(env.clone());
        }
    }
    out
}

/// Asserts that `events` have the seqs 1, 2, … with no gap or repeat.
pub fn assert_dense(events: &[Envelope]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.seq,
            Some(i as u64 + 1),
            "event {i} of {}: {e:?}",
            events.len()
        );
    }
}
