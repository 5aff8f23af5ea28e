//! CPU time spent while the answer streams, per process: what the 2 cores
//! went to (the nodes, Redis, the bench's own readers) is where the tail's
//! ceiling is.

use std::time::Instant;

/// Clock ticks per second of `/proc/*/stat` (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// The fields of `/proc/{pid}/stat` after the command name (which may
/// hold spaces: `(…)`): the state is `[0]`, the parent `[1]`, utime and
/// stime `[11]` and `[12]`, the reaped children's `[13]` and `[14]`.
fn stat_fields(pid: &str) -> Vec<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect()
}

fn field(f: &[f64], i: usize) -> f64 {
    f.get(i).copied().unwrap_or(0.0)
}

/// User + system CPU seconds of process `pid` (`self` for the bench).
pub fn proc_cpu_s(pid: &str) -> f64 {
    let f = stat_fields(pid);
    (field(&f, 11) + field(&f, 12)) / USER_HZ
}

/// CPU seconds of a Postgres server whose postmaster is `pid`: its own,
/// its backends' that exited (reaped by it) and its living children's.
pub fn pg_cpu_s(postmaster: u32) -> f64 {
    let me = stat_fields(&postmaster.to_string());
    let mut ticks = field(&me, 11) + field(&me, 12) + field(&me, 13) + field(&me, 14);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let f = stat_fields(pid);
        if field(&f, 1) == f64::from(postmaster) {
            ticks += field(&f, 11) + field(&f, 12);
        }
    }
    ticks / USER_HZ
}

/// Redis's own CPU seconds (`INFO cpu`: used_cpu_user + used_cpu_sys).
async fn redis_cpu_s(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .expect("INFO cpu");
    info.lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split_once(':')?.1.trim().parse::<f64>().ok())
        .sum()
}

/// CPU seconds per process since [`Meter::start`], and the wall time.
pub struct Cpu {
    /// Every node together.
    pub nodes_s: f64,
    pub redis_s: f64,
    /// The bench process: the readers of every stream.
    pub bench_s: f64,
    pub wall_s: f64,
}

/// A running measurement.
pub struct Meter {
    pids: Vec<String>,
    redis: redis::aio::MultiplexedConnection,
    at: Instant,
    start: Cpu,
}

impl Meter {
    pub async fn start(pids: &[u32], redis_url: &str) -> Meter {
        let client = redis::Client::open(redis_url).expect("redis url");
        let mut redis = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        let start = Cpu {
            nodes_s: pids.iter().map(|p| proc_cpu_s(p)).sum(),
            redis_s: redis_cpu_s(&mut redis).await,
            bench_s: proc_cpu_s("self"),
            wall_s: 0.0,
        };
        Meter {
            pids,
            redis,
            at: Instant::now(),
            start,
        }
    }

    pub async fn stop(mut self) -> Cpu {
        Cpu {
            nodes_s: self.pids.iter().map(|p| proc_cpu_s(p)).sum::<f64>() - self.start.nodes_s,
            redis_s: redis_cpu_s(&mut self.redis).await - self.start.redis_s,
            bench_s: proc_cpu_s("self") - self.start.bench_s,
            wall_s: self.at.elapsed().as_secs_f64(),
        }
    }
}

/// Write system calls of process `pid` so far (`/proc/{pid}/io`'s
/// `syscw`): how many writes the nodes' frames took.
pub fn proc_writes(pid: &str) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
