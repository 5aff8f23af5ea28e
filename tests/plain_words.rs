//! What the application is told is in words a user understands:
//! notices without cursor numbers or reason codes, errors that keep the
//! server's own reason. Codes stay stable for programs.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::error_body_with;
use machine_support::rig::Rig;
use replay_client::core::machine::{ClientNotice, Notice, State};

fn words(n: Notice) -> ClientNotice {
    ClientNotice::from_notice(&n, 0).expect("an application notice")
}

#[test]
fn a_restore_says_how_many_events_it_loaded_not_which_cursors() {
    let one = words(Notice::Restored {
        from_cursor: 0,
        to_cursor: 1,
    });
    assert_eq!(one.code, "restored");
    assert_eq!(one.message, "loaded 1 event of history");
    let many = words(Notice::Restored {
        from_cursor: 40,
        to_cursor: 52,
    });
    assert_eq!(many.message, "caught up: 12 events loaded");
    assert!(!many.message.contains("cursor"));
}

#[test]
fn a_repaired_gap_says_how_many_events_were_missed() {
    let n = words(Notice::GapRepaired {
        from_cursor: 7,
        to_cursor: 9,
    });
    assert_eq!(n.code, "gap_repaired");
    assert_eq!(n.message, "2 missed events fetched again");
}

#[test]
fn an_interrupted_turn_says_why_in_words() {
    let restart = words(Notice::TurnInterrupted {
        turn_id: "turn_1".into(),
        reason: "worker_restart".into(),
    });
    assert_eq!(restart.code, "turn_interrupted");
    assert_eq!(
        restart.message,
        "the answer in progress was interrupted: the runtime restarted"
    );
    let moved = words(Notice::TurnInterrupted {
        turn_id: "turn_1".into(),
        reason: "boot_changed".into(),
    });
    assert_eq!(
        moved.message,
        "the answer in progress can no longer be followed live: the connection reached another runtime process; its end will show when it is saved"
    );
}

#[test]
fn a_refused_token_keeps_the_servers_reason() {
    let mut r = Rig::new();
    let body = error_body_with("unauthorized", "missing or wrong bearer token");
    r.http_error(true, 401, None, &body);
    r.http_error(true, 401, None, &body);
    assert_eq!(r.c.status().state, State::Failed);
    let error = r.c.status().last_error.expect("an error");
    assert_eq!(error.code, "unauthorized");
    assert_eq!(error.status, Some(401));
    assert_eq!(
        error.message,
        "unauthorized (HTTP 401): missing or wrong bearer token"
    );
}
