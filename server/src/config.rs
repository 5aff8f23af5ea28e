//! The server's configuration (what the command-line flags set).

use crate::fanout::LagPolicy;
use crate::store::Synchronous;

/// Server configuration (the command-line flags; see `docs/server.md`).
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to bind; port 0 picks a free one. A non-loopback address
    /// needs a token.
    pub listen: String,
    /// SQLite file, `:memory:`, or a `postgres://` URL (a cluster's shared log).
    pub db: String,
    /// How commits reach the disk (default: synced before they are published).
    pub synchronous: Synchronous,
    /// Bearer token required on `/v1` when set.
    pub token: Option<String>,
    /// CORS origins (`*` for any); empty: no CORS headers. The host of each
    /// listed origin (not `*`) is also an allowed `Host`.
    pub allow_origins: Vec<String>,
    /// CORS answers say `Access-Control-Allow-Credentials: true`, so pages
    /// of the listed origins may send cookies (the [`TOKEN_COOKIE`]); needs
    /// explicit origins, never `*`.
    pub allow_credentials: bool,
    /// More allowed `Host` names (besides loopback names and the origins' hosts).
    pub allow_hosts: Vec<String>,
    /// Directory served at `/`.
    pub static_dir: Option<String>,
    /// Seconds a browser may reuse a static file but HTML without asking
    /// (`Cache-Control: max-age`; 0: every file revalidated).
    pub static_max_age: u32,
    /// Enables `/v1/admin/*` (loopback or with a token only).
    pub faults: bool,
    /// Heartbeat after this much stream silence.
    pub heartbeat_ms: u64,
    /// Delay between `turn.delta`s (`/slow`: ten times more).
    pub delta_ms: u64,
    /// How long an `/ask` question lives only in `live_turn` before it is persisted.
    pub ask_persist_ms: u64,
    /// How long a `/bg` task runs.
    pub bg_ms: u64,
    /// Seed of the scripted agent.
    pub seed: u64,
    /// What to do with a subscriber whose buffer is full.
    pub lag_policy: LagPolicy,
    /// Frames buffered per subscriber.
    pub subscriber_buffer: usize,
    /// On a busy stream, how long a durable frame waits for the frames
    /// published behind it, so they go out in one write (0: at once).
    pub stream_batch_ms: u64,
    /// Open streams per process; more are refused with `503`.
    pub max_streams: usize,
    /// Open streams per scope log (the global list counts as one); more are
    /// refused with `503`.
    pub max_streams_per_scope: usize,
    /// A stream (or any response) whose peer accepts no byte for this long
    /// is ended.
    pub write_timeout_ms: u64,
    /// Most events a session may have for `GET .../transcript` (larger: `413`).
    pub transcript_max_events: u64,
    /// Most bytes of event data a session may have for `GET .../transcript`
    /// (larger: `413`).
    pub transcript_max_bytes: u64,
    /// Most bytes of event data in one JSON page (replay, event pages) or
    /// one backlog read of a stream; a page stops early and says `has_more`.
    pub page_max_bytes: usize,
    /// Bytes of JSON pages and transcripts being built or written at once;
    /// more wait, then `503 busy`.
    pub max_response_bytes: usize,
    /// Bytes of frames buffered per subscriber; more: the lag policy.
    pub subscriber_buffer_bytes: usize,
    /// Bytes of stream backlog pages being read, encoded or waiting for
    /// their connection, in the whole process; a stream whose next page
    /// finds no room within the write timeout is ended.
    pub max_stream_buffer_bytes: usize,
    /// `SO_SNDBUF` of every accepted connection (the kernel's send buffer,
    /// which it otherwise grows to `tcp_wmem`'s maximum); 0: the kernel's
    /// own sizing.
    pub socket_send_buffer_bytes: usize,
    /// Subscriptions one peer address may hold (a multiplexed stream with N
    /// subs holds N); more are refused with `503`.
    pub max_streams_per_client: usize,
    /// Open connections; lowered to fit the process's file descriptor limit.
    /// At the cap a new connection closes the one idle the longest, or is
    /// answered `503 too_many_connections` when none is idle.
    pub max_connections: usize,
    /// Open connections one peer address may hold (more: `503
    /// too_many_connections`); `None`: a quarter of `max_connections`.
    pub max_connections_per_address: Option<usize>,
    /// A connection has this long to send a request's head, and an idle
    /// keep-alive connection this long to start the next one.
    pub header_timeout_ms: u64,
    /// Turns of one session accepted but not finished (running or queued);
    /// more: `429`.
    pub max_queued_turns: usize,
    /// Turns accepted but not finished in the whole process; more: `503`.
    pub max_queued_turns_total: usize,
    /// Postgres only: how long a node's hold on its turns lasts without
    /// renewal; once it has run out, another node ends them.
    pub turn_lease_ms: u64,
    /// Postgres only: a Redis URL for the cluster's live tail (transients of
    /// every node's turns on every node); `None`: live tails stay on the
    /// node running the turn.
    pub redis: Option<String>,
    /// Serve no multiplexed stream (PROTOCOL.md §4.6): `GET /v1/stream`
    /// answers `404`, as a runtime with the scoped streams only would.
    pub no_multiplex: bool,
}

