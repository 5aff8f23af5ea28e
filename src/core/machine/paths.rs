//! Every URL path and query the machine asks for (PROTOCOL.md §4).

use super::types::Target;
use crate::protocol::Scope;

/// Percent-encodes everything but RFC 3986's unreserved characters: a path
/// segment (ids are normally plain; be safe anyway) or a query value (the
/// multiplexed stream's `sub`s, `share::mux`).
pub(crate) fn segment(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// `/v1/{scope_path}` for a scoped target, `/v1` for the global list.
fn base(target: &Target) -> String {
    let mut p = String::from("/v1");
    if let Target::Scoped { scope, scope_id } = target {
        let coll = match scope {
            Scope::Session => "/sessions/",
            Scope::Team => "/teams/",
            Scope::Process => "/processes/",
            Scope::Worktree => "/worktrees/",
            Scope::System => return "/v1/system".to_owned(),
        };
        p.push_str(coll);
        segment(&mut p, scope_id);
    }
    p
}

/// The cursor query parameter: `after_id` on the global list, else `after_seq`.
fn cursor_param(target: &Target) -> &'static str {
    match target {
        Target::Global => "after_id",
        Target::Scoped { .. } => "after_seq",
    }
}

/// The live stream; `None` = live only (no cursor).
pub fn stream(target: &Target, after: Option<u64>) -> String {
    let mut p = base(target);
    p.push_str("/events");
    if let Some(c) = after {
        p.push_str(&format!("?{}={c}", cursor_param(target)));
    }
    p
}

/// A JSON page of durable events after `after`.
pub fn events(target: &Target, after: u64, limit: u32) -> String {
    format!(
        "{}/events?{}={after}&limit={limit}",
        base(target),
        cursor_param(target)
    )
}

/// A session replay page (`None` for targets without a replay endpoint).
pub fn replay(target: &Target, after_cursor: u64, limit: u32) -> Option<String> {
    target.is_session().then(|| {
        format!(
            "{}/replay?after_cursor={after_cursor}&limit={limit}",
            base(target)
        )
    })
}

/// The newest replay page, from a turn boundary at least `tail` events
/// before the head (docs/protocol.md §4.1).
pub fn tail(target: &Target, tail: u32, limit: u32) -> String {
    format!("{}/replay?tail={tail}&limit={limit}", base(target))
}

/// The replay page before `before`: from a turn boundary at least `tail`
/// events before it, or, once that boundary is known, its rest after `after`.
pub fn older(target: &Target, before: u64, after: Option<u64>, tail: u32, limit: u32) -> String {
    let from = match after {
        Some(a) => format!("after_cursor={a}"),
        None => format!("tail={tail}"),
    };
    format!(
        "{}/replay?{from}&before_cursor={before}&limit={limit}",
        base(target)
    )
}

/// `/v1/sessions/{id}` + `suffix`.
fn session(session_id: &str, suffix: &str) -> String {
    let mut p = String::from("/v1/sessions/");
    segment(&mut p, session_id);
    p.push_str(suffix);
    p
}

/// `POST`: a user message (PROTOCOL.md §4.4).
pub fn post_message(session_id: &str) -> String {
    session(session_id, "/messages")
}

/// `POST`: the answer to a pending question.
pub fn answer(session_id: &str, question_id: &str) -> String {
    let mut p = session(session_id, "/questions/");
    segment(&mut p, question_id);
    p.push_str("/answer");
    p
}

/// `POST`: stop a turn.
pub fn cancel(session_id: &str) -> String {
    session(session_id, "/cancel")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn paths_for_every_target() {
        let s = Target::session("ses_1");
        assert_eq!(stream(&s, Some(5)), "/v1/sessions/ses_1/events?after_seq=5");
        assert_eq!(stream(&s, None), "/v1/sessions/ses_1/events");
        assert_eq!(
            events(&s, 4, 500),
            "/v1/sessions/ses_1/events?after_seq=4&limit=500"
        );
        assert_eq!(
            replay(&s, 0, 500).as_deref(),
            Some("/v1/sessions/ses_1/replay?after_cursor=0&limit=500")
        );
        let p = Target::Scoped {
            scope: Scope::Process,
            scope_id: "proc 42".into(),
        };
        assert_eq!(
            stream(&p, Some(1)),
            "/v1/processes/proc%2042/events?after_seq=1"
        );
        assert_eq!(replay(&p, 0, 1), None);
        assert_eq!(
            tail(&s, 100, 500),
            "/v1/sessions/ses_1/replay?tail=100&limit=500"
        );
        assert_eq!(
            older(&s, 40, None, 100, 500),
            "/v1/sessions/ses_1/replay?tail=100&before_cursor=40&limit=500"
        );
        assert_eq!(
            older(&s, 40, Some(12), 100, 500),
            "/v1/sessions/ses_1/replay?after_cursor=12&before_cursor=40&limit=500"
        );
        assert_eq!(post_message("ses 1"), "/v1/sessions/ses%201/messages");
        assert_eq!(answer("s", "q/1"), "/v1/sessions/s/questions/q%2F1/answer");
        assert_eq!(cancel("s"), "/v1/sessions/s/cancel");
        let sys = Target::Scoped {
            scope: Scope::System,
            scope_id: "runtime".into(),
        };
        assert_eq!(stream(&sys, None), "/v1/system/events");
        assert_eq!(stream(&Target::Global, Some(9)), "/v1/events?after_id=9");
        assert_eq!(
            events(&Target::Global, 9, 2),
            "/v1/events?after_id=9&limit=2"
        );
    }
}
