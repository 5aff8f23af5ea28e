//! The `sub` query parameters of the multiplexed stream (PROTOCOL.md §4.6):
//! `sub=<scope>:<scope_id>:<after_seq>`, at most [`MAX_SUBS`], no scope twice.
//! A malformed set is refused whole; a bad cursor is one sub's own problem.

use std::collections::HashSet;

use axum::http::StatusCode;
use replay_core::protocol::Scope;

use crate::api::params::parse_cursor;
use crate::api::ApiError;
use crate::recovery::SYSTEM_ID;

/// Most subs one stream carries (§4.6).
pub const MAX_SUBS: usize = 64;
/// Longest scope id (§4.6: `[A-Za-z0-9_-]{1,64}`).
const MAX_ID: usize = 64;

/// Where one sub starts.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// Empty `after_seq`: at the head, live only.
    Live,
    /// After this seq.
    After(u64),
    /// Not a cursor: answered in-band with this error (`invalid_cursor`).
    Invalid(ApiErrorParts),
}

/// An error's code and text, kept for an in-band `subscription.error`.
#[derive(Debug, PartialEq, Eq)]
pub struct ApiErrorParts {
    /// The stable code.
    pub error: String,
    /// The human text.
    pub message: String,
}

/// One parsed `sub`.
#[derive(Debug, PartialEq, Eq)]
pub struct Sub {
    /// The scope.
    pub scope: Scope,
    /// The scope id (`system`'s empty id is [`SYSTEM_ID`]).
    pub id: String,
    /// Where it starts.
    pub start: Start,
}

fn invalid(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_subscription", message)
}

fn scope_named(name: &str) -> Option<Scope> {
    Some(match name {
        "session" => Scope::Session,
        "team" => Scope::Team,
        "process" => Scope::Process,
        "worktree" => Scope::Worktree,
        "system" => Scope::System,
        _ => return None,
    })
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn parse_one(raw: &str) -> Result<Sub, ApiError> {
    let malformed = || invalid(format!("sub {raw:?} is not <scope>:<scope_id>:<after_seq>"));
    let mut parts = raw.split(':');
    let (Some(name), Some(id), Some(cursor), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let scope = scope_named(name).ok_or_else(malformed)?;
    // The system log has one id; `system::0` names it without repeating it.
    let id = match (scope, id) {
        (Scope::System, "") => SYSTEM_ID,
        (_, id) if valid_id(id) => id,
        _ => return Err(malformed()),
    };
    let start = match cursor {
        "" => Start::Live,
        c => match parse_cursor(c) {
            Ok(n) => Start::After(n),
            Err(e) => {
                let body = e.into_body();
                Start::Invalid(ApiErrorParts {
                    error: body.error,
                    message: body.message,
                })
            }
        },
    };
    Ok(Sub {
        scope,
        id: id.to_owned(),
        start,
    })
}

/// Parses the decoded query pairs: every `sub`, in order; other keys are
/// ignored. No sub, more than [`MAX_SUBS`], a malformed one or the same scope
/// twice is `400 invalid_subscription`.
pub fn parse(pairs: &[(String, String)]) -> Result<Vec<Sub>, ApiError> {
    let raw: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "sub")
        .map(|(_, v)| v.as_str())
        .collect();
    if raw.is_empty() {
        return Err(invalid("at least one sub is required".into()));
    }
    if raw.len() > MAX_SUBS {
        return Err(invalid(format!(
            "{} subs; at most {MAX_SUBS} per stream",
            raw.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut subs = Vec::with_capacity(raw.len());
    for r in raw {
        let sub = parse_one(r)?;
        if !seen.insert((sub.scope, sub.id.clone())) {
            return Err(invalid(format!(
                "{}:{} is named twice",
                sub.scope.as_str(),
                sub.id
            )));
        }
        subs.push(sub);
    }
    Ok(subs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(values: &[&str]) -> Result<Vec<Sub>, ApiError> {
        let pairs: Vec<(String, String)> = values
            .iter()
            .map(|v| ("sub".to_owned(), (*v).to_owned()))
            .collect();
        parse(&pairs)
    }

    fn code(r: Result<Vec<Sub>, ApiError>) -> String {
        r.unwrap_err().into_body().error
    }

    #[test]
    fn reads_scope_id_and_cursor() {
        let got = subs(&["session:ses_1:17", "system::0", "team:team-1:"]).unwrap();
        assert_eq!(got[0].scope, Scope::Session);
        assert_eq!(got[0].id, "ses_1");
        assert_eq!(got[0].start, Start::After(17));
        assert_eq!(
            (got[1].scope, got[1].id.as_str()),
            (Scope::System, SYSTEM_ID)
        );
        assert_eq!(got[1].start, Start::After(0));
        assert_eq!(got[2].start, Start::Live);
    }

    #[test]
    fn a_bad_cursor_belongs_to_its_sub() {
        let got = subs(&["session:a:-1", "session:b:99999999999999999999999"]).unwrap();
        assert!(matches!(&got[0].start, Start::Invalid(p) if p.error == "invalid_cursor"));
        assert_eq!(got[1].start, Start::After(u64::MAX));
    }

    #[test]
    fn malformed_sets_are_refused_whole() {
        let long = format!("session:{}:0", "a".repeat(65));
        for bad in [
            "session:a",
            "session:a:1:2",
            "global::0",
            "Session:a:0",
            "session::0",
            "session:a b:0",
            "session:a.b:0",
            long.as_str(),
        ] {
            assert_eq!(
                code(subs(&["team:t:0", bad])),
                "invalid_subscription",
                "{bad}"
            );
        }
        assert_eq!(code(subs(&[])), "invalid_subscription");
        assert!(subs(&[&format!("session:{}:0", "a".repeat(64))]).is_ok());
    }

    #[test]
    fn a_scope_named_twice_is_refused() {
        assert_eq!(
            code(subs(&["team:t:0", "team:t:5"])),
            "invalid_subscription"
        );
        assert_eq!(
            code(subs(&["system::0", "system:runtime:"])),
            "invalid_subscription"
        );
        assert!(subs(&["team:t:0", "session:t:0"]).is_ok());
    }

    #[test]
    fn at_most_64_subs() {
        let ids: Vec<String> = (0..65).map(|i| format!("session:s{i}:0")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert!(subs(&refs[..64]).is_ok());
        assert_eq!(code(subs(&refs)), "invalid_subscription");
    }
}