/// The cookie the `--token` check accepts instead of `Authorization:
/// Bearer`, for pages whose runtime authenticates with a cookie.
pub const TOKEN_COOKIE: &str = "replay_token";

impl Config {
    /// Refuses `--allow-credentials` without explicit origins: a browser
    /// ignores credentialed answers that allow `*`, and a server that sent
    /// them would let every page read with its visitors' cookies.
    pub fn check_cors(&self) -> Result<(), String> {
        if !self.allow_credentials {
            return Ok(());
        }
        if self.allow_origins.iter().any(|o| o == "*") {
            return Err(
                "refusing --allow-credentials with --allow-origin '*': credentials need \
                 the pages' explicit origins (e.g. --allow-origin http://localhost:5173)"
                    .into(),
            );
        }
        if self.allow_origins.is_empty() {
            return Err(
                "--allow-credentials needs the pages' origins: give --allow-origin \
                 (e.g. --allow-origin http://localhost:5173)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Refuses a token that would protect nothing: an empty one
    /// (`--token ""`, `REPLAY_TOKEN=`) or one of whitespace only, which
    /// no `Authorization` header can carry (its value is trimmed).
    pub fn check_token(&self) -> Result<(), String> {
        match &self.token {
            Some(t) if t.trim().is_empty() => Err(
                "refusing an empty or blank token: give a real one (--token, --token-file, \
                 REPLAY_TOKEN) or none"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8787".into(),
            db: "./replay.sqlite".into(),
            synchronous: Synchronous::Full,
            token: None,
            allow_origins: Vec::new(),
            allow_credentials: false,
            allow_hosts: Vec::new(),
            static_dir: None,
            static_max_age: 600,
            faults: false,
            heartbeat_ms: 15_000,
            delta_ms: 30,
            ask_persist_ms: 300,
            bg_ms: 3_000,
            seed: 0,
            lag_policy: LagPolicy::Disconnect,
            subscriber_buffer: 1024,
            stream_batch_ms: 8,
            max_streams: 2048,
            max_streams_per_scope: 256,
            write_timeout_ms: 10_000,
            transcript_max_events: 100_000,
            transcript_max_bytes: 16 << 20,
            page_max_bytes: 1 << 20,
            max_response_bytes: 64 << 20,
            subscriber_buffer_bytes: 1 << 20,
            max_stream_buffer_bytes: 64 << 20,
            socket_send_buffer_bytes: 128 << 10,
            max_streams_per_client: 512,
            max_connections: 1024,
            max_connections_per_address: None,
            header_timeout_ms: 10_000,
            max_queued_turns: 16,
            max_queued_turns_total: 256,
            turn_lease_ms: 10_000,
            redis: None,
            no_multiplex: false,
        }
    }
}
