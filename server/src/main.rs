//! `replay-server`: the reference runtime. Prints exactly one line to stdout,
//! `replay-server listening on http://IP:PORT`; logs go to stderr.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use replay_server::store::Synchronous;
use replay_server::{Config, LagPolicy};

/// The reference runtime of the replay protocol (axum + SQLite).
///
/// Every flag can also be set through the environment variable shown beside
/// it (a flag given on the command line wins), so a token need not be in argv.
#[derive(Debug, Parser)]
#[command(name = "replay-server", version)]
struct Args {
    /// Address to bind; port 0 picks a free one. A non-loopback address needs a token.
    #[arg(
        long,
        env = "REPLAY_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8787"
    )]
    listen: String,
    /// SQLite file, `:memory:`, or `postgres://USER@HOST:PORT/DB` (a
    /// cluster's shared log; prefer REPLAY_DB when the URL holds a password).
    #[arg(
        long,
        env = "REPLAY_DB",
        value_name = "PATH|URL",
        hide_env_values = true,
        default_value = "./replay.sqlite"
    )]
    db: String,
    /// How commits reach the disk: `full` syncs each before it is published
    /// (survives a power loss); `normal` survives a killed process only.
    #[arg(long, env = "REPLAY_SYNCHRONOUS", value_enum, default_value_t = SyncMode::Full)]
    synchronous: SyncMode,
    /// Require `Authorization: Bearer T` on `/v1`.
    #[arg(long, env = "REPLAY_TOKEN", value_name = "T", hide_env_values = true)]
    token: Option<String>,
    /// Read the token from a file (surrounding whitespace is ignored).
    #[arg(
        long,
        env = "REPLAY_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "token"
    )]
    token_file: Option<std::path::PathBuf>,
    /// CORS origin, repeatable (`*`: any origin). Its host is also an allowed Host.
    #[arg(
        long,
        env = "REPLAY_ALLOW_ORIGIN",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    allow_origin: Vec<String>,
    /// CORS with credentials: pages of the `--allow-origin` origins (never
    /// `*`) may send cookies, such as the `replay_token` cookie.
    #[arg(long, env = "REPLAY_ALLOW_CREDENTIALS")]
    allow_credentials: bool,
    /// One more allowed Host name (besides loopback names and the origins' hosts), repeatable.
    #[arg(
        long,
        env = "REPLAY_ALLOW_HOST",
        value_name = "HOST",
        value_delimiter = ','
    )]
    allow_host: Vec<String>,
    /// Serve the files of DIR at `/`.
    #[arg(long = "static", env = "REPLAY_STATIC", value_name = "DIR")]
    static_dir: Option<String>,
    /// Seconds a browser may reuse a static file but HTML without asking again
    /// (`Cache-Control: public, max-age=N`; HTML is always `no-cache`; 0: every file revalidated).
    #[arg(long, env = "REPLAY_STATIC_MAX_AGE", value_name = "N", default_value_t = Config::default().static_max_age)]
    static_max_age: u32,
    /// Enable `/v1/admin/*` (fault injection, raw append); loopback or with a token only.
    #[arg(long, env = "REPLAY_FAULTS")]
    faults: bool,
    /// Heartbeat after N ms of stream silence.
    #[arg(long, env = "REPLAY_HEARTBEAT_MS", value_name = "N", default_value_t = Config::default().heartbeat_ms)]
    heartbeat_ms: u64,
    /// Delay between `turn.delta`s (`/slow`: x10).
    #[arg(long, env = "REPLAY_DELTA_MS", value_name = "N", default_value_t = Config::default().delta_ms)]
    delta_ms: u64,
    /// How long an `/ask` question lives only in `live_turn`.
    #[arg(long, env = "REPLAY_ASK_PERSIST_MS", value_name = "N", default_value_t = Config::default().ask_persist_ms)]
    ask_persist_ms: u64,
    /// How long a `/bg` background task runs.
    #[arg(long, env = "REPLAY_BG_MS", value_name = "N", default_value_t = Config::default().bg_ms)]
    bg_ms: u64,
    /// Seed of the scripted agent's text and chunking.
    #[arg(long, env = "REPLAY_SEED", value_name = "N", default_value_t = Config::default().seed)]
    seed: u64,
    /// What happens to a subscriber whose buffer is full.
    #[arg(long, env = "REPLAY_LAG_POLICY", value_enum, default_value_t = Policy::Disconnect)]
    lag_policy: Policy,
    /// Frames buffered per subscriber.
    #[arg(long, env = "REPLAY_SUBSCRIBER_BUFFER", value_name = "N", default_value_t = Config::default().subscriber_buffer)]
    subscriber_buffer: usize,
    /// On a busy stream, a durable frame waits N ms for the frames behind it (one write for all; 0: at once).
    #[arg(long, env = "REPLAY_STREAM_BATCH_MS", value_name = "N", default_value_t = Config::default().stream_batch_ms)]
    stream_batch_ms: u64,
    /// Open streams per process (more: 503 with Retry-After).
    #[arg(long, env = "REPLAY_MAX_STREAMS", value_name = "N", default_value_t = Config::default().max_streams)]
    max_streams: usize,
    /// Open streams per scope log, the global list counting as one (more: 503).
    #[arg(long, env = "REPLAY_MAX_STREAMS_PER_SCOPE", value_name = "N", default_value_t = Config::default().max_streams_per_scope)]
    max_streams_per_scope: usize,
    /// End a connection whose peer has accepted no byte for N ms.
    #[arg(long, env = "REPLAY_WRITE_TIMEOUT_MS", value_name = "N", default_value_t = Config::default().write_timeout_ms)]
    write_timeout_ms: u64,
    /// Most events a session may have for `GET .../transcript` (more: 413).
    #[arg(long, env = "REPLAY_TRANSCRIPT_MAX_EVENTS", value_name = "N", default_value_t = Config::default().transcript_max_events)]
    transcript_max_events: u64,
    /// Most bytes of event data a session may have for `GET .../transcript` (more: 413).
    #[arg(long, env = "REPLAY_TRANSCRIPT_MAX_BYTES", value_name = "N", default_value_t = Config::default().transcript_max_bytes)]
    transcript_max_bytes: u64,
    /// Most bytes of event data in one page or backlog read (the page says has_more).
    #[arg(long, env = "REPLAY_PAGE_MAX_BYTES", value_name = "N", default_value_t = Config::default().page_max_bytes)]
    page_max_bytes: usize,
    /// Bytes of JSON pages and transcripts being built or written at once (more wait, then 503).
    #[arg(long, env = "REPLAY_MAX_RESPONSE_BYTES", value_name = "N", default_value_t = Config::default().max_response_bytes)]
    max_response_bytes: usize,
    /// Bytes of frames buffered per subscriber (more: the lag policy).
    #[arg(long, env = "REPLAY_SUBSCRIBER_BUFFER_BYTES", value_name = "N", default_value_t = Config::default().subscriber_buffer_bytes)]
    subscriber_buffer_bytes: usize,
    /// Bytes of stream backlogs being read or waiting for their connection, in the process
    /// (a stream finding no room within the write timeout ends).
    #[arg(long, env = "REPLAY_MAX_STREAM_BUFFER_BYTES", value_name = "N", default_value_t = Config::default().max_stream_buffer_bytes)]
    max_stream_buffer_bytes: usize,
    /// SO_SNDBUF of every connection (the kernel's send buffer); 0: the kernel's own sizing.
    #[arg(long, env = "REPLAY_SOCKET_SEND_BUFFER_BYTES", value_name = "N", default_value_t = Config::default().socket_send_buffer_bytes)]
    socket_send_buffer_bytes: usize,
    /// Subscriptions one peer address may hold, each sub of a multiplexed stream counting (more: 503).
    #[arg(long, env = "REPLAY_MAX_STREAMS_PER_CLIENT", value_name = "N", default_value_t = Config::default().max_streams_per_client)]
    max_streams_per_client: usize,
    /// Open connections, lowered to fit the file descriptor limit; at the cap
    /// the connection idle the longest is closed for a new one (none idle: 503).
    #[arg(long, env = "REPLAY_MAX_CONNECTIONS", value_name = "N", default_value_t = Config::default().max_connections)]
    max_connections: usize,
    /// Open connections one peer address may hold (more: 503 with
    /// Retry-After); default: a quarter of --max-connections.
    #[arg(long, env = "REPLAY_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N")]
    max_connections_per_address: Option<usize>,
    /// Time a connection has to send a request head, and an idle connection to start the next.
    #[arg(long, env = "REPLAY_HEADER_TIMEOUT_MS", value_name = "N", default_value_t = Config::default().header_timeout_ms)]
    header_timeout_ms: u64,
    /// Turns of one session running or queued (more: 429 with Retry-After).
    #[arg(long, env = "REPLAY_MAX_QUEUED_TURNS", value_name = "N", default_value_t = Config::default().max_queued_turns)]
    max_queued_turns: usize,
    /// Turns running or queued in the whole process (more: 503 with Retry-After).
    #[arg(long, env = "REPLAY_MAX_QUEUED_TURNS_TOTAL", value_name = "N", default_value_t = Config::default().max_queued_turns_total)]
    max_queued_turns_total: usize,
    /// Postgres only: a node's hold on its turns lasts this long without
    /// renewal (renewed every third of it); then another node ends them.
    #[arg(long, env = "REPLAY_TURN_LEASE_MS", value_name = "MS", default_value_t = Config::default().turn_lease_ms)]
    turn_lease_ms: u64,
    /// Postgres only: Redis for the cluster's live tail (every node streams
    /// every turn's deltas and snapshots), e.g. redis://127.0.0.1:6379.
    #[arg(long, env = "REPLAY_REDIS", value_name = "URL", hide_env_values = true)]
    redis: Option<String>,
    /// Serve no multiplexed stream: `GET /v1/stream` answers 404 (a runtime without PROTOCOL §4.6).
    #[arg(long, env = "REPLAY_NO_MULTIPLEX")]
    no_multiplex: bool,
    /// Worker threads of the server's runtime; default: one per core this
    /// process may use. Nodes sharing a machine: its cores over the nodes.
    #[arg(long, env = "REPLAY_THREADS", value_name = "N")]
    threads: Option<std::num::NonZeroUsize>,
}

