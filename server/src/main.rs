//! `replay-server`: the reference runtime. Prints exactly one line to stdout,
//! `replay-server listening on http://IP:PORT`; logs go to stderr.

use std::io::Write;
use std::process::ExitCode;

use replay_server::{Config, LagPolicy};

const USAGE: &str = "usage: replay-server [--listen ADDR] [--db PATH|:memory:] [--token T]
  [--allow-origin ORIGIN]... [--static DIR] [--faults] [--heartbeat-ms N]
  [--delta-ms N] [--ask-persist-ms N] [--bg-ms N] [--seed N]
  [--lag-policy disconnect|skip] [--subscriber-buffer N]";

fn parse_args(args: impl Iterator<Item = String>) -> Result<Config, String> {
    let mut cfg = Config::default();
    let mut args = args.peekable();
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: not a number: {v}"))
    }
    while let Some(a) = args.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match flag.as_str() {
            "--listen" => cfg.listen = value().ok_or("--listen needs a value")?,
            "--db" => cfg.db = value().ok_or("--db needs a value")?,
            "--token" => cfg.token = Some(value().ok_or("--token needs a value")?),
            "--allow-origin" => cfg
                .allow_origins
                .push(value().ok_or("--allow-origin needs a value")?),
            "--static" => cfg.static_dir = Some(value().ok_or("--static needs a value")?),
            "--faults" => cfg.faults = true,
            "--heartbeat-ms" => cfg.heartbeat_ms = num(&flag, value())?,
            "--delta-ms" => cfg.delta_ms = num(&flag, value())?,
            "--ask-persist-ms" => cfg.ask_persist_ms = num(&flag, value())?,
            "--bg-ms" => cfg.bg_ms = num(&flag, value())?,
            "--seed" => cfg.seed = num(&flag, value())?,
            "--subscriber-buffer" => cfg.subscriber_buffer = num(&flag, value())?,
            "--lag-policy" => {
                cfg.lag_policy = match value().as_deref() {
                    Some("disconnect") => LagPolicy::Disconnect,
                    Some("skip") => LagPolicy::Skip,
                    other => {
                        return Err(format!(
                            "--lag-policy: expected disconnect|skip, got {other:?}"
                        ))
                    }
                }
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(cfg)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> ExitCode {
    let cfg = match parse_args(std::env::args().skip(1)) {
        Ok(cfg) => cfg,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("replay-server: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(tracing::Level::INFO)
        .init();
    let running = match replay_server::start(cfg).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("replay-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "replay-server listening on {}", running.base_url());
        let _ = out.flush();
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> impl Iterator<Item = String> + '_ {
        s.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn parses_every_flag() {
        let cfg = parse_args(args(
            "--listen 127.0.0.1:0 --db :memory: --token t --allow-origin * --allow-origin=http://a \
             --static www --faults --heartbeat-ms 50 --delta-ms 1 --seed 9 --lag-policy skip --subscriber-buffer 8",
        ))
        .unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:0");
        assert_eq!(cfg.db, ":memory:");
        assert_eq!(cfg.token.as_deref(), Some("t"));
        assert_eq!(cfg.allow_origins, vec!["*", "http://a"]);
        assert_eq!(cfg.static_dir.as_deref(), Some("www"));
        assert!(cfg.faults);
        assert_eq!((cfg.heartbeat_ms, cfg.delta_ms, cfg.seed), (50, 1, 9));
        assert_eq!(cfg.lag_policy, LagPolicy::Skip);
        assert_eq!(cfg.subscriber_buffer, 8);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse_args(args("--heartbeat-ms x")).is_err());
        assert!(parse_args(args("--lag-policy maybe")).is_err());
        assert!(parse_args(args("--bogus")).is_err());
        assert!(parse_args(args("--db")).is_err());
    }
}
