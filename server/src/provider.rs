//! The scripted agent's provider: what a real runtime keeps of a model
//! provider's session (a reference it resumes after a restart), stored per
//! session as a record. Startup recovery resumes it for every session that
//! has not ended; a reference that cannot be resumed (the
//! `provider_resume_fails` fault marks one so) fails its session with
//! [`REASON_PROVIDER_RESUME_FAILED`].

use serde::{Deserialize, Serialize};

use crate::store::{Db, RecordKind, StoreResult};
use crate::util::{now_rfc3339, random_id};

/// `session.failed {reason}` of a session whose provider did not resume.
pub const REASON_PROVIDER_RESUME_FAILED: &str = "provider_resume_failed";

/// The name of the scripted agent's provider.
pub const SCRIPTED: &str = "scripted";

/// A session's provider reference, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRef {
    /// The session.
    pub session_id: String,
    /// Which provider.
    pub provider: String,
    /// The provider's own id of the conversation.
    pub reference: String,
    /// `active`, `failed` (resume failed).
    pub state: String,
    /// Set by the `provider_resume_fails` fault: the next resume fails.
    #[serde(default)]
    pub resume_fails: bool,
    /// The failed resume, `{boot_id, at, reason}` (a resume that works
    /// writes nothing: a pass over many sessions costs no commits; the
    /// recovery report counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_resume: Option<serde_json::Value>,
}

/// Gives a new session its provider reference.
pub fn attach(db: &Db, session_id: &str) -> StoreResult<()> {
    let record = ProviderRef {
        session_id: session_id.to_owned(),
        provider: SCRIPTED.into(),
        // Random, not counted: one commit less per session created.
        reference: random_id("prov"),
        state: "active".into(),
        resume_fails: false,
        failed_resume: None,
    };
    db.put_record(RecordKind::Provider, session_id, &record)
}

/// Marks a session's provider so that its next resume fails; `false` when
/// the session has no provider reference.
pub fn break_resume(db: &Db, session_id: &str) -> StoreResult<bool> {
    let Some(mut record) = db.record::<ProviderRef>(RecordKind::Provider, session_id)? else {
        return Ok(false);
    };
    record.resume_fails = true;
    db.put_record(RecordKind::Provider, session_id, &record)?;
    Ok(true)
}

/// Resumes the provider of a session for `boot_id`; `Err(reason)` when it
/// cannot be resumed (the record then says so).
pub fn resume(db: &Db, mut record: ProviderRef, boot_id: &str) -> StoreResult<Result<(), String>> {
    if !record.resume_fails {
        return Ok(Ok(()));
    }
    let reason = REASON_PROVIDER_RESUME_FAILED.to_owned();
    record.state = "failed".into();
    record.failed_resume = Some(serde_json::json!({
        "boot_id": boot_id, "at": now_rfc3339(), "reason": reason,
    }));
    db.put_record(RecordKind::Provider, &record.session_id.clone(), &record)?;
    Ok(Err(reason))
}