/// `--synchronous` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum SyncMode {
    /// Each commit is on disk before it is published.
    Full,
    /// A power loss may lose the newest commits.
    Normal,
}

/// `--lag-policy` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Policy {
    /// End the stream; the client reconnects with its cursor.
    Disconnect,
    /// Skip durable frames (gap repair fills them); a critical transient
    /// that does not fit ends the stream.
    Skip,
}

impl Args {
    /// The configuration these flags describe (reads the token file).
    fn into_config(self) -> Result<Config, String> {
        let token = match &self.token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(format!("--token-file {}: empty", path.display()));
                }
                Some(token.to_owned())
            }
            None => self.token,
        };
        if self.redis.is_some() && !replay_server::store::pg::is_url(&self.db) {
            return Err("--redis needs a shared log (a postgres:// --db)".into());
        }
        Ok(Config {
            listen: self.listen,
            db: self.db,
            synchronous: match self.synchronous {
                SyncMode::Full => Synchronous::Full,
                SyncMode::Normal => Synchronous::Normal,
            },
            token,
            allow_origins: self.allow_origin,
            allow_credentials: self.allow_credentials,
            allow_hosts: self.allow_host,
            static_dir: self.static_dir,
            static_max_age: self.static_max_age,
            faults: self.faults,
            heartbeat_ms: self.heartbeat_ms,
            delta_ms: self.delta_ms,
            ask_persist_ms: self.ask_persist_ms,
            bg_ms: self.bg_ms,
            seed: self.seed,
            lag_policy: match self.lag_policy {
                Policy::Disconnect => LagPolicy::Disconnect,
                Policy::Skip => LagPolicy::Skip,
            },
            subscriber_buffer: self.subscriber_buffer,
            stream_batch_ms: self.stream_batch_ms,
            max_streams: self.max_streams,
            max_streams_per_scope: self.max_streams_per_scope,
            write_timeout_ms: self.write_timeout_ms,
            transcript_max_events: self.transcript_max_events,
            transcript_max_bytes: self.transcript_max_bytes,
            page_max_bytes: self.page_max_bytes,
            max_response_bytes: self.max_response_bytes,
            subscriber_buffer_bytes: self.subscriber_buffer_bytes,
            max_stream_buffer_bytes: self.max_stream_buffer_bytes,
            socket_send_buffer_bytes: self.socket_send_buffer_bytes,
            max_streams_per_client: self.max_streams_per_client,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            header_timeout_ms: self.header_timeout_ms,
            max_queued_turns: self.max_queued_turns,
            max_queued_turns_total: self.max_queued_turns_total,
            turn_lease_ms: self.turn_lease_ms,
            redis: self.redis,
            no_multiplex: self.no_multiplex,
        })
    }
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

