//! The `replay-server` binary as a test's peer: started on a free loopback
//! port, killed on drop (its database's directory removed then), reached
//! from other loopback addresses (Linux routes all of 127.0.0.0/8 to `lo`),
//! and its anonymous resident memory read from `/proc`.

use std::ffi::OsStr;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpSocket, TcpStream};

/// Where the started binary keeps its log.
pub enum Db<'a> {
    /// `--db :memory:`.
    Memory,
    /// A file in a directory of its own named after `.0` and this process,
    /// removed on drop: an in-memory log would count in `RssAnon`.
    File(&'a str),
}

/// The binary, killed on drop.
pub struct Bin {
    pub child: Child,
    pub addr: SocketAddr,
    dir: Option<PathBuf>,
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Starts the binary (`REPLAY_SERVER_BIN` names another build of it) with
/// these arguments after `--listen 127.0.0.1:0` and these environment
/// variables (an older binary ignores the ones it does not know).
pub fn start_bin<V: AsRef<OsStr>>(args: &[&str], db: Db<'_>, env: &[(&str, V)]) -> Bin {
    let bin = std::env::var("REPLAY_SERVER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_replay-server").to_owned());
    let mut cmd = Command::new(bin);
    cmd.args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let dir = match db {
        Db::Memory => {
            cmd.args(["--db", ":memory:"]);
            None
        }
        Db::File(name) => {
            let dir = std::env::temp_dir().join(format!("replay-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            cmd.arg("--db").arg(dir.join("db.sqlite"));
            Some(dir)
        }
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn replay-server");
    let base = super::listening_base(&mut child);
    let addr = base
        .strip_prefix("http://")
        .expect("an http URL")
        .parse()
        .unwrap();
    Bin { child, addr, dir }
}

/// A connection to `to` from the loopback address `from`.
pub async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0))
        .unwrap();
    sock.connect(to).await.unwrap()
}

/// `RssAnon` of `pid`, in MB (0 once it is gone).
pub fn rss_anon_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The highest `RssAnon` of `pid`, sampled every 50 ms until `stop`.
pub fn sample_peak(pid: u32, stop: Arc<AtomicBool>) -> Arc<Mutex<f64>> {
    let peak = Arc::new(Mutex::new(0.0f64));
    let p = Arc::clone(&peak);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let now = rss_anon_mb(pid);
            let mut m = p.lock().unwrap();
            *m = m.max(now);
            drop(m);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    peak
}

/// Runs the binary with `args` and `env`, which must refuse to start:
/// returns what it printed on stderr (fails if it is still running after 10 s).
pub fn binary_refuses(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replay-server"))
        .args(["--db", ":memory:"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn replay-server");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} {env:?}: the server started");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{args:?} {env:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    stderr
}
