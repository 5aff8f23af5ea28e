//! Writes, storage and the UI feed as machine work: each enters as an input,
//! leaves as actions, and every retry, refresh and fallback is decided here.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use replay_client::core::machine::{
    Action, Config, CoreError, Lifecycle, Machine, Notice, RequestId, State, Target, Write,
    WriteDone, WriteId, WriteOutcome,
};

const SES: &str = "ses_1";

/// A client whose read side is idle (nothing answered), for write tests.
fn client() -> Machine {
    let mut c = Machine::new(Config::session(SES), None, 0);
    drain(&mut c);
    c
}

fn drain(c: &mut Machine) -> Vec<Action> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

/// The one POST the machine asked for: (id, path, body).
fn post(c: &mut Machine) -> (RequestId, String, String) {
    let posts: Vec<_> = drain(c)
        .into_iter()
        .filter_map(|a| match a {
            Action::Post {
                id,
                path_and_query,
                body,
                ..
            } => Some((id, path_and_query, body)),
            _ => None,
        })
        .collect();
    assert_eq!(posts.len(), 1, "{posts:?}");
    posts.into_iter().next().unwrap()
}

fn done(c: &mut Machine) -> Vec<WriteDone> {
    std::iter::from_fn(|| c.poll_write_done()).collect()
}

fn send(c: &mut Machine, now: u64) -> WriteId {
    let write = Write::Send {
        message_id: "msg_1".into(),
        text: "hi".into(),
    };
    c.handle_write(write, now)
}

#[test]
fn a_send_is_one_post_of_its_message_and_resolves_to_its_turn() {
    let mut c = client();
    let w = send(&mut c, 10);
    let (id, path, body) = post(&mut c);
    assert_eq!(path, "/v1/sessions/ses_1/messages");
    assert_eq!(body, r#"{"message_id":"msg_1","text":"hi"}"#);
    assert!(done(&mut c).is_empty());
    c.handle_post_answer(id, br#"{"turn_id":"turn_7"}"#, 20);
    let turn_id = "turn_7".to_owned();
    let expected = WriteDone {
        id: w,
        result: Ok(WriteOutcome::Sent { turn_id }),
    };
    assert_eq!(done(&mut c), vec![expected]);
    assert_eq!(c.writes_pending(), 0);
}

#[test]
fn transient_failures_are_retried_with_the_same_body_after_backoff_and_never_given_up() {
    let mut c = client();
    send(&mut c, 0);
    let (mut id, _, first_body) = post(&mut c);
    let mut now = 0;
    // Past a plain write's attempts: a message stays in the outbox.
    let attempts = Config::session(SES).write_attempts * 2;
    for attempt in 1..attempts {
        match attempt % 3 {
            0 => c.handle_http_error(id, 503, None, b"", now),
            1 => c.handle_network_error(id, "reset", now),
            _ => c.handle_http_error(id, 429, Some("1"), b"", now),
        }
        assert!(done(&mut c).is_empty(), "attempt {attempt} is retried");
        let retry_floor = now + if attempt % 3 == 2 { 1_000 } else { 1 };
        let next = loop {
            let at = c.poll_timeout().expect("a retry is timed");
            assert!(at > now, "backoff before attempt {attempt}");
            now = at;
            c.handle_timeout(now);
            let posts: Vec<_> = drain(&mut c)
                .into_iter()
                .filter_map(|a| match a {
                    Action::Post { id, body, .. } => Some((id, body)),
                    _ => None,
                })
                .collect();
            if let Some(p) = posts.into_iter().next() {
                break p;
            }
        };
        assert!(now >= retry_floor, "Retry-After is a floor");
        assert_eq!(
            next.1, first_body,
            "the same message_id: a retry is idempotent"
        );
        assert_ne!(next.0, id);
        id = next.0;
    }
}

#[test]
fn a_401_refreshes_credentials_once_then_fails() {
    let mut c = client();
    let w = send(&mut c, 0);
    let (id, _, _) = post(&mut c);
    c.handle_http_error(id, 401, None, b"", 5);
    let actions = drain(&mut c);
    assert!(
        matches!(actions[0], Action::RefreshCredentials),
        "{actions:?}"
    );
    let Action::Post { id: again, .. } = actions[1].clone() else {
        panic!("{actions:?}")
    };
    c.handle_http_error(again, 403, None, b"", 6);
    let out = done(&mut c);
    assert_eq!(out[0].id, w);
    assert_eq!(
        out[0].result,
        Err(CoreError::Unauthorized {
            status: 403,
            message: String::new()
        }),
        "a second 401/403 is final"
    );
}

#[test]
fn a_401_of_a_write_sent_before_a_refresh_is_sent_again_without_another() {
    // The stream and a write go out with the same stale token; the stream's
    // refusal refreshes it; the write's refusal was of the replaced token.
    let mut c = Machine::new(Config::session(SES), None, 0);
    let stream = drain(&mut c)
        .into_iter()
        .find_map(|a| match a {
            Action::OpenStream { id, .. } => Some(id),
            _ => None,
        })
        .expect("the stream opens first");
    send(&mut c, 0);
    let (id, _, _) = post(&mut c);
    c.handle_http_error(stream, 401, None, b"", 1);
    assert!(drain(&mut c)
        .iter()
        .any(|a| matches!(a, Action::RefreshCredentials)));
    c.handle_http_error(id, 401, None, b"", 2);
    let actions = drain(&mut c);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::RefreshCredentials)),
        "no second refresh: {actions:?}"
    );
    assert!(
        actions.iter().any(|a| matches!(a, Action::Post { .. })),
        "{actions:?}"
    );
    assert!(done(&mut c).is_empty(), "the write is still under way");
}

