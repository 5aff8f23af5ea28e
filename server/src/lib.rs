//! # replay-server
//!
//! The reference agent runtime for the replay protocol (`docs/protocol.md`):
//! an axum HTTP server over a SQLite event store, with a deterministic
//! scripted agent, startup recovery, bounded fan-out and fault injection.
//! See `docs/server.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), replay_server::ServerError> {
//! let running = replay_server::start(replay_server::Config::default()).await?;
//! println!("listening on {}", running.addr());
//! running.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod agent;
mod api;
pub mod app;
pub mod faults;
pub mod hub;
pub mod log;
pub mod recovery;
pub mod store;
pub mod transcript;
pub mod util;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
pub use hub::LagPolicy;

/// Server configuration (the command-line flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to bind; port 0 picks a free one.
    pub listen: String,
    /// SQLite file, or `:memory:`.
    pub db: String,
    /// Bearer token required on `/v1` when set.
    pub token: Option<String>,
    /// CORS origins (`*` for any); empty: no CORS headers.
    pub allow_origins: Vec<String>,
    /// Directory served at `/`.
    pub static_dir: Option<String>,
    /// Enables `/v1/admin/*`.
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8787".into(),
            db: "./replay.sqlite".into(),
            token: None,
            allow_origins: Vec::new(),
            static_dir: None,
            faults: false,
            heartbeat_ms: 15_000,
            delta_ms: 30,
            ask_persist_ms: 300,
            bg_ms: 3_000,
            seed: 0,
            lag_policy: LagPolicy::Disconnect,
            subscriber_buffer: 1024,
        }
    }
}

/// Errors of starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened or recovered.
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    /// The listen address could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// A started server.
pub struct Running {
    addr: SocketAddr,
    app: Arc<app::App>,
    shutdown: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The bound address (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shared state (store, hub, worker), for in-process drivers such as the benchmark.
    pub fn app(&self) -> &Arc<app::App> {
        &self.app
    }

    /// The current boot id.
    pub fn boot_id(&self) -> String {
        self.app.worker().boot_id.clone()
    }

    /// Graceful shutdown: ends every stream, stops the worker, waits for the server.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(());
        self.app.faults.close_streams();
        self.app.worker().stop();
        let _ = self.task.await;
    }

    /// Waits until the server stops (it stops only through [`Running::shutdown`]).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Opens the store, runs startup recovery, binds and serves in the background.
pub async fn start(config: Config) -> Result<Running, ServerError> {
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.listen.clone(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.listen.clone(),
        source,
    })?;
    let app = app::App::boot(config)?;
    tracing::info!(%addr, boot_id = %app.worker().boot_id, "replay-server started");
    let router = api::router(Arc::clone(&app));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // Stream frames are small writes: without TCP_NODELAY, Nagle holds each
    // one until the previous is acknowledged (a delayed ACK: ~40 ms), so a
    // stream's `hello` would trail its headers.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
    });
    let task = tokio::spawn(async move {
        let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
            let _ = rx.await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "server error");
        }
    });
    Ok(Running {
        addr,
        app,
        shutdown: tx,
        task,
    })
}
