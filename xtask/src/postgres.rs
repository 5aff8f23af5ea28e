//! A throwaway Postgres for the cluster tests: Debian's
//! `postgresql` binaries, a cluster in a temp folder owned by an
//! unprivileged user (initdb refuses root), on a free loopback port with
//! trust authentication (nothing else can reach it), stopped and removed
//! when dropped, also when a test layer fails.

use crate::cmd::{output, run, Result};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The environment variable that gives the tests the database's URL.
pub const URL_VAR: &str = "REPLAY_TEST_POSTGRES";
/// The environment variable that gives the tests the command (a JSON array:
/// program, then arguments) that restarts that Postgres like a crash
/// (`pg_ctl restart -m immediate`), for the "Postgres restarted under load"
/// tests.
pub const RESTART_VAR: &str = "REPLAY_TEST_POSTGRES_RESTART";
/// The commands (JSON arrays like [`RESTART_VAR`]'s) that stop that
/// Postgres like a crash and start it again, for the "Postgres stopped
/// under a writer and a follower" test (an outage longer than a restart).
pub const STOP_VAR: &str = "REPLAY_TEST_POSTGRES_STOP";
/// See [`STOP_VAR`].
pub const START_VAR: &str = "REPLAY_TEST_POSTGRES_START";
/// The user who owns the cluster when xtask runs as root.
const UNPRIVILEGED: &str = "nobody";

/// The newest `/usr/lib/postgresql/*/bin` holding `initdb` and `pg_ctl`.
fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

/// Installs Debian's `postgresql` unless its binaries are present.
pub fn ensure() -> Result {
    crate::cmd::apt_install(bin_dir().is_some(), &["postgresql"])
}

/// A running throwaway cluster.
pub struct TempPostgres {
    place: Place,
    /// The server options it was started with (`pg_ctl start -o`).
    opts: String,
    /// `postgres://…` of its `postgres` database.
    pub url: String,
}

fn is_root() -> bool {
    output("id", &["-u"]).as_deref() == Some("0")
}

