//! Team messages: a message to a team member (a session) is written to
//! the team's log (`team.message`) and delivered as a user message of the
//! member's session, starting a turn there (`delivery.delivered`). A member
//! that is busy (a turn of its own not ended) gets it later: the delivery
//! is deferred (`delivery.deferred`) and retried when one of its turns ends
//! and at startup recovery. A member that does not exist or has ended
//! cannot take it (`delivery.failed {reason}`). Each delivery is a record
//! (`deliveries`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use replay_core::protocol::{Envelope, Event, Scope, TeamMessage};

use crate::agent;
use crate::app::App;
use crate::deliveries::{fail, mark, state, unable, DeliveryRecord, REASON_BUSY};
use crate::store::{Db, RecordKind, StoreResult};
use crate::util::now_rfc3339;
use crate::worker::TurnSlot;

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
    // Most turns end with nothing deferred anywhere: no query then.
    if !may_have_deferred(app) {
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

/// False when no delivery can be deferred: none was found at the last
/// look and none was deferred since (one node's store; other nodes of a
/// cluster defer too, so a shared store is always looked at).
pub fn may_have_deferred(app: &App) -> bool {
    app.cluster.is_some() || app.deliveries_deferred.load(Ordering::Relaxed)
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
            let deferred = Event::DeliveryDeferred;
            mark(
                db,
                &mut d,
                state::DEFERRED,
                Some(REASON_BUSY),
                deferred,
                envs,
            )?;
            app.deliveries_deferred.store(true, Ordering::Relaxed);
        }
        db.put_record(RecordKind::Delivery, &d.delivery_id, &d)?;
        return Ok((d, None));
    };
    let n = db.next_number("turn")?;
    let turn_id = format!("turn_{n}");
    envs.push(db.accept_message(&d.to, &turn_id, &d.delivery_id, &d.text)?);
    slot.enqueue(&turn_id);
    mark(
        db,
        &mut d,
        state::DELIVERED,
        None,
        Event::DeliveryDelivered,
        envs,
    )?;
    d.turn_id = Some(turn_id.clone());
    db.put_record(RecordKind::Delivery, &d.delivery_id, &d)?;
    Ok((d, Some((slot, turn_id))))
}

fn start_turn(app: &Arc<App>, d: &DeliveryRecord, start: Start) {
    if let Some((slot, turn_id)) = start {
        agent::spawn_turn(app, slot, &d.to, &turn_id, &d.delivery_id, &d.text);
    }
}
