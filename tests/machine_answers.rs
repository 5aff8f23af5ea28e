//! The one response handler (`Machine::handle_response`): the IO layer
//! reports raw facts (head, body bytes, end, failure) and the machine
//! decides what they are, and when a silent request is given up.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{Action, Config, CoreError, Notice, Response, State};

fn head(status: u16, content_type: &str) -> Response {
    Response::Head {
        status,
        content_type: Some(content_type.into()),
        retry_after: None,
    }
}

/// Delivers a whole answer to request `id` as the IO layer reports it: the
/// head, the body in chunks of `chunk` bytes, the end.
fn answer(
    r: &mut Rig,
    id: replay_client::core::machine::RequestId,
    status: u16,
    body: &[u8],
    chunk: usize,
) {
    r.c.handle_response(id, head(status, "application/json"), r.now);
    for part in body.chunks(chunk) {
        r.c.handle_response(id, Response::Body(part.to_vec()), r.now);
    }
    r.c.handle_response(id, Response::End, r.now);
    r.pump();
}

fn aborted(r: &Rig, id: replay_client::core::machine::RequestId) -> bool {
    r.log
        .iter()
        .any(|a| matches!(a, Action::Abort { id: a } if *a == id))
}

#[test]
fn a_page_reported_in_chunks_is_read_whole_and_restores() {
    let log = simple_log(5);
    let mut r = Rig::new();
    let stream = r.stream_id();
    r.c.handle_response(stream, head(200, "text/event-stream"), r.now);
    r.c.handle_response(
        stream,
        Response::Body(frames(&[hello(EPOCH, 5, BOOT)]).into_bytes()),
        r.now,
    );
    r.pump();
    let page = r.fetch.clone().expect("the first page").0;
    r.forget_fetch(page);
    answer(&mut r, page, 200, &whole_page(&log, 5), 7);
    assert_eq!(r.c.cursor(), 5);
    assert_eq!(r.c.status().state, State::Live);
}

#[test]
fn an_error_body_reported_in_chunks_keeps_the_servers_code() {
    let mut r = Rig::new();
    let page = r.fetch.clone().expect("the first page").0;
    r.forget_fetch(page);
    answer(&mut r, page, 404, &error_body("not_found"), 3);
    let status = r.c.status();
    // A 4xx on the backlog gives the restore up, not the client (rule 2);
    // its error is the notice's.
    assert_eq!(status.state, State::Connecting);
    let error = r
        .notices
        .iter()
        .find_map(|n| match n {
            Notice::RestoreFailed { error } => Some(error.clone()),
            _ => None,
        })
        .expect("a restore_failed notice");
    assert_eq!(error.status, Some(404));
    assert_eq!(error.code, "not_found", "the server's code: {error:?}");
}

#[test]
fn a_stream_without_a_first_byte_is_aborted_at_the_connect_deadline() {
    let mut r = Rig::new();
    let timeout = r.c.config().connect_timeout_ms;
    let stream = r.stream_id();
    // The headers alone do not prove the stream alive.
    r.c.handle_response(stream, head(200, "text/event-stream"), r.now);
    r.pump();
    assert!(r.c.poll_timeout().is_some_and(|t| t <= r.now + timeout));
    r.now += timeout;
    r.c.handle_timeout(r.now);
    r.pump();
    assert!(aborted(&r, stream), "{:?}", r.log);
    let status = r.c.status();
    assert_eq!(status.last_error.expect("an error").code, "timeout");
    assert!(status.next_retry_at.is_some(), "retried after its backoff");
}

#[test]
fn a_stream_that_sent_a_byte_is_left_to_the_stall_watchdog() {
    let mut r = Rig::new();
    let timeout = r.c.config().connect_timeout_ms;
    let stream = r.stream_id();
    r.c.handle_response(stream, head(200, "text/event-stream"), r.now);
    r.c.handle_response(stream, Response::Body(b": hi\n\n".to_vec()), r.now);
    r.pump();
    r.now += timeout;
    r.c.handle_timeout(r.now);
    r.pump();
    assert!(!aborted(&r, stream), "{:?}", r.log);
}

#[test]
fn a_page_without_a_head_is_aborted_and_asked_again() {
    let mut r = Rig::new();
    let timeout = r.c.config().connect_timeout_ms;
    let page = r.fetch.clone().expect("the first page").0;
    r.now += timeout;
    r.c.handle_timeout(r.now);
    r.pump();
    assert!(aborted(&r, page), "{:?}", r.log);
    // A late answer to the abandoned request changes nothing.
    answer(&mut r, page, 200, &whole_page(&simple_log(2), 2), 64);
    assert_eq!(r.c.cursor(), 0);
    // Asked again once its backoff is over.
    let before = r.fetches.len();
    for _ in 0..20 {
        if let Some(t) = r.c.poll_timeout() {
            r.now = r.now.max(t);
            r.c.handle_timeout(r.now);
            r.pump();
        }
        if r.fetches.len() > before {
            break;
        }
    }
    assert!(r.fetches.len() > before, "the page is asked again");
}

#[test]
fn a_body_past_its_bound_is_aborted_as_body_too_large() {
    let mut cfg = Config::session(SES);
    cfg.max_body_bytes = 1_000;
    let mut r = Rig::with(cfg, None);
    let page = r.fetch.clone().expect("the first page").0;
    r.c.handle_response(page, head(200, "application/json"), r.now);
    r.c.handle_response(page, Response::Body(vec![b' '; 600]), r.now);
    r.c.handle_response(page, Response::Body(vec![b' '; 600]), r.now);
    r.pump();
    assert!(aborted(&r, page), "{:?}", r.log);
    let error = r.c.status().last_error.expect("an error");
    assert_eq!(error.code, CoreError::BodyTooLarge { limit: 1_000 }.code());
    assert_ne!(r.c.status().state, State::Failed, "retried, not given up");
}

#[test]
fn settings_become_the_config_in_one_place() {
    use replay_client::core::machine::{Settings, Target};
    let target = Target::session(SES);
    let cfg = Config::from_settings(Settings {
        target: target.clone(),
        connect_timeout_ms: 1_234,
        prefetch_depth: 0,
        seed: 7,
        persist: false,
        notify: replay_client::core::machine::Notify::Every(40),
        outbox_max_age_ms: 5_000,
        tail: 40,
    });
    assert_eq!(cfg.outbox_max_age_ms, 5_000);
    assert_eq!(cfg.tail, 40);
    assert_eq!(
        (
            cfg.connect_timeout_ms,
            cfg.storage_timeout_ms,
            cfg.prefetch_depth,
            cfg.seed,
            cfg.persist,
            cfg.notify
        ),
        (
            1_234,
            1_234,
            0,
            7,
            false,
            replay_client::core::machine::Notify::Every(40)
        )
    );
    // Everything else is the core's default.
    let defaults = Config::new(target);
    assert_eq!(cfg.fetch_timeout_ms, defaults.fetch_timeout_ms);
    assert_eq!(cfg.max_body_bytes, defaults.max_body_bytes);
    // A client so configured gives up a silent stream at its deadline.
    let mut r = Rig::with(cfg, None);
    let stream = r.stream_id();
    r.now += 1_234;
    r.c.handle_timeout(r.now);
    r.pump();
    assert!(aborted(&r, stream));
}
