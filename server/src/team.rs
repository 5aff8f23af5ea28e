//! Team deliveries: a message to a team member (a session) is written to
//! the team's log (`team.message`) and delivered as a user message of the
//! member's session, starting a turn there (`delivery.delivered`). A member
//! that is busy (a turn of its own not ended) gets it later: the delivery
//! is deferred (`delivery.deferred`) and retried when one of its turns ends
//! and at startup recovery. A member that does not exist or has ended
//! cannot take it (`delivery.failed {reason}`). Each delivery is a record
//! (`/v1/diagnostics/team-operations`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use replay_core::protocol::{Delivery, Envelope, Event, Scope, TeamMessage};
use serde::{Deserialize, Serialize};

use crate::agent;
use crate::app::App;
use crate::store::{Db, RecordKind, StoreResult};
use crate::util::now_rfc3339;
use crate::worker::TurnSlot;

/// Where a delivery is.
pub mod state {
    /// Waiting for its recipient to be ready.
    pub const DEFERRED: &str = "deferred";
    /// Committed to the recipient's session.
    pub const DELIVERED: &str = "delivered";
    /// The recipient cannot take it.
    pub const FAILED: &str = "failed";
}

/// `delivery.deferred {reason}`: the member has a turn not ended.
pub const REASON_BUSY: &str = "busy";
/// `delivery.failed {reason}`: no session of that id.
pub const REASON_NO_MEMBER: &str = "no_such_member";
/// `delivery.failed {reason}`: the member's session was closed or failed.
pub const REASON_MEMBER_ENDED: &str = "member_ended";

/// One delivery, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// The delivery (also the `message_id` of the message it commits).
    pub delivery_id: String,
    /// The team whose log tells it.
    pub team_id: String,
    /// The sender.
    pub from: String,
    /// The recipient session.
    pub to: String,
    /// The text.
    pub text: String,
    /// See [`state`].
    pub state: String,
    /// Why deferred or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The turn it started in the recipient's session, once delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Delivery attempts made.
    pub attempts: u64,
    /// When it was sent.
    pub created_at: String,
    /// When its state last changed.
    pub updated_at: String,
}

/// Sends a team message from `from` to the member session `to`: delivered
/// now, deferred, or failed (the record says which).
pub fn send(
    app: &Arc<App>,
    team_id: &str,
    from: &str,
    to: &str,
    text: &str,
) -> StoreResult<DeliveryRecord> {
    let (record, start) = app.log.with_db(|db| {
        let n = db.next_number("delivery")?;
        let now = now_rfc3339();
        let record = DeliveryRecord {
            delivery_id: format!("dlv_{n}"),
            team_id: team_id.to_owned(),
            from: from.to_owned(),
            to: to.to_owned(),
            text: text.to_owned(),
            state: String::new(),
            reason: None,
            turn_id: None,
            attempts: 0,
            created_at: now.clone(),
            updated_at: now,
        };
        let mut envs = vec![db.append(
            Scope::Team,
            team_id,
            &Event::TeamMessage(TeamMessage {
                from: from.to_owned(),
                to: to.to_owned(),
                text: text.to_owned(),
            }),
        )?];
        let out = attempt(app, db, record, &mut envs)?;
        Ok((out, envs))
    })?;
    start_turn(app, &record, start);
    Ok(record)
}

/// Retries the deferred deliveries to `session_id` (one of its turns
/// ended): the first one the member takes is delivered, the others wait
/// for the turn it starts.
pub fn deliver_deferred(app: &Arc<App>, session_id: &str) -> StoreResult<()> {
    // Most turns end with nothing deferred anywhere: no query then. Other
    // nodes of a cluster defer too, so a shared store always looks.
    if !app.log.db().shared() && !app.deliveries_deferred.load(Ordering::Relaxed) {
        return Ok(());
    }
    let deferred: Vec<DeliveryRecord> = app
        .log
        .db()
        .records::<DeliveryRecord>(RecordKind::Delivery)?
        .into_iter()
        .filter(|d| d.state == state::DEFERRED)
        .collect();
    if deferred.is_empty() {
        app.deliveries_deferred.store(false, Ordering::Relaxed);
    }
    for d in deferred.into_iter().filter(|d| d.to == session_id) {
        if retry_one(app, d)? {
            break;
        }
    }
    Ok(())
}

/// Retries the deferred deliveries `ids` (startup recovery found their
/// recipients able to take them).
pub fn retry(app: &Arc<App>, ids: &[String]) -> StoreResult<()> {
    for id in ids {
        let record = app
            .log
            .db()
            .record::<DeliveryRecord>(RecordKind::Delivery, id)?;
        if let Some(record) = record.filter(|d| d.state == state::DEFERRED) {
            retry_one(app, record)?;
        }
    }
    Ok(())
}

