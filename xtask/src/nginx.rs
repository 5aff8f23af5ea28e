//! A throwaway nginx in front of a replay-server, configured as the proxies
//! that mute an event stream are (the failure: a stream whose headers and events
//! a proxy holds while every JSON answer comes through): it compresses
//! `text/event-stream` and ignores the runtime's `X-Accel-Buffering: no`.
//! Debian's `nginx-light` on a free loopback port, its prefix, config and
//! logs in a temp folder, `daemon off` and one process (`master_process
//! off`: killing it leaves no worker behind), stopped when dropped. A test
//! turns compression off and on again with a file in the prefix
//! ([`UNCOMPRESSED`]), read on every request: a single-process nginx cannot
//! reload its config (after a `SIGHUP` it answers with its error log).

use crate::cmd::{output, Result};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that gives the browser suites the proxy's URL.
pub const URL_VAR: &str = "REPLAY_PROXY_URL";
/// The access log's line: when the request ended (seconds, ms precision),
/// its status and its URI; a test counts the runtime's requests there.
const LOG_FORMAT: &str = "'$msec $status $request_uri'";
/// While this file exists in the prefix, nothing is compressed.
pub const UNCOMPRESSED: &str = "uncompressed";
/// How long a started nginx has to accept connections.
const START_WAIT: Duration = Duration::from_secs(10);

/// Installs Debian's `nginx-light` unless nginx is on PATH.
pub fn ensure() -> Result {
    crate::cmd::apt_install(output("nginx", &["-v"]).is_some(), &["nginx-light"])
}

/// A running throwaway nginx.
pub struct TempNginx {
    child: Child,
    /// The prefix: `nginx.conf`, `nginx.pid`, `access.log`, `error.log`.
    pub dir: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

/// The config: one server on `port` proxying to `upstream` (`host:port`),
/// compressing event streams and buffering whatever the runtime asks.
fn config(dir: &str, port: u16, upstream: &str) -> String {
    format!(
        "daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
  log_format requests {LOG_FORMAT};
  access_log {dir}/access.log requests;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  server {{
    listen 127.0.0.1:{port};
    gzip on;
    gzip_types text/event-stream application/json;
    location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_buffering on;
      proxy_ignore_headers X-Accel-Buffering;
      if (-f {dir}/{UNCOMPRESSED}) {{
        gzip off;
      }}
    }}
  }}
}}
"
    )
}

impl TempNginx {
    /// nginx compressing event streams in front of `upstream` (a URL
    /// `http://host:port`); waits until it accepts connections.
    pub fn start(upstream: &str) -> Result<TempNginx> {
        let host = upstream
            .strip_prefix("http://")
            .ok_or_else(|| format!("not an http:// URL: {upstream}"))?
            .trim_end_matches('/');
        // One prefix per nginx: a run may hold several at once (the engine
        // layer's lanes).
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("replay-nginx-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let dir_s = dir.to_str().ok_or("a utf-8 temp folder")?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir_s, port, host)).map_err(|e| e.to_string())?;
        let child = Command::new("nginx")
            .args(["-p", dir_s, "-c", conf.to_str().ok_or("utf-8")?])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start nginx (run set-up): {e}"))?;
        let nginx = TempNginx {
            child,
            dir,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + START_WAIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("nginx did not listen on {port} in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }
}

impl Drop for TempNginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