/// The argv that runs a Postgres binary, as [`UNPRIVILEGED`] when we are
/// root.
fn pg_argv(bin: &Path, tool: &str, as_root: bool, args: &[&str]) -> Vec<String> {
    let program = bin.join(tool).display().to_string();
    let mut argv: Vec<String> = if as_root {
        vec![
            "runuser".into(),
            "-u".into(),
            UNPRIVILEGED.into(),
            "--".into(),
        ]
    } else {
        Vec::new()
    };
    argv.push(program);
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

/// Runs a Postgres binary, as [`UNPRIVILEGED`] when we are root.
fn pg_cmd(bin: &Path, tool: &str, as_root: bool, args: &[&str]) -> Result {
    let argv = pg_argv(bin, tool, as_root, args);
    let program = &argv[0];
    let out = Command::new(program)
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{tool} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl TempPostgres {
    /// initdb + pg_ctl start in a new temp folder.
    pub fn start() -> Result<TempPostgres> {
        TempPostgres::start_in(
            &std::env::temp_dir().join(format!("replay-pg-{}", std::process::id())),
        )
    }

    /// initdb + pg_ctl start in `dir`, after stopping and removing a cluster
    /// left there (a demo stopped by Ctrl-C leaves its own).
    pub fn start_in(dir: &Path) -> Result<TempPostgres> {
        let bin = bin_dir().ok_or("no initdb/pg_ctl under /usr/lib/postgresql (run set-up)")?;
        let as_root = is_root();
        let place = Place {
            bin,
            dir: dir.to_path_buf(),
            as_root,
        };
        place.stop();
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut pg = TempPostgres {
            place,
            opts: String::new(),
            url: String::new(),
        };
        if as_root {
            // The folder (and what initdb puts in it) belongs to the user.
            run(
                "chown",
                &[UNPRIVILEGED, &pg.place.dir.display().to_string()],
            )?;
        }
        let data = pg.place.dir.join("data");
        let data = data.to_str().ok_or("temp path is not UTF-8")?;
        pg_cmd(
            &pg.place.bin,
            "initdb",
            as_root,
            &[
                "-D",
                data,
                "-U",
                "replay",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let socket_dir = pg.place.dir.display().to_string();
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={socket_dir} \
             -c fsync=off -c max_connections=200"
        );
        pg_cmd(
            &pg.place.bin,
            "pg_ctl",
            as_root,
            &["-D", data, "-o", &opts, "-l", &pg.logfile(), "-w", "start"],
        )?;
        pg.opts = opts;
        pg.url = format!("postgres://replay@127.0.0.1:{port}/postgres");
        stop_on_ctrl_c();
        running().push(pg.place.clone());
        Ok(pg)
    }

    /// [`RESTART_VAR`]'s value: `pg_ctl restart -m immediate` of this
    /// cluster, which keeps the options it was started with
    /// (`postmaster.opts`) and waits until it accepts connections again.
    /// The restarted server logs to the same file: without `-l` it would
    /// inherit pg_ctl's stdout and hold it open, so a caller reading that
    /// output to its end would wait forever.
    pub fn restart_command(&self) -> String {
        let logfile = self.logfile();
        json_argv(&self.ctl_argv(&["-l", &logfile, "-m", "immediate", "-w", "restart"]))
    }

    /// [`STOP_VAR`]'s value: `pg_ctl stop -m immediate` (a crash: no
    /// checkpoint, clients cut at once).
    pub fn stop_command(&self) -> String {
        json_argv(&self.ctl_argv(&["-m", "immediate", "-w", "stop"]))
    }

    /// [`START_VAR`]'s value: `pg_ctl start` with the options, port and log
    /// file of the first start (the same URL works again).
    pub fn start_command(&self) -> String {
        let logfile = self.logfile();
        json_argv(&self.ctl_argv(&["-o", &self.opts, "-l", &logfile, "-w", "start"]))
    }

    /// Where the server logs (every start, restart included).
    fn logfile(&self) -> String {
        self.place.dir.join("postgres.log").display().to_string()
    }

    /// The argv of `pg_ctl -D <data> args…` for this cluster.
    fn ctl_argv(&self, args: &[&str]) -> Vec<String> {
        let data = self.place.dir.join("data").display().to_string();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        pg_argv(&self.place.bin, "pg_ctl", self.place.as_root, &all)
    }
}

/// An argv as the JSON array the tests read.
fn json_argv(argv: &[String]) -> String {
    let quoted: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!("[{}]", quoted.join(","))
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        running().retain(|c| c.dir != self.place.dir);
        self.place.stop();
    }
}

/// Where a cluster lives and how its tools are run: what stopping it needs.
#[derive(Clone)]
struct Place {
    bin: PathBuf,
    dir: PathBuf,
    as_root: bool,
}

impl Place {
    /// Stops the cluster in `dir` (if one runs) and removes the folder.
    fn stop(&self) {
        let data = self.dir.join("data");
        if data.join("postmaster.pid").exists() {
            let data = data.display().to_string();
            let stopped = pg_cmd(
                &self.bin,
                "pg_ctl",
                self.as_root,
                &["-D", &data, "-m", "immediate", "-w", "stop"],
            );
            if let Err(e) = stopped {
                eprintln!("stopping the test Postgres: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The clusters this process started and has not stopped: Ctrl-C stops
/// them (see [`stop_on_ctrl_c`]); dropping their [`TempPostgres`] does
/// otherwise.
fn running() -> std::sync::MutexGuard<'static, Vec<Place>> {
    static RUNNING: std::sync::Mutex<Vec<Place>> = std::sync::Mutex::new(Vec::new());
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Once per process: on Ctrl-C, stops every cluster still running, then
/// exits. pg_ctl starts Postgres in a session of its own, so the terminal's
/// SIGINT does not reach it, and an exit skips the `Drop`s.
fn stop_on_ctrl_c() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            for place in running().drain(..) {
                place.stop();
            }
            std::process::exit(130);
        });
        if let Err(e) = installed {
            eprintln!("Ctrl-C will not stop the throwaway Postgres: {e}");
        }
    });
}
