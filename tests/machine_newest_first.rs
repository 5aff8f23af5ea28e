//! The newest page first (docs/protocol.md §4.1): a first visit reads the
//! newest page from a turn boundary, follows live from its end, and puts
//! older pages first when asked, each exactly once; a gap, an epoch change
//! between pages and a runtime without the extension.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{Config, Notice, WriteDone, WriteOutcome};
use replay_client::core::protocol::{Envelope, ReplayPage};
use replay_client::core::transcript::fold;
use serde_json::json;

const TAIL: u32 = 5;

/// `session.created`, then `turns` turns of 5 events (a user message, a
/// tool call, the reply, the end): turn `k` ends at seq `1 + 5k`.
fn turns_log(turns: u64) -> Vec<Envelope> {
    let mut log = vec![durable(1, ev("session.created", json!({"title": "long"})))];
    for k in 1..=turns {
        let t = format!("t{k}");
        let s = log.len() as u64;
        let user =
            json!({"message_id": format!("u{k}"), "turn_id": t, "role": "user", "text": "q"});
        log.push(durable(s + 1, ev("message.committed", user)));
        log.push(tool_started(s + 2, &t, &format!("c{k}")));
        log.push(tool_completed(s + 3, &t, &format!("c{k}"), "out"));
        log.push(assistant_msg(s + 4, &t, &format!("a{k}"), "reply"));
        log.push(turn_completed(s + 5, &t));
    }
    log
}

/// What a runtime with the extension answers to `tail` before `end` (the
/// head when `None`): from the newest turn end at least `tail` events back.
fn tail_page(log: &[Envelope], tail: u64, end: Option<u64>, epoch: &str) -> Vec<u8> {
    let head = log.len() as u64;
    let end_at = end.unwrap_or(head);
    let start = (0..=end_at.saturating_sub(tail))
        .rev()
        .find(|s| *s == 0 || (s - 1) % 5 == 0 && *s > 1)
        .unwrap();
    let history = log[start as usize..end_at as usize].to_vec();
    let page = ReplayPage {
        epoch: epoch.into(),
        boot_id: BOOT.into(),
        cursor: end_at,
        head,
        has_more: false,
        history,
        live_turn: None,
        tasks: end.is_none().then(Default::default),
        older_cursor: Some(start),
    };
    serde_json::to_vec(&page).unwrap()
}

fn tail_cfg() -> Config {
    let mut cfg = Config::session(SES);
    cfg.tail = TAIL;
    cfg
}

const TAIL_PATH: &str = "/v1/sessions/ses_1/replay?tail=5&limit=500";

fn older_path(before: u64) -> String {
    format!("/v1/sessions/ses_1/replay?tail=5&before_cursor={before}&limit=2000")
}

/// A first visit of `log` brought live from its newest page.
fn live_tail(log: &[Envelope]) -> Rig {
    let mut r = Rig::with(tail_cfg(), None);
    r.open_ok();
    r.send(&[hello(EPOCH, log.len() as u64, BOOT)]);
    assert_eq!(r.fetch_paths(), [TAIL_PATH], "no page speculated after 0");
    r.answer(&tail_page(log, TAIL as u64, None, EPOCH));
    r
}

fn dones(r: &mut Rig) -> Vec<WriteDone> {
    std::iter::from_fn(|| r.c.poll_write_done()).collect()
}

fn items_of(log: &[Envelope]) -> Vec<replay_client::core::protocol::TranscriptItem> {
    fold(EPOCH, log).items
}

#[test]
fn a_first_visit_paints_the_newest_page_and_follows_live_from_its_end() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    // The last turn alone is 5 events: seqs 47..=51 after the boundary 46.
    assert_eq!((r.c.cursor(), r.c.position().older), (51, 46));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[46..]));
    assert!(r.notices.iter().any(|n| matches!(
        n,
        Notice::Restored {
            from_cursor: 46,
            to_cursor: 51
        }
    )));
    // Live from the head, rule 3 unchanged.
    let more = turns_log(11);
    r.send(&more[51..]);
    assert_eq!(r.c.cursor(), 56);
    assert_eq!(r.c.transcript().unwrap().items, items_of(&more[46..]));
}

#[test]
fn older_pages_are_put_first_exactly_once_down_to_the_start() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    r.changes();
    let mut pages = 0;
    while r.c.position().older > 0 {
        let before = r.c.position().older;
        let a = r.c.load_older(r.now);
        // A second call while the page is read waits for the same page.
        let b = r.c.load_older(r.now);
        r.pump();
        assert_eq!(r.fetch_paths(), [older_path(before)]);
        r.answer_path(
            &older_path(before),
            &tail_page(&log, 5, Some(before), EPOCH),
        );
        let done = dones(&mut r);
        assert_eq!(done.iter().map(|d| d.id).collect::<Vec<_>>(), [a, b]);
        assert!(done.iter().all(|d| d.result == Ok(WriteOutcome::Older)));
        let ch = r.changes();
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].items_appended_from, Some(0), "every item moved");
        pages += 1;
    }
    assert_eq!(pages, 9);
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log));
    assert_eq!(r.c.view().as_session().unwrap().session().title, "long");
    // Nothing older: settled at once, without a request.
    let id = r.c.load_older(r.now);
    r.pump();
    assert!(r.fetch_paths().is_empty());
    assert_eq!(dones(&mut r)[0].id, id);
}

