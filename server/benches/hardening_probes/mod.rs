//! The shapes of the server's hardening probes (slow readers, one address's connections, streams aimed at one log) and of the
//! multiplexed stream's slots and memory, each against a fresh release
//! server with the default limits, on loopback.

pub mod gauges;
pub mod mux;
pub mod net;
pub mod per_log;
pub mod slow;
pub mod starve;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::spawn::{self, ServerProc};

/// A server on a throwaway SQLite file (removed on drop), with a client
/// from 127.0.0.1 for set-up and diagnostics.
pub struct Server {
    proc: Option<ServerProc>,
    dir: PathBuf,
    /// `http://IP:PORT`.
    pub base: String,
    /// Its address, for raw sockets.
    pub addr: SocketAddr,
    /// A client from 127.0.0.1.
    pub http: reqwest::Client,
}

impl Server {
    /// Starts the server with `args` after `--db` (none: the defaults).
    pub fn start(args: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "replay-hardening-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let db = dir.join("probe.sqlite");
        let mut all = vec!["--db", db.to_str().expect("a UTF-8 path")];
        all.extend(args);
        let proc = spawn::start_args(&all);
        let base = proc.base.clone();
        let addr = base
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .expect("the server's address");
        // Every wait has a deadline, the set-up's requests too.
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("a client");
        Server {
            proc: Some(proc),
            dir,
            base,
            addr,
            http,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.proc.as_ref().map_or(0, ServerProc::id)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.proc.take()); // killed first: it holds the files
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
