//! Shared helpers of the cluster tests: a fresh database on the
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

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
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

/// A test server on SQLite, or with `pg` on a fresh Postgres database of
/// its own named after `name` (`None`: no `REPLAY_TEST_POSTGRES`, the test
/// is skipped), configured by `f`.
pub async fn server_on(
    pg: bool,
    name: &str,
    f: impl FnOnce(&mut replay_server::Config),
) -> Option<Server> {
    let db = if pg {
        Some(fresh_db(name).await?)
    } else {
        None
    };
    Some(
        crate::common::server_with(|c| {
            if let Some(db) = db {
                c.db = db;
            }
            f(c);
        })
        .await,
    )
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

/// After a node was killed at `killed`: the durable envelopes read from
/// `sse` until `done(&read)` holds, which must be within `within` of the
/// kill (else a panic: "`what` … after the kill"), then those that come in
/// `late` more (the leases after, in which nothing should end twice).
pub async fn ended_after_kill(
    sse: &mut crate::common::Sse,
    killed: Instant,
    done: impl Fn(&[Envelope]) -> bool,
    within: Duration,
    what: &str,
    late: Duration,
) -> Vec<Envelope> {
    let mut seen = durable_until(sse, Duration::from_secs(20), done).await;
    let took = killed.elapsed();
    assert!(took < within, "{what} {took:?} after the kill");
    let late = sse.collect_for(late).await;
    seen.extend(
        late.iter()
            .filter_map(|f| f.env())
            .filter(|e| e.is_durable())
            .cloned(),
    );
    seen
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

/// The test Redis's URL (`REPLAY_TEST_REDIS`, started by `cargo xtask
/// test`); `None`, saying so, when it was not given.
pub fn redis_url() -> Option<String> {
    let url = std::env::var("REPLAY_TEST_REDIS").ok();
    if url.is_none() {
        eprintln!("skipped: REPLAY_TEST_REDIS is not set (cargo xtask test sets it)");
    }
    url
}

/// A Redis of one test's own (`redis-server` from PATH, as the test Redis),
/// which the test may kill and start again on the same port.
pub struct OwnRedis {
    port: u16,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one on a free loopback port.
    pub fn start() -> OwnRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut redis = OwnRedis { port, child: None };
        redis.restart();
        redis
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: its data (there is none on disk) is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it (again) on its port, empty, and waits until it accepts
    /// connections.
    pub fn restart(&mut self) {
        self.kill();
        let port = self.port.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no"])
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (cargo xtask set-up installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Threads process `pid` runs now (`/proc`; 0 where there is none).
pub fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count())
}