#[test]
fn an_older_page_cut_short_goes_on_after_its_cursor() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    r.c.load_older(r.now);
    r.pump();
    // The page 36..=46 in two answers: 37..=40, then the rest.
    let page = |from: usize, to: usize, has_more: bool| {
        let p = ReplayPage {
            epoch: EPOCH.into(),
            boot_id: BOOT.into(),
            cursor: to as u64,
            head: 51,
            has_more,
            history: log[from..to].to_vec(),
            live_turn: None,
            tasks: None,
            older_cursor: Some(36),
        };
        serde_json::to_vec(&p).unwrap()
    };
    r.answer_path(&older_path(46), &page(36, 40, true));
    assert!(dones(&mut r).is_empty());
    let rest = "/v1/sessions/ses_1/replay?after_cursor=40&before_cursor=46&limit=2000";
    assert_eq!(r.fetch_paths(), [rest]);
    r.answer_path(rest, &page(40, 46, false));
    assert_eq!(dones(&mut r).len(), 1);
    assert_eq!(r.c.position().older, 36);
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[36..]));
}

#[test]
fn a_gap_after_the_newest_page_is_repaired_from_its_cursor() {
    let log = turns_log(11);
    let mut r = Rig::with(tail_cfg(), None);
    r.open_ok();
    r.send(&[hello(EPOCH, 51, BOOT)]);
    r.answer(&tail_page(&log[..51], TAIL as u64, None, EPOCH));
    // Seq 52 is lost: 53 shows the gap, repaired from the cursor (rule 4).
    r.send(&log[52..53]);
    let repair = "/v1/sessions/ses_1/events?after_seq=50&limit=500";
    assert_eq!(r.fetch_path(), repair);
    r.answer(&event_page(EPOCH, &log[50..53], 53, false));
    assert_eq!(r.c.cursor(), 53);
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[46..53]));
    // The older page still goes before the newest one.
    r.c.load_older(r.now);
    r.pump();
    r.answer_path(&older_path(46), &tail_page(&log, 5, Some(46), EPOCH));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[41..53]));
}

#[test]
fn an_epoch_change_between_pages_restarts_from_the_newest_page() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    let id = r.c.load_older(r.now);
    r.pump();
    r.notices.clear();
    // The log was recreated: the older page comes from another epoch.
    r.answer_path(&older_path(46), &tail_page(&log, 5, Some(46), "e2"));
    assert!(r
        .notices
        .iter()
        .any(|n| matches!(n, Notice::EpochChanged { .. })));
    let done = dones(&mut r);
    assert_eq!(
        (done[0].id, &done[0].result),
        (id, &Ok(WriteOutcome::Older))
    );
    assert_eq!((r.c.cursor(), r.c.position().older), (0, 0));
    // The new log's newest page comes first again.
    assert_eq!(r.fetch_path(), TAIL_PATH);
    let log2 = turns_log(4);
    r.answer(&tail_page(&log2, TAIL as u64, None, "e2"));
    assert_eq!((r.c.cursor(), r.c.position().older), (21, 16));
    assert_eq!(
        r.c.transcript().unwrap().items,
        fold("e2", &log2[16..]).items
    );
}

#[test]
fn a_runtime_without_the_extension_is_read_forward() {
    let log = turns_log(10);
    let mut r = Rig::with(tail_cfg(), None);
    r.open_ok();
    r.send(&[hello(EPOCH, 51, BOOT)]);
    // It ignores `tail`: the page after 0, with no `older_cursor`.
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        0,
        &log[..20],
        51,
        true,
        None,
        None,
    ));
    assert_eq!(r.c.position().older, 0);
    assert_eq!(
        r.fetch_paths()[0],
        "/v1/sessions/ses_1/replay?after_cursor=20&limit=1000"
    );
    r.answer(&replay_page(
        EPOCH,
        BOOT,
        20,
        &log[20..],
        51,
        false,
        None,
        None,
    ));
    assert_eq!(r.c.cursor(), 51);
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log));
    let id = r.c.load_older(r.now);
    assert_eq!(dones(&mut r)[0].id, id, "nothing older");
}

