//! A throwaway Redis for the cluster's live tail: Debian's
//! `redis-server` on a free loopback port, nothing saved to disk, in a temp
//! folder, stopped when dropped, also when a test layer fails. It runs in
//! this process's group, so a Ctrl-C in the terminal reaches it as it
//! reaches xtask (unlike Postgres, which pg_ctl starts in a session of its
//! own, see `postgres.rs`).

use crate::cmd::{output, Result};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that gives the tests the Redis's URL.
pub const URL_VAR: &str = "REPLAY_TEST_REDIS";
/// How long a started Redis has to accept connections.
const START_WAIT: Duration = Duration::from_secs(10);

/// Installs Debian's `redis-server` unless it is on PATH.
pub fn ensure() -> Result {
    crate::cmd::apt_install(
        output("redis-server", &["--version"]).is_some(),
        &["redis-server"],
    )
}

/// A running throwaway Redis.
pub struct TempRedis {
    child: Child,
    dir: PathBuf,
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
}

impl TempRedis {
    /// `redis-server --port P --bind 127.0.0.1 --save '' --appendonly no`
    /// in a new temp folder; waits until it accepts connections.
    pub fn start() -> Result<TempRedis> {
        let dir = std::env::temp_dir().join(format!("replay-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let log = std::fs::File::create(dir.join("redis.log")).map_err(|e| e.to_string())?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server (run set-up): {e}"))?;
        let redis = TempRedis {
            child,
            dir,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + START_WAIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("redis-server did not listen on {port} in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }
}

impl Drop for TempRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throwaway_redis_listens_and_is_gone_once_dropped() {
        if output("redis-server", &["--version"]).is_none() {
            eprintln!("skipped: no redis-server (cargo xtask set-up installs it)");
            return;
        }
        let redis = TempRedis::start().expect("starts");
        let port: u16 = redis.url.rsplit(':').next().unwrap().parse().unwrap();
        let dir = redis.dir.clone();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        drop(redis);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "stopped");
        assert!(!dir.exists(), "its folder removed");
    }
}
