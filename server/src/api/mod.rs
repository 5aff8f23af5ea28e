//! The HTTP surface (PROTOCOL.md §4): routing and the layers every request
//! passes (see `guard`); errors and parameters in `error` and `params`.

mod admin;
mod budget;
mod diag;
mod error;
mod guard;
mod hostile;
mod multiplex;
mod params;
mod read;
mod static_files;
mod stream;
mod write;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use replay_core::protocol::Scope;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::app::App;
use crate::head::HostAllowList;

pub use error::{ApiError, MAX_BODY};

/// Builds the whole router: `/v1` API plus static files.
pub fn router(app: Arc<App>, hosts: HostAllowList) -> Router {
    let mut v1 = Router::new()
        .route("/sessions", post(write::create_session))
        .route("/sessions/{id}/messages", post(write::post_message))
        .route("/sessions/{id}/questions/{qid}/answer", post(write::answer))
        .route("/sessions/{id}/cancel", post(write::cancel))
        .route("/sessions/{id}/replay", get(read::replay))
        .route("/sessions/{id}/transcript", get(read::transcript))
        .route(
            "/sessions/{id}/events",
            stream::scoped_events(Scope::Session),
        )
        .route("/teams/{id}/events", stream::scoped_events(Scope::Team))
        .route(
            "/processes/{id}/events",
            stream::scoped_events(Scope::Process),
        )
        .route("/processes/{id}/log", get(read::process_log))
        .route(
            "/worktrees/{id}/events",
            stream::scoped_events(Scope::Worktree),
        )
        .route("/system/events", get(stream::system_events))
        .route("/events", get(stream::global_events))
        .route("/diagnostics", get(diag::overview))
        .route("/diagnostics/recovery", get(diag::recovery))
        .route("/diagnostics/processes", get(diag::processes))
        .route("/diagnostics/comms", get(diag::comms))
        .route("/diagnostics/providers", get(diag::providers))
        .route("/diagnostics/worktrees", get(diag::worktrees))
        .route("/diagnostics/team-operations", get(diag::team_operations));
    if !app.cfg.no_multiplex {
        // Without it `/v1/stream` is the fallback's 404, as on a runtime
        // that has only the scoped streams.
        v1 = v1.route("/stream", get(multiplex::multiplexed));
    }
    if app.faults.enabled() {
        v1 = v1
            .route(
                "/admin/faults",
                post(admin::add_fault).get(admin::list_faults),
            )
            .route("/admin/events", post(admin::append_event))
            .route("/admin/teams/{id}/messages", post(admin::team_message))
            .route("/admin/worktrees", post(admin::worktree_op));
    }
    let v1 = v1
        .fallback(|uri: axum::http::Uri| async move {
            // Nested: the path without its `/v1`. A client whose base URL
            // ends in `/v1` asks for `/v1/v1/…` (a newcomer's mistake).
            let twice = uri.path() == "/v1" || uri.path().starts_with("/v1/");
            let message = if twice {
                "no such endpoint: the path has /v1 twice; give the client the server's \
                 root as its baseUrl (e.g. http://127.0.0.1:8787), it adds /v1 itself"
            } else {
                "no such endpoint"
            };
            ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed here",
            )
        })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            guard::faults_layer,
        ))
        .layer(middleware::from_fn(guard::json_writes_layer))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            guard::auth_layer,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(CompressionLayer::new().compress_when(compressible()));
    let mut root = Router::new().nest("/v1", v1);
    if let Some(dir) = &app.cfg.static_dir {
        root = root.fallback_service(static_files::router(dir, app.cfg.static_max_age));
    }
    if let Some(cors) = cors(&app.cfg.allow_origins, app.cfg.allow_credentials) {
        root = root.layer(cors);
    }
    // Outermost: a foreign Host gets nothing, not even CORS headers.
    root.layer(middleware::from_fn_with_state(
        Arc::new(hosts),
        guard::host_layer,
    ))
    .with_state(app)
}

/// Which answers are gzipped when asked: JSON of [`COMPRESS_MIN`] bytes or
/// more, never a stream (tower-http's default, but for the size).
fn compressible() -> impl Predicate {
    SizeAbove::new(COMPRESS_MIN)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE)
}

/// Below this, an answer goes as it is: each gzipped answer sets up a
/// deflate stream (about 256 KiB of zeroed memory, mapped and unmapped
/// again), which cost a node more CPU than the bytes saved (an append's
/// answer is ~400 bytes; profiled under the cluster bench).
const COMPRESS_MIN: u16 = 1024;

/// The CORS layer of `--allow-origin` (`None`: none given): every route's,
/// and the `503 too_many_connections` of a connection with no slot's.
/// With `credentials` (`--allow-credentials`, explicit origins only:
/// `Config::check_cors`) pages of those origins may send cookies.
pub(crate) fn cors(origins: &[String], credentials: bool) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    let layer = CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::CACHE_CONTROL,
            header::HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([header::CONTENT_TYPE, header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
        .allow_credentials(credentials);
    Some(layer)
}