#[test]
fn the_stored_state_holds_what_was_read_and_where_it_starts() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    r.c.load_older(r.now);
    r.pump();
    r.answer_path(&older_path(46), &tail_page(&log, 5, Some(46), EPOCH));
    let stored = r.c.persisted_value();
    let mut r = Rig::with(tail_cfg(), Some(&stored));
    assert_eq!((r.c.cursor(), r.c.position().older), (51, 41));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[41..]));
    // A reload restores from the stored cursor, not from the newest page.
    assert_eq!(
        r.fetch_path(),
        "/v1/sessions/ses_1/replay?after_cursor=51&limit=500"
    );
    r.open_ok();
    r.send(&[hello(EPOCH, 51, BOOT)]);
    r.answer(&replay_page(EPOCH, BOOT, 51, &[], 51, false, None, None));
    r.c.load_older(r.now);
    r.pump();
    r.answer_path(&older_path(41), &tail_page(&log, 5, Some(41), EPOCH));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[36..]));
}

#[test]
fn an_older_page_asked_for_during_a_restore_waits_for_it() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    r.c.load_older(r.now);
    r.pump();
    r.answer_path(&older_path(46), &tail_page(&log, 5, Some(46), EPOCH));
    let stored = r.c.persisted_value();
    let mut r = Rig::with(tail_cfg(), Some(&stored));
    r.c.load_older(r.now);
    r.pump();
    assert_eq!(r.fetch_paths().len(), 1, "only the restore's page");
    r.open_ok();
    r.send(&[hello(EPOCH, 51, BOOT)]);
    r.answer(&replay_page(EPOCH, BOOT, 51, &[], 51, false, None, None));
    assert_eq!(r.fetch_paths(), [older_path(41)]);
    r.answer_path(&older_path(41), &tail_page(&log, 5, Some(41), EPOCH));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[36..]));
}

#[test]
fn a_failed_older_page_settles_with_its_error_and_can_be_asked_again() {
    let log = turns_log(10);
    let mut r = live_tail(&log);
    let id = r.c.load_older(r.now);
    r.pump();
    // Events that are not those before 46 (one is missing): nothing is
    // put first.
    let holed = ReplayPage {
        epoch: EPOCH.into(),
        boot_id: BOOT.into(),
        cursor: 46,
        head: 51,
        has_more: false,
        history: log[42..46].to_vec(),
        live_turn: None,
        tasks: None,
        older_cursor: Some(41),
    };
    r.answer_path(&older_path(46), &serde_json::to_vec(&holed).unwrap());
    let done = dones(&mut r);
    assert_eq!(done[0].id, id);
    assert_eq!(
        done[0].result.as_ref().unwrap_err().code(),
        "history_mismatch"
    );
    assert_eq!(r.c.position().older, 46);
    // A 503: settled with it, no retry of its own.
    r.c.load_older(r.now);
    r.pump();
    let (fid, _, _) = r.fetches[0].clone();
    r.forget_fetch(fid);
    r.c.handle_http_error(fid, 503, None, &error_body("unavailable"), r.now);
    r.pump();
    assert_eq!(
        dones(&mut r)[0].result.as_ref().unwrap_err().status(),
        Some(503)
    );
    assert!(r.fetch_paths().is_empty());
    // Asked again, it is read.
    r.c.load_older(r.now);
    r.pump();
    r.answer_path(&older_path(46), &tail_page(&log, 5, Some(46), EPOCH));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[41..]));
}

#[test]
fn the_default_configuration_reads_a_first_visit_newest_first() {
    let log = turns_log(20);
    let mut r = Rig::with(Config::session(SES), None);
    r.open_ok();
    r.send(&[hello(EPOCH, log.len() as u64, BOOT)]);
    let tail = Config::DEFAULT_TAIL;
    assert_eq!(
        r.fetch_paths(),
        [format!("/v1/sessions/ses_1/replay?tail={tail}&limit=500")]
    );
    r.answer(&tail_page(&log, u64::from(tail), None, EPOCH));
    // 40 events back from the head 101 is 61, the end of turn 12.
    assert_eq!((r.c.cursor(), r.c.position().older), (101, 61));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log[61..]));
    assert_eq!(Config::session(SES).tail, Config::DEFAULT_TAIL);
}

#[test]
fn the_default_configuration_reads_a_runtime_without_the_extension_forward() {
    let log = turns_log(20);
    let mut r = Rig::with(Config::session(SES), None);
    r.open_ok();
    r.send(&[hello(EPOCH, log.len() as u64, BOOT)]);
    // It ignores `tail`: the page after 0, whole, with no `older_cursor`.
    r.answer(&replay_page(EPOCH, BOOT, 0, &log, 101, false, None, None));
    assert_eq!((r.c.cursor(), r.c.position().older), (101, 0));
    assert_eq!(r.c.transcript().unwrap().items, items_of(&log));
    let id = r.c.load_older(r.now);
    assert_eq!(dones(&mut r)[0].id, id, "nothing older");
}
