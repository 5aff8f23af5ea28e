//! Worktrees: records of the working copies the runtime hands to sessions
//! (`worktree.created`, `.claimed`, `.released`, `.removed` in each
//! worktree's log). A worktree's identity is its normalised path; a session
//! claims at most one worktree and a worktree has at most one claimant.
//! [`apply`] keeps those rules; `force` writes a record without them (what
//! an older runtime or a crash may leave, for tests). Startup recovery runs
//! [`normalize`], a check in the manner of a filesystem check: paths
//! normalised, duplicate identities merged (claims rewritten onto the one
//! kept), impossible claims released, one active claim per session.

use replay_core::protocol::{Envelope, Event, Scope, Worktree};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::store::{Db, RecordKind, StoreError, StoreResult};
use crate::util::now_rfc3339;

/// A worktree, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeRecord {
    /// The worktree (its log's id).
    pub worktree_id: String,
    /// Where it is: its identity once normalised ([`normalize_path`]).
    pub path: String,
    /// The session that claims it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// False once removed.
    pub active: bool,
    /// When it was created.
    pub created_at: String,
}

/// An operation on worktrees.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A new worktree at `path`.
    Create {
        /// Where.
        path: String,
        /// Skip the duplicate-identity check.
        #[serde(default)]
        force: bool,
    },
    /// `session_id` claims the worktree.
    Claim {
        /// The worktree.
        worktree_id: String,
        /// The claimant.
        session_id: String,
        /// Skip every check but the worktree's existence.
        #[serde(default)]
        force: bool,
    },
    /// Its claim ends.
    Release {
        /// The worktree.
        worktree_id: String,
    },
    /// Released if claimed, then removed.
    Remove {
        /// The worktree.
        worktree_id: String,
    },
}

/// Why an operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// No such worktree (or it was removed).
    #[error("no active worktree {0}")]
    NotFound(String),
    /// No such session, or it has ended.
    #[error("session {0} does not exist or has ended")]
    NoSession(String),
    /// The path is already an active worktree's.
    #[error("{path} is already worktree {worktree_id}")]
    Duplicate {
        /// The normalised path.
        path: String,
        /// Its worktree.
        worktree_id: String,
    },
    /// Claimed by another session, or the session claims another worktree.
    #[error("{0}")]
    Conflict(String),
    /// The path is empty or longer than [`PATH_MAX`].
    #[error("path must be 1..={PATH_MAX} bytes")]
    InvalidPath,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Longest worktree path accepted, in bytes.
pub const PATH_MAX: usize = 1024;

/// A path as its identity: trimmed, `//` and `/./` collapsed, no trailing
/// `/` (but the root's).
pub fn normalize_path(path: &str) -> String {
    let path = path.trim();
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else {
        joined
    }
}

fn event(db: &mut Db, ev: Event, id: &str, envs: &mut Vec<Envelope>) -> StoreResult<()> {
    envs.push(db.append(Scope::Worktree, id, &ev)?);
    Ok(())
}

fn wt(worktree_id: &str, session_id: Option<&str>) -> Worktree {
    Worktree {
        worktree_id: worktree_id.to_owned(),
        session_id: session_id.map(str::to_owned),
    }
}

/// Runs `op` under the writer lock; returns the record after it.
pub fn apply(
    db: &mut Db,
    op: Op,
    envs: &mut Vec<Envelope>,
) -> Result<WorktreeRecord, WorktreeError> {
    let all: Vec<WorktreeRecord> = db.records(RecordKind::Worktree)?;
    let find = |id: &str| {
        all.iter()
            .find(|w| w.worktree_id == id && w.active)
            .cloned()
            .ok_or_else(|| WorktreeError::NotFound(id.to_owned()))
    };
    let record = match op {
        Op::Create { path, force } => {
            if path.trim().is_empty() || path.len() > PATH_MAX {
                return Err(WorktreeError::InvalidPath);
            }
            // Stored as given: recovery normalises what older runtimes left.
            let identity = normalize_path(&path);
            let same = all
                .iter()
                .find(|w| w.active && normalize_path(&w.path) == identity);
            if let (Some(w), false) = (same, force) {
                return Err(WorktreeError::Duplicate {
                    path: identity,
                    worktree_id: w.worktree_id.clone(),
                });
            }
            let n = db.next_number("worktree")?;
            let record = WorktreeRecord {
                worktree_id: format!("wt_{n}"),
                path: if force { path } else { identity },
                claimed_by: None,
                active: true,
                created_at: now_rfc3339(),
            };
            let id = record.worktree_id.clone();
            event(db, Event::WorktreeCreated(wt(&id, None)), &id, envs)?;
            record
        }
        Op::Claim {
            worktree_id,
            session_id,
            force,
        } => {
            let mut record = find(&worktree_id)?;
            if !force {
                if !db.session_exists(&session_id)? || db.session_ended(&session_id)? {
                    return Err(WorktreeError::NoSession(session_id));
                }
                if let Some(other) = record.claimed_by.as_ref().filter(|s| **s != session_id) {
                    return Err(WorktreeError::Conflict(format!(
                        "{worktree_id} is claimed by {other}"
                    )));
                }
                let held = all.iter().find(|w| {
                    w.active
                        && w.worktree_id != worktree_id
                        && w.claimed_by.as_deref() == Some(&session_id)
                });
                if let Some(w) = held {
                    return Err(WorktreeError::Conflict(format!(
                        "{session_id} already claims {}",
                        w.worktree_id
                    )));
                }
            }
            record.claimed_by = Some(session_id.clone());
            let ev = Event::WorktreeClaimed(wt(&worktree_id, Some(&session_id)));
            event(db, ev, &worktree_id, envs)?;
            record
        }
        Op::Release { worktree_id } => {
            let mut record = find(&worktree_id)?;
            if let Some(s) = record.claimed_by.take() {
                let ev = Event::WorktreeReleased(wt(&worktree_id, Some(&s)));
                event(db, ev, &worktree_id, envs)?;
            }
            record
        }
        Op::Remove { worktree_id } => {
            let mut record = find(&worktree_id)?;
            if let Some(s) = record.claimed_by.take() {
                let ev = Event::WorktreeReleased(wt(&worktree_id, Some(&s)));
                event(db, ev, &worktree_id, envs)?;
            }
            record.active = false;
            event(
                db,
                Event::WorktreeRemoved(wt(&worktree_id, None)),
                &worktree_id,
                envs,
            )?;
            record
        }
    };
    db.put_record(RecordKind::Worktree, &record.worktree_id, &record)?;
    Ok(record)
}

