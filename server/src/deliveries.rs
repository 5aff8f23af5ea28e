//! Team deliveries as records: what a delivery is (`DeliveryRecord`, kept
//! per delivery: `/v1/diagnostics/team-operations`), the events that move it
//! (`delivery.deferred|delivered|failed` in its team's log), and startup
//! recovery's part. Sending and delivering, which need the live worker, are
//! in `team`.

use replay_core::protocol::{Delivery, Envelope, Event, Scope};
use serde::{Deserialize, Serialize};

use crate::store::{Db, RecordKind, StoreResult};
use crate::util::now_rfc3339;

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
pub fn unable(db: &Db, to: &str) -> StoreResult<Option<&'static str>> {
    if !db.session_exists(to)? {
        return Ok(Some(REASON_NO_MEMBER));
    }
    if db.session_ended(to)? {
        return Ok(Some(REASON_MEMBER_ENDED));
    }
    Ok(None)
}

/// Moves a delivery to `to` (a [`state`]) for `reason`: the team's log gets
/// the event `event` makes of it, and the record says so (the caller
/// stores it).
pub fn mark(
    db: &mut Db,
    d: &mut DeliveryRecord,
    to: &str,
    reason: Option<&str>,
    event: fn(Delivery) -> Event,
    envs: &mut Vec<Envelope>,
) -> StoreResult<()> {
    envs.push(db.append(
        Scope::Team,
        &d.team_id,
        &event(Delivery {
            delivery_id: d.delivery_id.clone(),
            to: d.to.clone(),
            reason: reason.map(Into::into),
        }),
    )?);
    d.state = to.into();
    d.reason = reason.map(Into::into);
    d.updated_at = now_rfc3339();
    Ok(())
}

/// Fails a delivery: `delivery.failed {reason}`, and the record says so.
pub fn fail(
    db: &mut Db,
    mut d: DeliveryRecord,
    reason: &str,
    envs: &mut Vec<Envelope>,
) -> StoreResult<DeliveryRecord> {
    mark(
        db,
        &mut d,
        state::FAILED,
        Some(reason),
        Event::DeliveryFailed,
        envs,
    )?;
    db.put_record(RecordKind::Delivery, &d.delivery_id, &d)?;
    Ok(d)
}
