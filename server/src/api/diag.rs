//! Read-only diagnostics (PROTOCOL.md §4.5).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::app::App;
use crate::hub::LagPolicy;
use crate::store::Reads;

pub(super) async fn overview(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let worker = app.worker();
    let (sessions, events, boots) = app
        .log
        .read(|s| {
            let (sessions, events) = s.counts()?;
            Ok((sessions, events, s.boot_count()?))
        })
        .await?;
    let synchronous = app.log.db().synchronous()?;
    let global = app.log.global_info();
    Ok(Json(json!({
        "boot_id": worker.boot_id,
        "tail": app.log.tail_status().map_or_else(|| json!({"broker": "none"}), |t| json!(t)),
        "epoch": global.epoch,
        "head": global.head,
        "started_at": app.started_at,
        "boots": boots,
        "sessions": sessions,
        "events": events,
        "running_turns": worker.running_turns(),
        "subscribers": app.log.hub.stats.subscribers.load(Ordering::Relaxed),
        "streams": app.log.hub.open_streams(),
        "connections": app.conns.open(),
        "store": {"synchronous": synchronous},
        "config": {
            "db": app.cfg.db,
            "synchronous": app.cfg.synchronous.as_str(),
            "heartbeat_ms": app.cfg.heartbeat_ms,
            "delta_ms": app.cfg.delta_ms,
            "seed": app.cfg.seed,
            "subscriber_buffer": app.cfg.subscriber_buffer,
            "lag_policy": lag_policy_name(app.cfg.lag_policy),
            "faults": app.cfg.faults,
            "auth": app.cfg.token.is_some(),
            "max_streams": app.cfg.max_streams,
            "max_streams_per_scope": app.cfg.max_streams_per_scope,
            "write_timeout_ms": app.cfg.write_timeout_ms,
            "transcript_max_events": app.cfg.transcript_max_events,
            "transcript_max_bytes": app.cfg.transcript_max_bytes,
            "page_max_bytes": app.cfg.page_max_bytes,
            "max_response_bytes": app.cfg.max_response_bytes,
            "subscriber_buffer_bytes": app.cfg.subscriber_buffer_bytes,
            "max_streams_per_client": app.cfg.max_streams_per_client,
            "max_connections": app.conns.max(),
            "header_timeout_ms": app.cfg.header_timeout_ms,
            "max_queued_turns": app.cfg.max_queued_turns,
            "max_queued_turns_total": app.cfg.max_queued_turns_total,
        },
    })))
}

/// The name of a lag policy as the command line spells it.
pub fn lag_policy_name(p: LagPolicy) -> &'static str {
    match p {
        LagPolicy::Disconnect => "disconnect",
        LagPolicy::Skip => "skip",
    }
}

pub(super) async fn recovery(State(app): State<Arc<App>>) -> Json<Value> {
    Json(app.last_recovery())
}

pub(super) async fn processes(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let processes = app.log.read(|s| s.processes()).await?;
    Ok(Json(json!({ "processes": processes })))
}

pub(super) async fn comms(State(app): State<Arc<App>>) -> Json<Value> {
    let s = &app.log.hub.stats;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    Json(json!({
        "subscribers": get(&s.subscribers),
        "streams": app.log.hub.open_streams(),
        "streams_open": get(&app.streams_open),
        "refused": get(&s.refused),
        "subscriptions_total": get(&s.subscriptions_total),
        "lagged": get(&s.lagged_disconnects),
        "skipped_durable": get(&s.skipped_durable),
        "dropped": get(&s.dropped_transient),
        "frames_sent": get(&s.frames_sent),
        "bytes_sent": get(&s.bytes_sent),
        "lag_policy": lag_policy_name(app.log.hub.policy()),
        "subscriber_buffer": app.cfg.subscriber_buffer,
    }))
}
