//! What the shapes read of the server and the machine: the server's heap
//! (`RssAnon` of `/proc/PID/status`), the kernel's TCP memory (all of
//! `/proc/net/sockstat`'s `TCP: … mem N` pages, both ends of loopback
//! connections and every other process's sockets), and the server's comms
//! diagnostics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// `RssAnon` of a process, in bytes (0 once it is gone).
pub fn rss_anon(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The kernel's TCP memory, in bytes (pages of 4 096).
pub fn tcp_mem() -> u64 {
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let line = sockstat.lines().find(|l| l.starts_with("TCP:"));
    let fields: Vec<&str> = line.map_or(Vec::new(), |l| l.split_whitespace().collect());
    fields
        .iter()
        .position(|f| *f == "mem")
        .and_then(|i| fields.get(i + 1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The peaks of [`rss_anon`] and [`tcp_mem`], sampled every 100 ms by a
/// task until [`Peaks::stop`].
pub struct Peaks {
    rss: Arc<AtomicU64>,
    tcp: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Peaks {
    /// Starts sampling the server `pid`.
    pub fn start(pid: u32) -> Peaks {
        let (rss, tcp) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (r, t) = (Arc::clone(&rss), Arc::clone(&tcp));
        let task = tokio::spawn(async move {
            loop {
                r.fetch_max(rss_anon(pid), Ordering::Relaxed);
                t.fetch_max(tcp_mem(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Peaks { rss, tcp, task }
    }

    /// Stops; the peaks in MB (10^6 bytes): (`RssAnon`, TCP memory).
    pub fn stop(self) -> (f64, f64) {
        self.task.abort();
        let mb = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
        (mb(&self.rss), mb(&self.tcp))
    }
}

/// The comms diagnostics (`Value::Null` when they do not answer in 2 s).
pub async fn comms(http: &reqwest::Client, base: &str) -> Value {
    get_json(http, &format!("{base}/v1/diagnostics/comms")).await
}

/// The diagnostics (connections among them), as [`comms`].
pub async fn diagnostics(http: &reqwest::Client, base: &str) -> Value {
    get_json(http, &format!("{base}/v1/diagnostics")).await
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let ask = async {
        let r = http.get(url).send().await?;
        r.json::<Value>().await
    };
    match tokio::time::timeout(Duration::from_secs(2), ask).await {
        Ok(Ok(v)) => v,
        _ => Value::Null,
    }
}

/// The 1-minute load average (the machine is shared: every figure is
/// printed with it).
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}