#[test]
fn other_4xx_fail_at_once_with_the_servers_code() {
    let mut c = client();
    send(&mut c, 0);
    let (id, _, _) = post(&mut c);
    let body = br#"{"error":"invalid_message_id","message":"too long"}"#;
    c.handle_http_error(id, 400, None, body, 1);
    let out = done(&mut c);
    let CoreError::HttpStatus { status, code, .. } = out[0].result.clone().unwrap_err() else {
        panic!("{out:?}")
    };
    assert_eq!((status, code.as_str()), (400, "invalid_message_id"));
    assert!(
        !drain(&mut c)
            .iter()
            .any(|a| matches!(a, Action::Post { .. })),
        "no retry"
    );
}

#[test]
fn a_retried_answer_whose_first_try_was_committed_is_a_success() {
    let mut c = client();
    let write = Write::Answer {
        question_id: "q/1".into(),
        answer: "yes".into(),
    };
    let w = c.handle_write(write, 0);
    let (id, path, body) = post(&mut c);
    assert_eq!(path, "/v1/sessions/ses_1/questions/q%2F1/answer");
    assert_eq!(body, r#"{"answer":"yes"}"#);
    // The first try timed out at the transport: it may have been committed.
    c.handle_request_failed(id, CoreError::Timeout { after_ms: 10 }, 10);
    let at = c.poll_timeout().unwrap();
    c.handle_timeout(at);
    let (again, _, _) = post(&mut c);
    let closed = br#"{"error":"question_closed","message":"not waiting"}"#;
    c.handle_http_error(again, 409, None, closed, at + 1);
    let expected = WriteDone {
        id: w,
        result: Ok(WriteOutcome::Answered),
    };
    assert_eq!(done(&mut c), vec![expected]);
}

#[test]
fn an_answer_to_a_closed_question_on_its_first_try_is_an_error() {
    let mut c = client();
    let write = Write::Answer {
        question_id: "q1".into(),
        answer: "yes".into(),
    };
    c.handle_write(write, 0);
    let (id, _, _) = post(&mut c);
    let closed = br#"{"error":"question_closed","message":"not waiting"}"#;
    c.handle_http_error(id, 409, None, closed, 1);
    let out = done(&mut c);
    assert_eq!(out[0].result.clone().unwrap_err().status(), Some(409));
}

#[test]
fn a_cancel_names_the_turn_it_stops() {
    let mut c = client();
    let write = Write::Cancel {
        turn_id: Some("turn_3".into()),
    };
    let w = c.handle_write(write, 0);
    let (id, path, body) = post(&mut c);
    assert_eq!(path, "/v1/sessions/ses_1/cancel");
    assert_eq!(body, r#"{"turn_id":"turn_3"}"#);
    c.handle_post_answer(id, br#"{"turn_id":null}"#, 1);
    let cancelled = WriteOutcome::Cancelled { turn_id: None };
    assert_eq!(
        done(&mut c)[0],
        WriteDone {
            id: w,
            result: Ok(cancelled)
        }
    );
}

#[test]
fn an_attempt_without_an_answer_is_aborted_and_retried() {
    let mut c = client();
    send(&mut c, 0);
    let (id, _, _) = post(&mut c);
    let timeout = Config::session(SES).fetch_timeout_ms;
    assert!(c.poll_timeout().unwrap() <= timeout);
    c.handle_timeout(timeout);
    let actions = drain(&mut c);
    assert!(actions.contains(&Action::Abort { id }), "{actions:?}");
    let again = loop {
        let at = c.poll_timeout().unwrap();
        c.handle_timeout(at);
        let posts: Vec<_> = drain(&mut c)
            .into_iter()
            .filter_map(|a| match a {
                Action::Post { id, .. } => Some(id),
                _ => None,
            })
            .collect();
        if let Some(p) = posts.first() {
            break *p;
        }
    };
    assert_ne!(again, id);
}

#[test]
fn writes_need_a_session_and_an_open_client() {
    let mut c = Machine::new(Config::new(Target::Global), None, 0);
    let w = send(&mut c, 0);
    assert_eq!(done(&mut c)[0].result, Err(CoreError::NotASession));
    assert_eq!(CoreError::NotASession.code(), "invalid_options");
    assert_eq!(done(&mut c).len(), 0);
    let _ = w;
    let mut c = client();
    let pending = send(&mut c, 0);
    let (id, _, _) = post(&mut c);
    c.close(1);
    assert!(drain(&mut c).contains(&Action::Abort { id }));
    let after = send(&mut c, 2);
    let out = done(&mut c);
    let ids: Vec<_> = out.iter().map(|d| d.id).collect();
    assert_eq!(ids, vec![pending, after]);
    assert!(out.iter().all(|d| d.result == Err(CoreError::Closed)));
}

#[test]
fn a_late_answer_of_a_replaced_attempt_is_ignored() {
    let mut c = client();
    send(&mut c, 0);
    let (old, _, _) = post(&mut c);
    c.handle_network_error(old, "reset", 1);
    let at = c.poll_timeout().unwrap();
    c.handle_timeout(at);
    let (new, _, _) = post(&mut c);
    c.handle_post_answer(old, br#"{"turn_id":"turn_old"}"#, at);
    assert!(done(&mut c).is_empty());
    c.handle_post_answer(new, br#"{"turn_id":"turn_1"}"#, at);
    assert_eq!(done(&mut c).len(), 1);
}

// --- Storage ---------------------------------------------------------------

#[test]
fn a_loading_client_asks_for_its_value_and_does_nothing_else_until_it_comes() {
    let mut c = Machine::load(Config::session(SES), 0);
    assert_eq!(drain(&mut c), vec![Action::LoadStored]);
    assert_eq!(c.status().state, State::Connecting);
    c.handle_lifecycle(Lifecycle::Visible, 1);
    assert!(drain(&mut c).is_empty(), "no request before the value");
    let stored = client().persisted_value();
    c.handle_stored(Some(&stored), 2);
    let actions = drain(&mut c);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::OpenStream { .. })));
    assert!(actions.iter().any(|a| matches!(a, Action::Fetch { .. })));
    // A second answer is ignored.
    c.handle_stored(None, 3);
    assert!(drain(&mut c).is_empty());
}

#[test]
fn an_offline_start_during_the_load_is_kept() {
    let mut c = Machine::load(Config::session(SES), 0);
    drain(&mut c);
    c.handle_lifecycle(Lifecycle::Offline, 0);
    c.handle_stored(None, 1);
    assert!(drain(&mut c).is_empty(), "offline: nothing sent");
    assert_eq!(c.status().state, State::Offline);
    c.handle_lifecycle(Lifecycle::Online, 2);
    assert!(drain(&mut c)
        .iter()
        .any(|a| matches!(a, Action::OpenStream { .. })));
}

#[test]
fn a_storage_that_never_answers_is_given_up_after_its_timeout() {
    let mut cfg = Config::session(SES);
    cfg.storage_timeout_ms = 500;
    let mut c = Machine::load(cfg, 0);
    drain(&mut c);
    assert_eq!(c.poll_timeout(), Some(500));
    c.handle_timeout(499);
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(500);
    let notices: Vec<_> = std::iter::from_fn(|| c.poll_notice()).collect();
    assert!(
        matches!(&notices[..], [Notice::StorageFallback { error }] if error.code == "storage_fallback"),
        "{notices:?}"
    );
    assert!(drain(&mut c)
        .iter()
        .any(|a| matches!(a, Action::OpenStream { .. })));
    assert!(c.storage_fell_back_to_memory());
    // The late value is not used, and nothing is persisted any more.
    c.handle_stored(Some(b"{}"), 600);
    c.handle_lifecycle(Lifecycle::PageHide, 700);
    assert!(!drain(&mut c)
        .iter()
        .any(|a| matches!(a, Action::Persist(_))));
    assert_eq!(c.recent_notices().back().unwrap().code, "storage_fallback");
}

#[test]
fn a_corrupt_stored_value_is_removed_by_an_action() {
    let mut c = Machine::load(Config::session(SES), 0);
    drain(&mut c);
    c.handle_stored(Some(b"not json"), 1);
    let actions = drain(&mut c);
    assert_eq!(actions[0], Action::RemoveStored, "{actions:?}");
    assert_eq!(c.recent_notices()[0].code, "corrupt_storage");
}

#[test]
fn a_failed_save_stops_persisting_with_one_notice() {
    let mut c = client();
    c.handle_storage_failed("quota exceeded", 1);
    c.handle_storage_failed("quota exceeded", 2);
    let codes: Vec<_> = c.recent_notices().iter().map(|n| n.code.clone()).collect();
    assert_eq!(codes, vec!["storage_fallback"]);
    assert!(c.recent_notices()[0].message.contains("quota exceeded"));
    c.handle_lifecycle(Lifecycle::PageHide, 3);
    assert!(!drain(&mut c)
        .iter()
        .any(|a| matches!(a, Action::Persist(_))));
}

// --- The feed ----------------------------------------------------------------

#[test]
fn the_revision_moves_with_what_a_snapshot_shows_and_quiet_steps_notify_nobody() {
    use replay_client::core::machine::{Notify, Pace};
    // Told at once (`Notify::Sync`): what `poll_pace` says is the feed's.
    let told =
        |c: &mut Machine, now| std::iter::from_fn(|| c.poll_pace(now)).any(|p| p == Pace::Notify);
    let cfg = Config {
        notify: Notify::Sync,
        ..Config::session(SES)
    };
    // A stored state (cursor 1): its restore is `restoring` from the start.
    let stored = {
        let mut m = Machine::new(Config::session(SES), None, 0);
        let page = drain(&mut m).into_iter().find_map(|a| match a {
            Action::Fetch { id, .. } => Some(id),
            _ => None,
        });
        let body = r#"{"epoch":"e","boot_id":"b","cursor":1,"head":1,"has_more":false,"history":[{"id":1,"scope":"session","scope_id":"ses_1","seq":1,"type":"session.created","critical":true,"ts":"t","data":{"title":"t"}}],"live_turn":null,"tasks":null}"#;
        m.handle_replay_page(page.expect("a page"), body.as_bytes(), 0);
        m.persisted_value()
    };
    let mut c = Machine::load(cfg, 0);
    drain(&mut c);
    let r0 = c.revision();
    assert!(!told(&mut c, 0), "connecting is quiet");
    c.handle_stored(Some(&stored), 1);
    assert_eq!(c.status().state, State::Restoring);
    // What was stored is told, once: a reload paints it before any answer;
    // restoring itself is quiet.
    assert!(told(&mut c, 1), "the stored view is told");
    assert!(c.poll_view_change().is_some_and(|v| v.reset));
    assert!(!told(&mut c, 1), "restoring is quiet");
    assert!(c.revision() > r0, "but the snapshot shows it");
    let r1 = c.revision();
    c.handle_storage_failed("gone", 2);
    assert!(c.revision() > r1);
    assert!(told(&mut c, 2), "a notice is told");
    assert!(!told(&mut c, 2), "once");
}

#[test]
fn close_moves_the_revision_so_a_snapshot_shows_stopped() {
    let mut c = client();
    let before = c.revision();
    c.close(5);
    assert_eq!(c.status().state, State::Stopped);
    assert!(c.revision() > before);
}