fn main() -> ExitCode {
    let args = Args::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(n.get());
    }
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(serve(args)),
        Err(e) => {
            eprintln!("replay-server: the runtime did not start: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> ExitCode {
    let cfg = match args.into_config() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("replay-server: {e}");
            return ExitCode::from(2);
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

    fn parse(s: &str) -> Result<Config, String> {
        let argv = std::iter::once("replay-server").chain(s.split_whitespace());
        Args::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .into_config()
    }

    #[test]
    fn parses_every_flag() {
        let cfg = parse(
            "--listen 127.0.0.1:0 --db :memory: --token t --allow-origin * --allow-origin=http://a \
             --allow-host h.example --static www --faults --heartbeat-ms 50 --delta-ms 1 \
             --ask-persist-ms 2 --bg-ms 3 --seed 9 --lag-policy skip --subscriber-buffer 8 \
             --max-streams 10 --max-streams-per-scope 4 --write-timeout-ms 700 \
             --transcript-max-events 99 --synchronous normal --no-multiplex \
             --max-connections 40 --max-connections-per-address 5 \
             --max-stream-buffer-bytes 4096 --socket-send-buffer-bytes 0",
        )
        .unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:0");
        assert_eq!(cfg.db, ":memory:");
        assert_eq!(cfg.synchronous, Synchronous::Normal);
        assert_eq!(cfg.token.as_deref(), Some("t"));
        assert_eq!(cfg.allow_origins, vec!["*", "http://a"]);
        assert_eq!(cfg.allow_hosts, vec!["h.example"]);
        assert_eq!(cfg.static_dir.as_deref(), Some("www"));
        assert!(cfg.faults && cfg.no_multiplex);
        assert_eq!((cfg.heartbeat_ms, cfg.delta_ms, cfg.seed), (50, 1, 9));
        assert_eq!((cfg.ask_persist_ms, cfg.bg_ms), (2, 3));
        assert_eq!(cfg.lag_policy, LagPolicy::Skip);
        assert_eq!(cfg.subscriber_buffer, 8);
        assert_eq!((cfg.max_streams, cfg.max_streams_per_scope), (10, 4));
        assert_eq!((cfg.write_timeout_ms, cfg.transcript_max_events), (700, 99));
        assert_eq!(
            (cfg.max_connections, cfg.max_connections_per_address),
            (40, Some(5))
        );
        assert_eq!(
            (cfg.max_stream_buffer_bytes, cfg.socket_send_buffer_bytes),
            (4096, 0)
        );
    }

    #[test]
    fn defaults_match_the_library_defaults() {
        let cfg = parse("").unwrap();
        let lib = Config::default();
        assert_eq!(cfg.listen, lib.listen);
        assert_eq!(cfg.db, lib.db);
        assert_eq!(cfg.synchronous, lib.synchronous);
        assert_eq!(cfg.lag_policy, lib.lag_policy);
        assert_eq!(cfg.max_streams, lib.max_streams);
        assert_eq!(cfg.write_timeout_ms, lib.write_timeout_ms);
        assert_eq!(cfg.max_connections, lib.max_connections);
        assert_eq!(
            cfg.max_connections_per_address,
            lib.max_connections_per_address
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("--heartbeat-ms x").is_err());
        assert!(parse("--lag-policy maybe").is_err());
        assert!(parse("--bogus").is_err());
        assert!(parse("--db").is_err());
        assert!(parse("--token a --token-file b").is_err());
        assert!(parse("--token-file /nonexistent/replay-token").is_err());
        assert!(
            parse("--redis redis://127.0.0.1:1").is_err(),
            "SQLite has no other node"
        );
    }

    #[test]
    fn the_live_tail_is_for_a_shared_log() {
        let cfg = parse("--db postgres://h/db --redis redis://127.0.0.1:1").unwrap();
        assert_eq!(cfg.redis.as_deref(), Some("redis://127.0.0.1:1"));
        assert_eq!(parse("").unwrap().redis, None);
    }
}
