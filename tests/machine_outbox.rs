//! The outbox (docs/protocol.md §6, rule 14), driven by hand on the
//! simulated clock: a message is shown and stored at once, sent once at a
//! time in send order until the runtime accepts it, and leaves `pending`
//! in the view change that adds its item.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{
    Action, Config, CoreError, Lifecycle, PendingState, RequestId, Write, WriteDone, WriteId,
    WriteOutcome,
};

fn send(r: &mut Rig, mid: &str) -> WriteId {
    let write = Write::Send {
        message_id: mid.into(),
        text: format!("text of {mid}"),
    };
    r.c.handle_write(write, r.now)
}

/// The POSTs among `actions`: (request, message_id).
fn posts(actions: &[Action]) -> Vec<(RequestId, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Post { id, body, .. } => {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                Some((*id, v["message_id"].as_str().unwrap().to_owned()))
            }
            _ => None,
        })
        .collect()
}

fn pending(r: &Rig) -> Vec<(String, PendingState)> {
    r.c.pending_messages()
        .into_iter()
        .map(|p| (p.message_id, p.state))
        .collect()
}

fn done(r: &mut Rig) -> Vec<WriteDone> {
    std::iter::from_fn(|| r.c.poll_write_done()).collect()
}

/// The writes that settled are `id`'s answer, accepted, alone.
fn assert_answered(settled: Vec<WriteDone>, id: WriteId) {
    assert_eq!(
        settled,
        vec![WriteDone {
            id,
            result: Ok(WriteOutcome::Answered)
        }]
    );
}

