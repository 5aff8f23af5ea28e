//! Helpers of the pipelined-paging tests: pages of a dense log cut as the
//! server would, and a server loop that answers the oldest page asked for.

#![allow(dead_code)]

use replay_client::core::machine::{Action, Notice, RequestId};
use replay_client::core::protocol::Envelope;

use super::events::*;
use super::rig::*;

/// The `limit` of every page in these tests.
pub const LIMIT: u32 = 10;

/// A session rig whose pages hold `LIMIT` events, `depth` pages ahead.
pub fn paging_rig(depth: u8) -> Rig {
    let mut cfg = forward();
    cfg.replay_page_limit = LIMIT;
    cfg.prefetch_depth = depth;
    Rig::with(cfg, None)
}

/// A rig in restore whose live-only stream said hello at `head`.
pub fn restoring_at_depth(head: u64, depth: u8) -> Rig {
    let mut r = paging_rig(depth);
    r.open_ok();
    r.send(&[hello(EPOCH, head, BOOT)]);
    r
}

/// The replay page path after `after`, of `LIMIT` events.
pub fn rp(after: u64) -> String {
    format!("/v1/sessions/ses_1/replay?after_cursor={after}&limit={LIMIT}")
}

/// The event page path after `after`, of `LIMIT` events.
pub fn events_path(after: u64) -> String {
    format!("/v1/sessions/ses_1/events?after_seq={after}&limit={LIMIT}")
}

/// The replay page `log[from..to]` of a server whose head is `log.len()`.
pub fn page(log: &[Envelope], from: usize, to: usize) -> Vec<u8> {
    replay_page(
        EPOCH,
        BOOT,
        from as u64,
        &log[from..to],
        log.len() as u64,
        to < log.len(),
        None,
        None,
    )
}

/// The page of `log` after `after`, as the server would cut it.
pub fn page_after(log: &[Envelope], after: u64) -> Vec<u8> {
    let from = after as usize;
    page(log, from, (from + LIMIT as usize).min(log.len()))
}

/// Every fetch path issued so far, in order.
pub fn fetches_issued(r: &Rig) -> Vec<String> {
    r.log
        .iter()
        .filter_map(|a| match a {
            Action::Fetch { path_and_query, .. } => Some(path_and_query.clone()),
            _ => None,
        })
        .collect()
}

/// Whether `actions` abort `id`.
pub fn aborted(actions: &[Action], id: RequestId) -> bool {
    actions.contains(&Action::Abort { id })
}

/// Answers the oldest fetch in flight from `log` until the restore is over,
/// checking that no more than the configured depth is ever ahead.
pub fn serve(r: &mut Rig, log: &[Envelope]) {
    let most = 1 + usize::from(r.c.config().prefetch_depth);
    for _ in 0..100 {
        let Some((_, _, path)) = r.fetch.clone() else {
            return;
        };
        assert!(r.fetches.len() <= most, "too far ahead: {:?}", r.fetches);
        let after = path
            .split("after_cursor=")
            .nth(1)
            .and_then(|q| q.split('&').next())
            .and_then(|n| n.parse().ok())
            .expect("a replay page");
        r.answer(&page_after(log, after));
    }
    panic!("the restore did not end");
}

/// Exactly one restore notice, from 0 to `to_cursor`.
pub fn restored_once(r: &Rig, to_cursor: u64) {
    let restored: Vec<_> = r
        .notices
        .iter()
        .filter(|n| matches!(n, Notice::Restored { .. }))
        .collect();
    assert_eq!(
        restored,
        [&Notice::Restored {
            from_cursor: 0,
            to_cursor
        }]
    );
}