/// Startup recovery's check of the worktree records; returns what it
/// changed: `{normalized, merged, claims_rewritten, claims_released}`.
pub fn normalize(db: &mut Db, envs: &mut Vec<Envelope>) -> StoreResult<serde_json::Value> {
    let mut all: Vec<WorktreeRecord> = db.records(RecordKind::Worktree)?;
    let mut changed = vec![false; all.len()];
    let (mut normalized, mut merged, mut rewritten, mut released) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());

    // 1. Paths as identities.
    for (i, w) in all.iter_mut().enumerate() {
        let path = normalize_path(&w.path);
        if path != w.path {
            normalized.push(json!({"worktree_id": w.worktree_id, "from": w.path, "to": path}));
            w.path = path;
            changed[i] = true;
        }
    }

    // 2. Duplicate identities: the oldest active record is kept, the others
    // removed; a claim of one removed moves to the kept one if it is free.
    for i in 0..all.len() {
        if !all[i].active {
            continue;
        }
        let Some(keep) = (0..i).find(|&k| all[k].active && all[k].path == all[i].path) else {
            continue;
        };
        let (dup, into) = (all[i].worktree_id.clone(), all[keep].worktree_id.clone());
        if let Some(s) = all[i].claimed_by.take() {
            event(db, Event::WorktreeReleased(wt(&dup, Some(&s))), &dup, envs)?;
            if all[keep].claimed_by.is_none() {
                event(db, Event::WorktreeClaimed(wt(&into, Some(&s))), &into, envs)?;
                all[keep].claimed_by = Some(s.clone());
                changed[keep] = true;
                rewritten.push(json!({"session_id": s, "from": dup, "to": into}));
            } else {
                released.push(json!({"worktree_id": dup, "session_id": s,
                                     "reason": "duplicate_claimed"}));
            }
        }
        all[i].active = false;
        changed[i] = true;
        event(db, Event::WorktreeRemoved(wt(&dup, None)), &dup, envs)?;
        merged.push(json!({"worktree_id": dup, "into": into}));
    }

    // 3. Impossible claims, then 4. one active claim per session (the
    // oldest worktree's kept).
    let mut claimants: Vec<String> = Vec::new();
    for i in 0..all.len() {
        let Some(s) = all[i].claimed_by.clone() else {
            continue;
        };
        let reason = if !all[i].active {
            Some("worktree_removed")
        } else if !db.session_exists(&s)? {
            Some("no_such_session")
        } else if db.session_ended(&s)? {
            Some("session_ended")
        } else if claimants.contains(&s) {
            Some("second_claim")
        } else {
            None
        };
        let Some(reason) = reason else {
            claimants.push(s);
            continue;
        };
        let id = all[i].worktree_id.clone();
        event(db, Event::WorktreeReleased(wt(&id, Some(&s))), &id, envs)?;
        all[i].claimed_by = None;
        changed[i] = true;
        released.push(json!({"worktree_id": id, "session_id": s, "reason": reason}));
    }

    for (w, _) in all.iter().zip(&changed).filter(|(_, c)| **c) {
        db.put_record(RecordKind::Worktree, &w.worktree_id, w)?;
    }
    Ok(json!({
        "normalized": normalized,
        "merged": merged,
        "claims_rewritten": rewritten,
        "claims_released": released,
    }))
}

#[cfg(test)]
mod tests {
    use super::normalize_path;

    #[test]
    fn a_path_is_its_identity_once_normalised() {
        for (raw, id) in [
            ("/w/a", "/w/a"),
            ("/w/a/", "/w/a"),
            (" /w//a/./ ", "/w/a"),
            ("/", "/"),
            ("rel/./x//", "rel/x"),
        ] {
            assert_eq!(normalize_path(raw), id, "{raw:?}");
        }
    }
}