fn accept(r: &mut Rig, id: RequestId, turn: &str) {
    let body = format!(r#"{{"turn_id":"{turn}"}}"#);
    r.c.handle_post_answer(id, body.as_bytes(), r.now);
}

/// Runs timers until the outbox sends; the POSTs of that step.
fn until_post(r: &mut Rig) -> Vec<(RequestId, String)> {
    let p = until_raw_post(r);
    posts(&r.log[r.log.len() - p.len()..])
}

/// Runs timers until a POST goes out: (request, path, body) of that step.
fn until_raw_post(r: &mut Rig) -> Vec<(RequestId, String, String)> {
    for _ in 0..1_000 {
        let t = r.c.poll_timeout().expect("a timer is armed");
        r.now = r.now.max(t);
        r.c.handle_timeout(r.now);
        let p = raw_posts(&r.pump());
        if !p.is_empty() {
            return p;
        }
    }
    panic!("no send after 1 000 timers");
}

#[test]
fn a_send_is_shown_and_stored_in_the_same_input_before_its_request() {
    let mut r = Rig::live_with(&simple_log(2));
    send(&mut r, "m1");
    let actions = r.pump();
    let change = r.c.poll_view_change().expect("painted at once");
    assert!(change.pending, "{change:?}");
    assert_eq!(pending(&r), vec![("m1".to_owned(), PendingState::Sending)]);
    let persist = actions
        .iter()
        .position(|a| matches!(a, Action::Persist(v) if String::from_utf8_lossy(v).contains(r#""message_id":"m1""#)))
        .expect("the message is stored with the state");
    let post = actions
        .iter()
        .position(|a| matches!(a, Action::Post { .. }))
        .expect("and sent");
    assert!(persist < post, "stored before it is sent: {actions:?}");
}

#[test]
fn the_commit_swaps_the_pending_message_for_its_item_in_one_view_change() {
    let mut r = Rig::live_with(&simple_log(2));
    let w = send(&mut r, "m1");
    let p = posts(&r.pump());
    r.changes();
    accept(&mut r, p[0].0, "turn_9");
    assert_eq!(
        done(&mut r),
        vec![WriteDone {
            id: w,
            result: Ok(WriteOutcome::Sent {
                turn_id: "turn_9".into()
            })
        }],
        "the Promise resolves on acceptance"
    );
    // Accepted, not yet committed: still shown, never sent again.
    assert_eq!(pending(&r), vec![("m1".to_owned(), PendingState::Sending)]);
    r.changes();
    r.send(&[user_msg(3, "m1", "text of m1")]);
    let changes = r.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].pending && changes[0].items_appended_from == Some(2));
    assert!(pending(&r).is_empty());
    let items = r.c.view().as_session().unwrap().items().len();
    assert_eq!(items, 3);
    for _ in 0..10 {
        r.advance(10_000);
    }
    assert_eq!(posts(&r.log).len(), 1, "sent once: {:?}", posts(&r.log));
}

#[test]
fn messages_go_out_in_order_one_at_a_time_and_transient_failures_never_drop_them() {
    let mut r = Rig::live_with(&simple_log(1));
    let w1 = send(&mut r, "m1");
    send(&mut r, "m2");
    send(&mut r, "m3");
    let mut sent = posts(&r.pump());
    assert_eq!(sent.len(), 1, "one in flight: {sent:?}");
    // Far more failures than a plain write's attempts: still queued.
    for i in 0..20 {
        let (id, mid) = sent[0].clone();
        assert_eq!(mid, "m1");
        match i % 4 {
            0 => r.c.handle_network_error(id, "reset", r.now),
            1 => r.c.handle_http_error(id, 503, None, b"", r.now),
            2 => r.c.handle_http_error(id, 429, Some("1"), b"", r.now),
            _ => {
                r.c.handle_request_failed(id, CoreError::Timeout { after_ms: 1 }, r.now)
            }
        }
        assert!(posts(&r.pump()).is_empty(), "not at once, not the next one");
        assert!(done(&mut r).is_empty(), "the Promise does not reject");
        assert_eq!(pending(&r)[0], ("m1".to_owned(), PendingState::Queued));
        sent = until_post(&mut r);
        assert_eq!(sent.len(), 1);
    }
    let mut order = Vec::new();
    for turn in ["t1", "t2", "t3"] {
        let (id, mid) = sent[0].clone();
        order.push(mid);
        accept(&mut r, id, turn);
        sent = posts(&r.pump());
    }
    assert_eq!(order, vec!["m1", "m2", "m3"]);
    assert_eq!(done(&mut r)[0].id, w1);
}

#[test]
fn offline_keeps_messages_queued_until_online() {
    let mut r = Rig::live_with(&simple_log(1));
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    r.pump();
    send(&mut r, "m1");
    assert!(posts(&r.pump()).is_empty());
    assert_eq!(pending(&r), vec![("m1".to_owned(), PendingState::Queued)]);
    r.advance(600_000);
    assert!(posts(&r.pump()).is_empty(), "nothing while offline");
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    let sent = posts(&r.pump());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1, "m1");
}

#[test]
fn a_4xx_fails_the_message_with_the_servers_code_until_it_is_retried() {
    let mut r = Rig::live_with(&simple_log(1));
    let w = send(&mut r, "m1");
    send(&mut r, "m2");
    let sent = posts(&r.pump());
    let body = error_body_with("directive_limit", "too much");
    r.c.handle_http_error(sent[0].0, 400, None, &body, r.now);
    let out = done(&mut r);
    assert_eq!(out[0].id, w);
    assert_eq!(out[0].result.clone().unwrap_err().code(), "directive_limit");
    let shown = r.c.pending_messages();
    assert_eq!(shown[0].state, PendingState::Failed);
    assert_eq!(shown[0].error.as_ref().unwrap().code, "directive_limit");
    assert_eq!(shown[0].error.as_ref().unwrap().status, Some(400));
    // The next message is not held behind a failed one.
    let next = posts(&r.pump());
    assert_eq!(next[0].1, "m2");
    accept(&mut r, next[0].0, "t2");
    r.pump();
    done(&mut r);
    let retry = r.c.retry_pending("m1", r.now).expect("pending");
    let again = posts(&r.pump());
    assert_eq!(again[0].1, "m1");
    accept(&mut r, again[0].0, "t1");
    assert_eq!(
        done(&mut r),
        vec![WriteDone {
            id: retry,
            result: Ok(WriteOutcome::Sent {
                turn_id: "t1".into()
            })
        }]
    );
    assert!(r.c.retry_pending("nope", r.now).is_none());
}

#[test]
fn a_discarded_message_is_never_sent() {
    let mut r = Rig::live_with(&simple_log(1));
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    let w = send(&mut r, "m1");
    r.pump();
    r.changes();
    assert!(r.c.discard_pending("m1", r.now));
    assert!(r.changes().iter().any(|c| c.pending));
    assert!(pending(&r).is_empty());
    assert_eq!(done(&mut r)[0].id, w);
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    r.advance(60_000);
    assert!(posts(&r.log).is_empty(), "{:?}", r.log);
    assert!(!r.c.discard_pending("m1", r.now));
}

#[test]
fn a_message_older_than_the_bound_fails_expired_and_is_never_sent() {
    let mut cfg = Config::session(SES);
    cfg.outbox_max_age_ms = 60_000;
    let mut r = Rig::with(cfg, None);
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    let w = send(&mut r, "m1");
    r.pump();
    r.run_timers_until(|r| r.now >= 60_000);
    let shown = r.c.pending_messages();
    assert_eq!(shown[0].state, PendingState::Failed);
    assert_eq!(shown[0].error.as_ref().unwrap().code, "expired");
    let out = done(&mut r);
    assert_eq!(out[0].id, w);
    assert_eq!(
        out[0].result,
        Err(CoreError::Expired { max_age_ms: 60_000 })
    );
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    r.advance(10_000);
    assert!(posts(&r.log).is_empty());
}

#[test]
fn whoever_restores_the_scope_sends_what_is_queued_and_drops_what_is_committed() {
    let mut r = Rig::live_with(&simple_log(1));
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    send(&mut r, "m1");
    send(&mut r, "m2");
    r.pump();
    let stored = r.c.persisted_value();
    // The next client of the scope (a reload, another tab) shows and sends them.
    let next = Rig::with(Config::session(SES), Some(&stored));
    assert_eq!(
        pending(&next),
        vec![
            ("m1".to_owned(), PendingState::Sending),
            ("m2".to_owned(), PendingState::Queued)
        ]
    );
    let sent = posts(&next.log);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1, "m1");
    // A stored state that holds a message's commit drops it from the outbox.
    let mut r = Rig::live_with(&simple_log(1));
    send(&mut r, "m1");
    let p = posts(&r.pump());
    accept(&mut r, p[0].0, "t1");
    r.send(&[user_msg(2, "m1", "text of m1")]);
    let stored = r.c.persisted_value();
    let text = String::from_utf8_lossy(&stored).into_owned();
    assert!(text.contains(r#""outbox":[]"#), "{text}");
    let next = Rig::with(Config::session(SES), Some(&stored));
    assert!(pending(&next).is_empty());
    drop(next);
}

#[test]
fn a_send_during_a_restore_is_shown_and_a_commit_it_folds_leaves_with_its_repaint() {
    let log = simple_log(2);
    let stored = Rig::live_with(&log).c.persisted_value();
    let mut r = Rig::with(Config::session(SES), Some(&stored));
    assert!(r.c.is_restoring());
    send(&mut r, "m1");
    let p = posts(&r.pump());
    let changes = r.changes();
    assert_eq!(changes.len(), 1, "shown although the restore is withheld");
    assert!(changes[0].pending && changes[0].items_appended_from.is_none());
    accept(&mut r, p[0].0, "t1");
    r.pump();
    r.changes();
    // The backlog holds its commit: shown pending until the restore paints it.
    r.open_ok();
    r.send(&[hello(EPOCH, 4, BOOT)]);
    let mut history = log.clone();
    history.push(user_msg(3, "m1", "text of m1"));
    history.push(user_msg(4, "m2", "someone else's"));
    let first = replay_page(EPOCH, BOOT, 2, &history[2..3], 4, true, None, None);
    r.answer(&first);
    assert!(r.c.is_restoring());
    // Its item is folded, not painted: the message is still shown pending.
    assert!(r.changes().iter().all(|c| !c.pending));
    assert_eq!(pending(&r), vec![("m1".to_owned(), PendingState::Sending)]);
    let last = replay_page(EPOCH, BOOT, 3, &history[3..], 4, false, None, None);
    r.answer(&last);
    let changes = r.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].restore_completed && changes[0].pending);
    assert!(pending(&r).is_empty());
}

