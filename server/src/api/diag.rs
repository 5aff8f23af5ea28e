//! Read-only diagnostics (PROTOCOL.md §4.5).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::app::App;
use crate::deliveries::DeliveryRecord;
use crate::fanout::LagPolicy;
use crate::provider::ProviderRef;
use crate::store::RecordKind;
use crate::worktrees::WorktreeRecord;

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
        "subscribers": app.log.fanout.stats.subscribers.load(Ordering::Relaxed),
        "streams": app.log.fanout.open_streams(),
        "connections": app.conns.open(),
        "connections_refused": app.conns.refused(),
        "connections_closed_idle": app.conns.closed_idle(),
        "store": {"synchronous": synchronous, "appends": app.log.append_stats(),
                   "follow": app.log.follow_stats()},
        "config": {
            "db": redact_db(&app.cfg.db),
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
            "max_stream_buffer_bytes": app.cfg.max_stream_buffer_bytes,
            "socket_send_buffer_bytes": app.cfg.socket_send_buffer_bytes,
            "subscriber_buffer_bytes": app.cfg.subscriber_buffer_bytes,
            "max_streams_per_client": app.cfg.max_streams_per_client,
            "max_connections": app.conns.max(),
            "max_connections_per_address": app.conns.per_address(),
            "header_timeout_ms": app.cfg.header_timeout_ms,
            "max_queued_turns": app.cfg.max_queued_turns,
            "max_queued_turns_total": app.cfg.max_queued_turns_total,
        },
    })))
}

/// The database as diagnostics show it: a URL's password (the userinfo
/// after its first `:`, and any `password=` parameter) becomes `***`, so
/// that whoever may read diagnostics does not get the database too.
/// Everything up to the last `@` is taken as userinfo: a password with an
/// unescaped `@` or `/` is hidden with what follows it, never shown.
pub fn redact_db(db: &str) -> String {
    let Some((scheme, rest)) = db.split_once("://") else {
        return db.to_owned();
    };
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_owned(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => rest,
    };
    format!("{scheme}://{rest}")
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

/// Most records a records diagnostic lists (the newest; `total` counts all).
pub const RECORDS_LISTED: usize = 1000;

/// The newest [`RECORDS_LISTED`] records of `kind`, their total, and how
/// many are in each `state` (as `state_of` reads it).
async fn records_of<T>(
    app: &App,
    kind: RecordKind,
    state_of: fn(&T) -> String,
) -> Result<(Vec<T>, usize, serde_json::Map<String, Value>), ApiError>
where
    T: serde::de::DeserializeOwned + Send + 'static,
{
    let mut all: Vec<T> = {
        let db = app.log.db();
        db.records(kind)?
    };
    let mut counts = serde_json::Map::new();
    for r in &all {
        let n = counts.entry(state_of(r)).or_insert(json!(0));
        *n = json!(n.as_u64().unwrap_or(0) + 1);
    }
    let total = all.len();
    all.drain(..total.saturating_sub(RECORDS_LISTED));
    Ok((all, total, counts))
}

pub(super) async fn providers(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let (providers, total, states) = records_of(&app, RecordKind::Provider, |p: &ProviderRef| {
        p.state.clone()
    })
    .await?;
    // What the last pass did to them (a resume that works writes nothing).
    let last = app.last_recovery();
    Ok(Json(json!({
        "providers": providers,
        "total": total,
        "states": states,
        "last_recovery": {
            "boot_id": last["boot_id"],
            "resumed": last["providers_resumed"],
            "sessions_failed": last["sessions_failed"],
        },
    })))
}

pub(super) async fn worktrees(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let (worktrees, total, states) =
        records_of(&app, RecordKind::Worktree, |w: &WorktreeRecord| {
            match (w.active, &w.claimed_by) {
                (false, _) => "removed",
                (true, Some(_)) => "claimed",
                (true, None) => "free",
            }
            .to_owned()
        })
        .await?;
    Ok(Json(
        json!({"worktrees": worktrees, "total": total, "states": states}),
    ))
}

pub(super) async fn team_operations(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let (deliveries, total, states) =
        records_of(&app, RecordKind::Delivery, |d: &DeliveryRecord| {
            d.state.clone()
        })
        .await?;
    Ok(Json(
        json!({"deliveries": deliveries, "total": total, "states": states}),
    ))
}

pub(super) async fn comms(State(app): State<Arc<App>>) -> Json<Value> {
    let s = &app.log.fanout.stats;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    Json(json!({
        "subscribers": get(&s.subscribers),
        "streams": app.log.fanout.open_streams(),
        "streams_open": get(&app.streams_open),
        "refused": get(&s.refused),
        "evicted_for_fairness": get(&s.evicted_for_fairness),
        "stream_buffer_queued_full": get(&s.budget_full),
        "subscriptions_total": get(&s.subscriptions_total),
        "lagged": get(&s.lagged_disconnects),
        "skipped_durable": get(&s.skipped_durable),
        "dropped": get(&s.dropped_transient),
        "frames_sent": get(&s.frames_sent),
        "bytes_sent": get(&s.bytes_sent),
        "lag_policy": lag_policy_name(app.log.fanout.policy()),
        "subscriber_buffer": app.cfg.subscriber_buffer,
        "stream_buffer_bytes": app.streams.held_bytes(),
        "stream_buffer_peak_bytes": app.streams.peak_bytes(),
        "stream_buffer_max_bytes": app.streams.max_bytes(),
        "stream_buffer_starved": app.streams.starved(),
        "stream_buffer_quotas": app
            .streams
            .quotas()
            .iter()
            .map(|(name, quota)| {
                let figures = json!({
                    "bytes": quota.held_bytes(),
                    "peak_bytes": quota.peak_bytes(),
                    "max_bytes": quota.max_bytes(),
                });
                ((*name).to_owned(), figures)
            })
            .collect::<serde_json::Map<_, _>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::redact_db;

    #[test]
    fn a_database_url_is_shown_without_its_password() {
        for (db, shown) in [
            ("./replay.sqlite", "./replay.sqlite"),
            (":memory:", ":memory:"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://u:pw@h:5432/db", "postgres://u:***@h:5432/db"),
            ("postgresql://u:p@w:d@h/db", "postgresql://u:***@h/db"),
            ("postgres://u:a/b@h/db", "postgres://u:***@h/db"),
            (
                "postgres://h/db?user=u&Password=pw&sslmode=require",
                "postgres://h/db?user=u&Password=***&sslmode=require",
            ),
        ] {
            assert_eq!(redact_db(db), shown, "{db}");
        }
    }
}