/// One more attempt at a deferred delivery; true when delivered.
fn retry_one(app: &Arc<App>, record: DeliveryRecord) -> StoreResult<bool> {
    let (record, start) = app.log.with_db(|db| {
        let mut envs = Vec::new();
        let out = attempt(app, db, record, &mut envs)?;
        Ok((out, envs))
    })?;
    let delivered = record.state == state::DELIVERED;
    start_turn(app, &record, start);
    Ok(delivered)
}

/// What startup recovery did to the deferred deliveries.
pub struct Recovered {
    /// Deliveries to retry once the worker runs (their recipient exists
    /// and has not ended).
    pub retry: Vec<String>,
    /// `{delivery_id, to, reason}` of each delivery failed.
    pub failed: Vec<serde_json::Value>,
}

/// Startup recovery's part: a deferred delivery whose recipient is gone or
/// has ended is failed; the others are retried once the worker runs.
pub fn recover(db: &mut Db, envs: &mut Vec<Envelope>) -> StoreResult<Recovered> {
    let mut out = Recovered {
        retry: Vec::new(),
        failed: Vec::new(),
    };
    for d in db.records::<DeliveryRecord>(RecordKind::Delivery)? {
        if d.state != state::DEFERRED {
            continue;
        }
        match unable(db, &d.to)? {
            Some(reason) => {
                out.failed.push(serde_json::json!({
                    "delivery_id": d.delivery_id, "to": d.to, "reason": reason,
                }));
                fail(db, d, reason, envs)?;
            }
            None => out.retry.push(d.delivery_id),
        }
    }
    Ok(out)
}

/// Why `to` cannot take a delivery at all, if it cannot.
fn unable(db: &Db, to: &str) -> StoreResult<Option<&'static str>> {
    if !db.session_exists(to)? {
        return Ok(Some(REASON_NO_MEMBER));
    }
    if db.session_ended(to)? {
        return Ok(Some(REASON_MEMBER_ENDED));
    }
    Ok(None)
}

/// A turn to start for a delivery just committed.
type Start = Option<(TurnSlot, String)>;

/// One attempt, under the writer lock: delivered (the message committed to
/// the recipient's session, its turn queued), deferred, or failed.
fn attempt(
    app: &Arc<App>,
    db: &mut Db,
    mut d: DeliveryRecord,
    envs: &mut Vec<Envelope>,
) -> StoreResult<(DeliveryRecord, Start)> {
    d.attempts += 1;
    if let Some(reason) = unable(db, &d.to)? {
        let d = fail(db, d, reason, envs)?;
        return Ok((d, None));
    }
    let slot = if db.session_busy(&d.to)? {
        None
    } else {
        app.worker()
            .reserve_turn(
                &d.to,
                app.cfg.max_queued_turns,
                app.cfg.max_queued_turns_total,
            )
            .ok()
    };
    let Some(mut slot) = slot else {
        if d.state != state::DEFERRED {
            d.state = state::DEFERRED.into();
            d.reason = Some(REASON_BUSY.into());
            d.updated_at = now_rfc3339();
            envs.push(db.append(
                Scope::Team,
                &d.team_id,
                &Event::DeliveryDeferred(Delivery {
                    delivery_id: d.delivery_id.clone(),
                    to: d.to.clone(),
                    reason: Some(REASON_BUSY.into()),
                }),
            )?);
            app.deliveries_deferred.store(true, Ordering::Relaxed);
        }
        db.put_record(RecordKind::Delivery, &d.delivery_id, &d)?;
        return Ok((d, None));
    };
    let n = db.next_number("turn")?;
    let turn_id = format!("turn_{n}");
    envs.push(db.accept_message(&d.to, &turn_id, &d.delivery_id, &d.text)?);
    slot.enqueue(&turn_id);
    envs.push(db.append(
        Scope::Team,
        &d.team_id,
        &Event::DeliveryDelivered(Delivery {
            delivery_id: d.delivery_id.clone(),
            to: d.to.clone(),
            reason: None,
        }),
    )?);
    d.state = state::DELIVERED.into();
    d.reason = None;
    d.turn_id = Some(turn_id.clone());
    d.updated_at = now_rfc3339();
    db.put_record(RecordKind::Delivery, &d.delivery_id, &d)?;
    Ok((d, Some((slot, turn_id))))
}

fn fail(
    db: &mut Db,
    mut d: DeliveryRecord,
    reason: &str,
    envs: &mut Vec<Envelope>,
) -> StoreResult<DeliveryRecord> {
    envs.push(db.append(
        Scope::Team,
        &d.team_id,
        &Event::DeliveryFailed(Delivery {
            delivery_id: d.delivery_id.clone(),
            to: d.to.clone(),
            reason: Some(reason.into()),
        }),
    )?);
    d.state = state::FAILED.into();
    d.reason = Some(reason.into());
    d.updated_at = now_rfc3339();
    db.put_record(RecordKind::Delivery, &d.delivery_id, &d)?;
    Ok(d)
}

fn start_turn(app: &Arc<App>, d: &DeliveryRecord, start: Start) {
    if let Some((slot, turn_id)) = start {
        agent::spawn_turn(app, slot, &d.to, &turn_id, &d.delivery_id, &d.text);
    }
}