#[test]
fn no_second_request_while_one_is_in_flight_and_close_keeps_the_message_stored() {
    let mut r = Rig::live_with(&simple_log(1));
    let w = send(&mut r, "m1");
    let again = send(&mut r, "m1");
    let sent = posts(&r.pump());
    assert_eq!(sent.len(), 1, "one message, one request");
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    r.c.handle_lifecycle(Lifecycle::Visible, r.now);
    r.advance(1_000);
    assert_eq!(posts(&r.log).len(), 1, "a kick does not send twice");
    r.c.close(r.now);
    let actions = r.pump();
    assert!(actions.contains(&Action::Abort { id: sent[0].0 }));
    let out = done(&mut r);
    assert_eq!(out.iter().map(|d| d.id).collect::<Vec<_>>(), vec![w, again]);
    let stored = r.c.persisted_value();
    let next = Rig::with(Config::session(SES), Some(&stored));
    assert_eq!(pending(&next).len(), 1, "sent by the next client");
}

#[test]
fn a_repeat_of_a_committed_message_resolves_and_leaves_pending() {
    let mut r = Rig::live_with(&simple_log(1));
    send(&mut r, "m1");
    let p = posts(&r.pump());
    accept(&mut r, p[0].0, "t1");
    r.send(&[user_msg(2, "m1", "text of m1")]);
    assert!(pending(&r).is_empty());
    done(&mut r);
    // The same message_id again: the runtime answers with the same turn.
    let again = send(&mut r, "m1");
    let p = posts(&r.pump());
    accept(&mut r, p[0].0, "t1");
    r.pump();
    assert_eq!(done(&mut r)[0].id, again);
    assert!(pending(&r).is_empty(), "no second commit will come");
}

#[test]
fn a_failed_client_still_sends_for_the_runtime_to_answer() {
    let mut r = Rig::new();
    r.open_ok();
    r.http_error(true, 404, None, &error_body("not_found"));
    let w = send(&mut r, "m1");
    let p = posts(&r.pump());
    assert_eq!(p.len(), 1, "sent although the client failed");
    r.c.handle_http_error(p[0].0, 404, None, &error_body("not_found"), r.now);
    assert_eq!(done(&mut r)[0].id, w);
}

