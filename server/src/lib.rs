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
pub mod budget;
pub mod cluster;
pub mod config;
pub mod deliveries;
pub mod fanout;
pub mod faults;
pub mod follow;
pub mod head;
pub mod log;
pub mod net;
pub mod provider;
pub mod recovery;
pub mod refusal;
pub mod resume;
pub mod shared_log;
pub mod store;
pub mod tail;
pub mod team;
pub mod transcript;
pub mod turns;
pub mod util;
pub mod worker;
pub mod worktrees;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::Config;
pub use fanout::LagPolicy;
use std::time::Duration;

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
    /// A configuration that would expose the server to other machines
    /// without a token.
    #[error("{0}")]
    Insecure(String),
}

/// How long a shutdown waits for open responses before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

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

    /// The shared state (store, fan-out, worker), for in-process drivers such as the benchmark.
    pub fn app(&self) -> &Arc<app::App> {
        &self.app
    }

    /// The current boot id.
    pub fn boot_id(&self) -> String {
        self.app.worker().boot_id.clone()
    }

    /// Graceful shutdown: ends every stream, stops the worker, waits for
    /// open responses at most [`SHUTDOWN_GRACE`] (a peer that reads nothing
    /// cannot hold it up), then drops what is left.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(());
        self.app.faults.close_streams();
        self.app.log.fanout.close_all();
        drop(self.app.worker().stop());
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.task)
            .await
            .is_err()
        {
            tracing::warn!("responses still open after the shutdown grace; dropping them");
            self.task.abort();
        }
    }

    /// Waits until the server stops (it stops only through [`Running::shutdown`]).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Refuses to serve other machines without a token: on a non-loopback
/// address every endpoint (and `--faults`' admin API) would be open to the
/// network.
fn check_exposure(config: &Config, addr: SocketAddr) -> Result<(), ServerError> {
    config.check_token().map_err(ServerError::Insecure)?;
    config.check_cors().map_err(ServerError::Insecure)?;
    if addr.ip().is_loopback() || config.token.is_some() {
        return Ok(());
    }
    let what = if config.faults {
        "--faults on a non-loopback address"
    } else {
        "a non-loopback address"
    };
    Err(ServerError::Insecure(format!(
        "refusing to serve {what} ({addr}) without a token: give --token, \
         --token-file or REPLAY_TOKEN, or listen on 127.0.0.1"
    )))
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
    check_exposure(&config, addr)?;
    let hosts = head::HostAllowList::new(addr, &config.allow_origins, &config.allow_hosts);
    let settings = net::ConnSettings {
        write_timeout: Duration::from_millis(config.write_timeout_ms.max(1)),
        header_timeout: Duration::from_millis(config.header_timeout_ms.max(1)),
        send_buffer: config.socket_send_buffer_bytes,
    };
    let (app, recovered) = app::App::boot(config)?;
    resume::go_on(&app, recovered);
    resume::start(&app);
    turns::serve_cluster(&app);
    tracing::info!(%addr, boot_id = %app.worker().boot_id, "replay-server started");
    let refused = Arc::new(refusal::Refusals::new(
        hosts.clone(),
        api::cors(&app.cfg.allow_origins, app.cfg.allow_credentials),
    ));
    let router = api::router(Arc::clone(&app), hosts);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let served = Arc::clone(&app);
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.await;
        };
        net::serve(listener, router, &served.conns, refused, settings, shutdown).await;
    });
    Ok(Running {
        addr,
        app,
        shutdown: tx,
        task,
    })
}