#[test]
fn an_accepted_message_is_sent_again_when_the_log_is_recreated() {
    let mut r = Rig::live_with(&simple_log(1));
    send(&mut r, "m1");
    let p = posts(&r.pump());
    accept(&mut r, p[0].0, "t1");
    r.pump();
    // The stream reconnects to a recreated log: another epoch.
    r.c.handle_stream_end(r.stream_id(), r.now);
    r.until_reconnect();
    r.open_ok();
    r.send(&[hello("e2", 0, BOOT)]);
    let again = until_post(&mut r);
    assert_eq!(again[0].1, "m1", "its commit is not in the new log");
}

/// The claims named by the `Post`s and `Release`s among `actions`.
fn claims(actions: &[Action]) -> (Vec<String>, Vec<String>) {
    let taken = (actions.iter())
        .filter_map(|a| match a {
            Action::Post { claim, .. } => claim.clone(),
            _ => None,
        })
        .collect();
    let released = (actions.iter())
        .filter_map(|a| match a {
            Action::Release { claim } => Some(claim.clone()),
            _ => None,
        })
        .collect();
    (taken, released)
}

#[test]
fn a_message_held_by_another_client_waits_queued_and_its_claim_is_let_go_when_it_leaves() {
    let mut r = Rig::live_with(&simple_log(1));
    send(&mut r, "m1");
    send(&mut r, "m2");
    let actions = r.pump();
    let (taken, _) = claims(&actions);
    assert_eq!(taken, vec!["replay-client:message:m1".to_owned()]);
    // Another client holds m1's claim (it restored the same message and is
    // sending it): nothing went out here; m1 waits, and m2 behind it.
    let p = posts(&actions);
    r.c.handle_request_failed(p[0].0, CoreError::Claimed, r.now);
    assert_eq!(
        pending(&r),
        vec![
            ("m1".to_owned(), PendingState::Queued),
            ("m2".to_owned(), PendingState::Queued)
        ]
    );
    assert!(done(&mut r).is_empty(), "the send's Promise still waits");
    // Not asked again at once: the other client's commit may come first.
    assert!(posts(&r.pump()).is_empty());
    let again = until_post(&mut r);
    assert_eq!(again[0].1, "m1", "asked again later");
    assert!(r.now > 0);
    // Got this time: sent, accepted, committed; the claim is let go with it.
    accept(&mut r, again[0].0, "t1");
    let actions = r.pump();
    let (taken, released) = claims(&actions);
    assert!(released.is_empty(), "held until its commit: {released:?}");
    assert_eq!(taken, vec!["replay-client:message:m2".to_owned()]);
    let m2 = posts(&actions)[0].0;
    let from = r.log.len();
    r.send(&[user_msg(2, "m1", "text of m1")]);
    let (_, released) = claims(&r.log[from..]);
    assert_eq!(released, vec!["replay-client:message:m1".to_owned()]);
    // A failed (or discarded) message lets go of its claim too.
    r.c.handle_http_error(m2, 400, None, br#"{"error":"invalid_message"}"#, r.now);
    let (_, released) = claims(&r.pump());
    assert_eq!(released, vec!["replay-client:message:m2".to_owned()]);
}

/// Asserts that `actions` let go of message `id`'s claim, and only after a
/// save that lists `id` as gone.
fn assert_let_go_after_gone(actions: &[Action], id: &str) {
    let claim = format!("replay-client:message:{id}");
    let release =
        (actions.iter()).position(|a| matches!(a, Action::Release { claim: c } if *c == claim));
    let gone = format!(r#""gone":["{id}"]"#);
    let gone_other = format!(r#","{id}"]"#);
    let saved = release.is_some_and(|at| {
        actions[..at].iter().any(|a| {
            matches!(a, Action::Persist(v) if {
                let v = String::from_utf8_lossy(v);
                v.contains(&gone) || v.contains(&gone_other)
            })
        })
    });
    assert!(release.is_some(), "{id} let go: {actions:?}");
    assert!(
        saved,
        "{id} let go after the save that lists it gone: {actions:?}"
    );
}

#[test]
fn a_claim_is_let_go_only_after_the_save_that_lists_its_message_as_gone() {
    // A client that gets the claim next (a tab that restored the message)
    // reads the stored value after this save: it finds the message gone.
    let mut r = Rig::live_with(&simple_log(1));
    send(&mut r, "m1");
    send(&mut r, "m2");
    let p = posts(&r.pump());
    accept(&mut r, p[0].0, "t1");
    let p = posts(&r.pump());
    assert_eq!(p[0].1, "m2");
    let from = r.log.len();
    // Committed with another message still in the outbox.
    r.send(&[user_msg(2, "m1", "text of m1")]);
    assert_let_go_after_gone(&r.log[from..], "m1");
    // Committed as the outbox empties, within the persist throttle.
    accept(&mut r, p[0].0, "t2");
    r.pump();
    let from = r.log.len();
    r.send(&[user_msg(3, "m2", "text of m2")]);
    assert_let_go_after_gone(&r.log[from..], "m2");
    // A discarded message too.
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    send(&mut r, "m3");
    r.pump();
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    assert_eq!(posts(&r.pump())[0].1, "m3");
    let from = r.log.len();
    assert!(r.c.discard_pending("m3", r.now));
    r.pump();
    assert_let_go_after_gone(&r.log[from..], "m3");
}

/// A client that restored `stored` (a reload while the runtime was down):
/// its first attempt at the message found the claim held by another client.
fn restored_and_claimed_elsewhere(stored: &[u8]) -> Rig {
    let mut b = Rig::with(Config::session(SES), Some(stored));
    let first = posts(&b.log);
    assert_eq!(first.len(), 1, "sent at once after the restore: {first:?}");
    b.c.handle_request_failed(first[0].0, CoreError::Claimed, b.now);
    b.pump();
    assert_eq!(pending(&b), vec![("m1".to_owned(), PendingState::Queued)]);
    b
}

/// The POSTs `b` made once `steps` steps of `ms` passed.
fn posts_after(b: &mut Rig, steps: u32, ms: u64) -> Vec<(RequestId, String)> {
    for _ in 0..steps {
        b.advance(ms);
    }
    posts(&b.log)
}

/// The first client's message `m1`, stored while the runtime was down.
fn stored_with_m1() -> Vec<u8> {
    let mut a = Rig::live_with(&simple_log(1));
    a.c.handle_lifecycle(Lifecycle::Offline, a.now);
    send(&mut a, "m1");
    a.pump();
    a.c.persisted_value()
}

/// Brings a restoring rig live at `history` (its stream's `hello` and the
/// restore's page).
fn caught_up_at(b: &mut Rig, history: &[replay_client::core::protocol::Envelope]) {
    let head = history.len() as u64;
    if b.stream.is_none() {
        b.until_reconnect();
    }
    b.run_timers_until(|r| r.fetch.is_some());
    b.open_ok();
    b.send(&[hello(EPOCH, head, BOOT)]);
    let after = 1;
    let page = replay_page(EPOCH, BOOT, after, &history[1..], head, false, None, None);
    b.answer(&page);
}

#[test]
fn a_message_whose_claim_another_client_holds_is_not_sent_again_before_this_view_caught_up() {
    let stored = stored_with_m1();
    let mut b = restored_and_claimed_elsewhere(&stored);
    // The runtime is back, this client's stream not yet: the other client
    // sends and commits it, and lets its claim go. Whatever time passes, it
    // is not asked for here until this view caught up.
    let sent = posts_after(&mut b, 120, 500);
    assert_eq!(sent.len(), 1, "asked again before catching up: {sent:?}");
    // Caught up: the other client's commit is in this view, and the
    // message leaves without a request.
    let mut history = simple_log(1);
    history.push(user_msg(2, "m1", "text of m1"));
    caught_up_at(&mut b, &history);
    assert!(pending(&b).is_empty(), "{:?}", pending(&b));
    let sent = posts_after(&mut b, 60, 1_000);
    assert_eq!(sent.len(), 1, "sent once, by the other client: {sent:?}");
}

#[test]
fn a_message_whose_claim_was_held_is_sent_once_caught_up_when_the_other_client_ended_without_it() {
    let stored = stored_with_m1();
    let mut b = restored_and_claimed_elsewhere(&stored);
    // The other client ended (a tab closed) without sending it: this one
    // catches up, finds no commit, and sends it.
    assert_eq!(
        posts_after(&mut b, 20, 500).len(),
        1,
        "asked again before catching up"
    );
    caught_up_at(&mut b, &simple_log(1));
    let sent = posts(&b.log);
    assert_eq!(sent.len(), 2, "sent once caught up: {sent:?}");
    accept(&mut b, sent[1].0, "t1");
    b.send(&[user_msg(2, "m1", "text of m1")]);
    assert!(pending(&b).is_empty());
    b.advance(60_000);
    assert_eq!(
        posts(&b.log).len(),
        2,
        "the claimed try, then one send: {:?}",
        posts(&b.log)
    );
}

#[test]
fn what_left_the_outbox_is_stored_as_gone_and_never_restored() {
    let mut r = Rig::live_with(&simple_log(1));
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    send(&mut r, "m1");
    send(&mut r, "m2");
    r.pump();
    // Another tab's value: both messages queued.
    let other = r.c.persisted_value();
    assert!(r.c.discard_pending("m1", r.now));
    r.pump();
    let mine = String::from_utf8(r.c.persisted_value()).unwrap();
    assert!(mine.contains(r#""gone":["m1"]"#), "{mine}");
    // This tab saves over the other's: m1 is not brought back.
    let other = String::from_utf8(other).unwrap();
    let merged = replay_client::core::machine::merge_stored(&mine, &other).unwrap();
    let next = Rig::with(Config::session(SES), Some(merged.as_bytes()));
    assert_eq!(
        pending(&next),
        vec![("m2".to_owned(), PendingState::Sending)]
    );
    // Nor by a tab that restores the other's value and then this one's gone.
    let next = Rig::with(Config::session(SES), Some(other.as_bytes()));
    let theirs = String::from_utf8(next.c.persisted_value()).unwrap();
    let merged = replay_client::core::machine::merge_stored(&theirs, &mine).unwrap();
    assert!(!merged.contains(r#""message_id":"m1""#), "{merged}");
    // A commit is kept as gone too.
    let mut r = Rig::live_with(&simple_log(1));
    send(&mut r, "m3");
    let p = posts(&r.pump());
    accept(&mut r, p[0].0, "t1");
    r.send(&[user_msg(2, "m3", "text of m3")]);
    let stored = String::from_utf8(r.c.persisted_value()).unwrap();
    assert!(stored.contains(r#""gone":["m3"]"#), "{stored}");
}

// --- Answers: the same outbox, keyed by question ------------------------

fn answer(r: &mut Rig, q: &str, text: &str) -> WriteId {
    let write = Write::Answer {
        question_id: q.into(),
        answer: text.into(),
    };
    r.c.handle_write(write, r.now)
}

/// The POSTs among `actions`: (request, path, body).
fn raw_posts(actions: &[Action]) -> Vec<(RequestId, String, String)> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::Post {
                id,
                path_and_query,
                body,
                ..
            } => Some((*id, path_and_query.clone(), body.clone())),
            _ => None,
        })
        .collect()
}

/// The answer the outbox holds for `q`: (text, state, error code).
fn answer_of(r: &Rig, q: &str) -> Option<(String, PendingState, Option<String>)> {
    let a = r.c.pending_answer(q)?;
    Some((a.text, a.state, a.error.map(|e| e.code)))
}

/// A live session whose turn `t1` asks `q1`.
fn asked() -> Rig {
    let mut log = simple_log(1);
    log.push(turn_started(2, "t1"));
    log.push(question_asked(3, "t1", "q1"));
    Rig::live_with(&log)
}

fn declined(seq: u64, q: &str) -> replay_client::core::protocol::Envelope {
    let data = serde_json::json!({"question_id": q, "reason": "cancelled"});
    durable(seq, ev("question.declined", data))
}

#[test]
fn an_answer_is_shown_on_its_question_and_stored_before_its_request() {
    let mut r = asked();
    answer(&mut r, "q1", "yes");
    let actions = r.pump();
    assert!(r.changes().iter().any(|c| c.pending), "painted at once");
    assert_eq!(
        answer_of(&r, "q1"),
        Some(("yes".into(), PendingState::Sending, None))
    );
    assert!(pending(&r).is_empty(), "not a message");
    let persist = (actions.iter())
        .position(|a| matches!(a, Action::Persist(v) if String::from_utf8_lossy(v).contains(r#""message_id":"q1","answer":true,"text":"yes""#)))
        .expect("the answer is stored with the state");
    let post = (actions.iter())
        .position(|a| matches!(a, Action::Post { .. }))
        .expect("and sent");
    assert!(persist < post, "stored before it is sent: {actions:?}");
    let p = raw_posts(&actions);
    assert_eq!(p[0].1, format!("/v1/sessions/{SES}/questions/q1/answer"));
    assert_eq!(p[0].2, r#"{"answer":"yes"}"#);
    let (taken, _) = claims(&actions);
    assert_eq!(taken, vec!["replay-client:answer:q1".to_owned()]);
}

#[test]
fn an_answer_is_retried_until_accepted_and_leaves_with_its_questions_end() {
    let mut r = asked();
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    let w = answer(&mut r, "q1", "yes");
    assert!(raw_posts(&r.pump()).is_empty(), "nothing while offline");
    assert_eq!(answer_of(&r, "q1").unwrap().1, PendingState::Queued);
    r.advance(600_000);
    r.c.handle_lifecycle(Lifecycle::Online, r.now);
    let mut sent = raw_posts(&r.pump());
    for i in 0..8 {
        let id = sent[0].0;
        match i % 2 {
            0 => r.c.handle_network_error(id, "reset", r.now),
            _ => r.c.handle_http_error(id, 503, None, b"", r.now),
        }
        assert!(done(&mut r).is_empty(), "the Promise does not reject");
        sent = until_raw_post(&mut r);
    }
    // A transport failure earlier: the runtime may have taken it, and says
    // so with `question_closed`: answered.
    let closed = br#"{"error":"question_closed","message":"not waiting"}"#;
    r.c.handle_http_error(sent[0].0, 409, None, closed, r.now);
    assert_answered(done(&mut r), w);
    assert_eq!(
        answer_of(&r, "q1").unwrap().1,
        PendingState::Sending,
        "until its end is shown"
    );
    r.changes();
    r.send(&[question_answered(4, "q1")]);
    let changes = r.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].pending && changes[0].prompts,
        "one view change: {changes:?}"
    );
    assert_eq!(answer_of(&r, "q1"), None);
    r.advance(60_000);
    assert!(done(&mut r).is_empty());
    let text = String::from_utf8(r.c.persisted_value()).unwrap();
    assert!(text.contains(r#""outbox":[]"#), "{text}");
}

#[test]
fn a_second_answer_waits_on_the_same_one_replaces_a_failed_one_and_is_refused_otherwise() {
    let mut r = asked();
    let first = answer(&mut r, "q1", "yes");
    let same = answer(&mut r, "q1", "yes");
    let other = answer(&mut r, "q1", "no");
    let sent = raw_posts(&r.pump());
    assert_eq!(sent.len(), 1, "one answer, one request: {sent:?}");
    let out = done(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].id, other);
    assert_eq!(out[0].result.clone().unwrap_err().code(), "answer_pending");
    // A 4xx fails it with the server's code: both writes reject.
    let body = error_body_with("invalid_answer", "not an option");
    r.c.handle_http_error(sent[0].0, 400, None, &body, r.now);
    let out = done(&mut r);
    assert_eq!(
        out.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![first, same]
    );
    assert_eq!(out[0].result.clone().unwrap_err().code(), "invalid_answer");
    assert_eq!(
        answer_of(&r, "q1"),
        Some((
            "yes".into(),
            PendingState::Failed,
            Some("invalid_answer".into())
        ))
    );
    // Another answer replaces the failed one.
    let again = answer(&mut r, "q1", "no");
    let sent = raw_posts(&r.pump());
    assert_eq!(sent[0].2, r#"{"answer":"no"}"#);
    r.c.handle_post_answer(sent[0].0, b"", r.now);
    assert_answered(done(&mut r), again);
}

#[test]
fn a_failed_answer_is_retried_or_discarded_by_its_question_id() {
    let mut r = asked();
    let w = answer(&mut r, "q1", "yes");
    let sent = raw_posts(&r.pump());
    let body = error_body_with("invalid_answer", "not now");
    r.c.handle_http_error(sent[0].0, 400, None, &body, r.now);
    assert_eq!(done(&mut r)[0].id, w);
    assert_eq!(
        answer_of(&r, "q1").unwrap().2.as_deref(),
        Some("invalid_answer")
    );
    // `retry` names it by its question: sent again, the same answer.
    let again =
        r.c.retry_pending("q1", r.now)
            .expect("a failed answer to q1");
    let sent = raw_posts(&r.pump());
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].1.ends_with("/questions/q1/answer"), "{sent:?}");
    assert_eq!(sent[0].2, r#"{"answer":"yes"}"#);
    assert_eq!(answer_of(&r, "q1").unwrap().1, PendingState::Sending);
    r.c.handle_post_answer(sent[0].0, b"", r.now);
    assert_answered(done(&mut r), again);
    // `discard` too: gone from its question, never sent again.
    let mut r = asked();
    answer(&mut r, "q1", "no");
    let sent = raw_posts(&r.pump());
    r.c.handle_http_error(sent[0].0, 400, None, &body, r.now);
    r.pump();
    assert!(r.c.discard_pending("q1", r.now));
    r.pump();
    assert_eq!(answer_of(&r, "q1"), None);
    assert!(r.changes().iter().any(|c| c.pending), "shown gone");
    assert!(!r.c.discard_pending("q1", r.now), "nothing left to discard");
    assert!(r.c.retry_pending("q1", r.now).is_none());
    r.advance(60_000);
    assert_eq!(
        raw_posts(&r.log).len(),
        1,
        "the refused try only: {:?}",
        raw_posts(&r.log)
    );
    let text = String::from_utf8(r.c.persisted_value()).unwrap();
    assert!(text.contains(r#""outbox":[]"#), "{text}");
}

#[test]
fn a_question_closed_before_its_answer_went_out_drops_it_unsent() {
    let mut r = asked();
    // Behind a message in flight: answers go out in order with messages.
    send(&mut r, "m1");
    let w = answer(&mut r, "q1", "yes");
    let sent = raw_posts(&r.pump());
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(answer_of(&r, "q1").unwrap().1, PendingState::Queued);
    r.send(&[declined(4, "q1")]);
    assert_eq!(answer_of(&r, "q1"), None);
    let out = done(&mut r);
    assert_eq!(out[0].id, w);
    assert_eq!(out[0].result, Err(CoreError::QuestionClosed));
    assert_eq!(CoreError::QuestionClosed.code(), "question_closed");
    accept(&mut r, sent[0].0, "t2");
    r.advance(60_000);
    assert_eq!(raw_posts(&r.log).len(), 1, "{:?}", r.log);
}

#[test]
fn whoever_restores_the_scope_sends_a_queued_answer_unless_its_question_ended() {
    let mut r = asked();
    r.c.handle_lifecycle(Lifecycle::Offline, r.now);
    answer(&mut r, "q1", "yes");
    send(&mut r, "m1");
    r.pump();
    let stored = r.c.persisted_value();
    let next = Rig::with(Config::session(SES), Some(&stored));
    assert_eq!(answer_of(&next, "q1").unwrap().0, "yes");
    let sent = raw_posts(&next.log);
    assert_eq!(sent.len(), 1, "one at a time, in order: {sent:?}");
    assert!(sent[0].1.ends_with("/questions/q1/answer"), "{sent:?}");
    // A stored state that holds the question's end drops it.
    let mut r = asked();
    send(&mut r, "m1");
    answer(&mut r, "q1", "yes");
    r.pump();
    r.send(&[question_answered(4, "q1")]);
    let stored = r.c.persisted_value();
    let next = Rig::with(Config::session(SES), Some(&stored));
    assert_eq!(answer_of(&next, "q1"), None);
    assert_eq!(pending(&next).len(), 1, "the message stays");
}

// --- Cancel: sent at once, never past the turn it names -----------------

fn cancel(r: &mut Rig, turn: Option<&str>) -> WriteId {
    let write = Write::Cancel {
        turn_id: turn.map(str::to_owned),
    };
    r.c.handle_write(write, r.now)
}

#[test]
fn a_cancel_is_not_retried_once_its_turn_ended_and_says_how_it_ended() {
    let mut r = asked();
    let w = cancel(&mut r, Some("t1"));
    let sent = raw_posts(&r.pump());
    assert_eq!(sent.len(), 1, "sent at once");
    assert!(!r.c.persisted_value().windows(6).any(|w| w == b"cancel"));
    r.c.handle_network_error(sent[0].0, "offline", r.now);
    assert!(done(&mut r).is_empty(), "retried while its turn is open");
    // The turn ends (cancelled elsewhere) before the retry: not sent again.
    r.send(&[
        declined(4, "q1"),
        durable(
            5,
            ev("turn.cancelled", serde_json::json!({"turn_id": "t1"})),
        ),
    ]);
    let out = done(&mut r);
    let stopped = WriteOutcome::Cancelled {
        turn_id: Some("t1".into()),
    };
    assert_eq!(
        out,
        vec![WriteDone {
            id: w,
            result: Ok(stopped)
        }]
    );
    r.advance(60_000);
    assert_eq!(raw_posts(&r.log).len(), 1, "{:?}", raw_posts(&r.log));
    // A turn that completed: the cancel stopped nothing.
    let mut r = asked();
    let w = cancel(&mut r, Some("t1"));
    let sent = raw_posts(&r.pump());
    r.c.handle_http_error(sent[0].0, 503, None, b"", r.now);
    r.send(&[declined(4, "q1"), turn_completed(5, "t1")]);
    let none = WriteOutcome::Cancelled { turn_id: None };
    assert_eq!(
        done(&mut r),
        vec![WriteDone {
            id: w,
            result: Ok(none)
        }]
    );
}

#[test]
fn a_cancel_that_names_no_turn_is_sent_once() {
    let mut r = Rig::live_with(&simple_log(1));
    let w = cancel(&mut r, None);
    let sent = raw_posts(&r.pump());
    assert_eq!(sent[0].2, "{}");
    r.c.handle_network_error(sent[0].0, "reset", r.now);
    let out = done(&mut r);
    assert_eq!(out[0].id, w);
    assert_eq!(out[0].result.clone().unwrap_err().code(), "network");
    r.advance(60_000);
    assert_eq!(
        raw_posts(&r.log).len(),
        1,
        "a retry could stop a later turn"
    );
}

#[test]
fn an_answer_whose_question_ends_while_it_is_in_flight_settles_with_its_reply() {
    // The runtime writes `question.answered` before it replies: the stream
    // may bring it first.
    let mut r = asked();
    let w = answer(&mut r, "q1", "yes");
    let sent = raw_posts(&r.pump());
    r.send(&[question_answered(4, "q1")]);
    assert!(done(&mut r).is_empty(), "its reply settles it");
    r.c.handle_post_answer(sent[0].0, b"", r.now);
    r.pump();
    assert_answered(done(&mut r), w);
    assert_eq!(answer_of(&r, "q1"), None);
    // Refused (another client's answer came first): the server's code.
    let mut r = asked();
    let w = answer(&mut r, "q1", "no");
    let sent = raw_posts(&r.pump());
    r.send(&[question_answered(4, "q1")]);
    let closed = br#"{"error":"question_closed","message":"not waiting"}"#;
    r.c.handle_http_error(sent[0].0, 409, None, closed, r.now);
    r.pump();
    let out = done(&mut r);
    assert_eq!(out[0].id, w);
    assert_eq!(out[0].result.clone().unwrap_err().code(), "question_closed");
    assert_eq!(answer_of(&r, "q1"), None);
}
