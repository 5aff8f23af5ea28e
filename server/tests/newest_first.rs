//! The newest page first (docs/protocol.md §4.1): `tail` starts a replay
//! page at a turn boundary, `before_cursor` pages back to the log's start,
//! and pages read while the log grows neither lose nor repeat an event.

mod cluster_support;
mod common;

use common::*;
use replay_core::fold::{SessionView, ViewChange};
use replay_core::protocol::{Envelope, ReplayPage, TranscriptItem};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn page(s: &Server, sid: &str, query: &str) -> ReplayPage {
    let (status, v) = s.get(&format!("/v1/sessions/{sid}/replay?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{query}: {v}");
    replay_core::json::from_slice(v.to_string().as_bytes()).unwrap()
}

fn seqs(p: &ReplayPage) -> Vec<u64> {
    p.history.iter().map(|e| e.seq.unwrap()).collect()
}

/// Appends one session event through the admin API.
async fn put(s: &Server, sid: &str, ty: &str, data: Value) {
    let body = json!({"scope": "session", "scope_id": sid, "type": ty, "data": data});
    let (status, v) = s.post("/v1/admin/events", body).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
}

fn user(t: &str) -> Value {
    json!({"message_id": format!("m_{t}"), "turn_id": t, "role": "user", "text": t})
}

fn turn(t: &str) -> Value {
    json!({"turn_id": t})
}

/// Seq 1 `session.created`, then turns A (a tool), B (a question, with C's
/// message accepted while it runs), C and D: 20 events.
async fn crafted(s: &Server) -> String {
    let sid = s.create_session().await;
    let tool = |t: &str, c: &str| json!({"turn_id": t, "call_id": c, "name": "x", "input": null});
    put(s, &sid, "message.committed", user("tA")).await; // 2
    put(
        s,
        &sid,
        "turn.started",
        json!({"turn_id": "tA", "input_message_id": "m_tA"}),
    )
    .await;
    put(s, &sid, "tool.started", tool("tA", "cA")).await; // 4
    let done = json!({"turn_id": "tA", "call_id": "cA", "status": "ok", "output": "o"});
    put(s, &sid, "tool.completed", done).await;
    let reply = json!({"message_id": "r_tA", "turn_id": "tA", "role": "assistant", "text": "r"});
    put(s, &sid, "message.committed", reply).await; // 6
    put(s, &sid, "turn.completed", turn("tA")).await; // 7
    put(s, &sid, "message.committed", user("tB")).await; // 8
    put(
        s,
        &sid,
        "turn.started",
        json!({"turn_id": "tB", "input_message_id": "m_tB"}),
    )
    .await;
    let ask = json!({"turn_id": "tB", "question_id": "qB", "prompt": "?", "options": []});
    put(s, &sid, "question.asked", ask).await; // 10
    put(s, &sid, "message.committed", user("tC")).await; // 11, queued
    let answer = json!({"question_id": "qB", "answer": "y"});
    put(s, &sid, "question.answered", answer).await; // 12
    put(s, &sid, "turn.completed", turn("tB")).await; // 13
    put(
        s,
        &sid,
        "turn.started",
        json!({"turn_id": "tC", "input_message_id": "m_tC"}),
    )
    .await;
    let reply = json!({"message_id": "r_tC", "turn_id": "tC", "role": "assistant", "text": "r"});
    put(s, &sid, "message.committed", reply).await; // 15
    put(
        s,
        &sid,
        "turn.failed",
        json!({"turn_id": "tC", "reason": "x"}),
    )
    .await; // 16
    put(s, &sid, "message.committed", user("tD")).await; // 17
    put(
        s,
        &sid,
        "turn.started",
        json!({"turn_id": "tD", "input_message_id": "m_tD"}),
    )
    .await;
    let reply = json!({"message_id": "r_tD", "turn_id": "tD", "role": "assistant", "text": "r"});
    put(s, &sid, "message.committed", reply).await; // 19
    put(s, &sid, "turn.cancelled", turn("tD")).await; // 20
    sid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_page_starts_at_a_turn_boundary() {
    boundaries(&server().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_read_while_the_log_grows_lose_and_repeat_nothing() {
    growing(&server().await).await;
}

/// The same on Postgres (the store's other backend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_too() {
    let Some(url) = cluster_support::fresh_db("newest_first").await else {
        return;
    };
    let s = server_with(|c| c.db = url).await;
    boundaries(&s).await;
    growing(&s).await;
}

async fn boundaries(s: &Server) {
    let sid = crafted(s).await;
    // The last turn alone is 4 events: the page after turn C's end.
    let p = page(s, &sid, "tail=1").await;
    assert_eq!((p.older_cursor, p.cursor, p.head), (Some(16), 20, 20));
    assert_eq!(seqs(&p), (17..=20).collect::<Vec<_>>());
    assert!(!p.has_more);
    assert!(p.tasks.is_some(), "the newest page carries the tasks");
    // Five events reach into turn C, whose message was accepted while
    // turn B ran: the page goes back to before B, never cutting either.
    let p = page(s, &sid, "tail=5").await;
    assert_eq!(p.older_cursor, Some(7));
    assert_eq!(seqs(&p), (8..=20).collect::<Vec<_>>());
    // Paged back: the page before 7 reaches the log's start.
    let p = page(s, &sid, "tail=1&before_cursor=7").await;
    assert_eq!((p.older_cursor, p.cursor), (Some(0), 7));
    assert_eq!(seqs(&p), (1..=7).collect::<Vec<_>>());
    assert!(p.live_turn.is_none() && p.tasks.is_none());
    // More than the log: all of it.
    let p = page(s, &sid, "tail=5000").await;
    assert_eq!(p.older_cursor, Some(0));
    assert_eq!(seqs(&p).len(), 20);
    // A runtime's reader without the extension sees no marker.
    let p = page(s, &sid, "after_cursor=0").await;
    assert_eq!(p.older_cursor, None);
    let (_, raw) = s
        .get(&format!("/v1/sessions/{sid}/replay?after_cursor=15"))
        .await;
    assert!(raw.get("older_cursor").is_none(), "{raw}");
    // The limit bounds the page; the rest is read forward.
    let p = page(s, &sid, "tail=5&limit=3").await;
    assert_eq!((p.older_cursor, p.cursor, p.has_more), (Some(7), 10, true));
    let p = page(s, &sid, "after_cursor=3&before_cursor=7&limit=2").await;
    assert_eq!((seqs(&p), p.has_more), (vec![4, 5], true));
    let p = page(s, &sid, "after_cursor=5&before_cursor=7").await;
    assert_eq!((seqs(&p), p.has_more), (vec![6, 7], false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tail_and_before_cursor_are_refused() {
    let s = server().await;
    let sid = crafted(&s).await;
    for (q, status, code) in [
        ("tail=x", StatusCode::BAD_REQUEST, "invalid_tail"),
        ("tail=-1", StatusCode::BAD_REQUEST, "invalid_tail"),
        (
            "tail=1&before_cursor=x",
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
        ),
        (
            "tail=1&before_cursor=21",
            StatusCode::CONFLICT,
            "cursor_ahead",
        ),
    ] {
        let (got, v) = s.get(&format!("/v1/sessions/{sid}/replay?{q}")).await;
        assert_eq!((got, v["error"].as_str()), (status, Some(code)), "{q}: {v}");
    }
}

/// Folds each page alone, oldest page first, as a client prepends them.
fn fold_pages(pages: &mut [Vec<Envelope>]) -> Vec<TranscriptItem> {
    let mut items = Vec::new();
    for events in pages.iter_mut().rev() {
        let mut view = SessionView::default();
        for e in events.iter_mut() {
            view.apply_durable(e, &mut ViewChange::default());
        }
        items.extend(view.items().iter().cloned());
    }
    items
}

async fn growing(s: &Server) {
    let sid = s.create_session().await;
    for i in 0..8 {
        let t = s.send(&sid, &format!("m{i}"), "/tool hi").await;
        s.wait_turn_end(&sid, &t).await;
    }
    // The newest page, newest first.
    let newest = page(s, &sid, "tail=10").await;
    let mut older = newest.older_cursor.expect("the extension");
    assert!(older > 0, "a boundary inside the log");
    let head = newest.cursor;
    let mut pages = vec![newest.history.clone()];
    // The log grows between pages: two more turns, one still running when
    // the older pages are read.
    let t = s.send(&sid, "m8", "/tool more").await;
    s.wait_turn_end(&sid, &t).await;
    s.send(&sid, "m9", "/tool /tool").await;
    while older > 0 {
        let p = page(s, &sid, &format!("tail=10&before_cursor={older}")).await;
        assert!(!p.has_more);
        assert_eq!(p.cursor, older, "the page ends where the newer began");
        let next = p.older_cursor.expect("the extension");
        assert!(next < older);
        assert_eq!(seqs(&p), (next + 1..=older).collect::<Vec<_>>());
        pages.push(p.history);
        older = next;
    }
    // The live follow from the newest page's head: what came meanwhile.
    let t = s.send(&sid, "m10", "plain").await;
    s.wait_turn_end(&sid, &t).await;
    let mut cursor = head;
    let mut after = Vec::new();
    loop {
        let p = page(s, &sid, &format!("after_cursor={cursor}")).await;
        after.extend(p.history);
        cursor = p.cursor;
        if !p.has_more {
            break;
        }
    }
    let all = s.events(&format!("sessions/{sid}")).await;
    let mut read: Vec<u64> = pages
        .iter()
        .rev()
        .flatten()
        .map(|e| e.seq.unwrap())
        .collect();
    read.extend(after.iter().map(|e| e.seq.unwrap()));
    let want: Vec<u64> = all.iter().map(|e| e.seq.unwrap()).collect();
    assert_eq!(read, want, "every event once, in order");
    // Folded page by page and put together: the server's own transcript.
    let mut newer = pages.remove(0);
    newer.extend(after);
    pages.insert(0, newer);
    assert_eq!(fold_pages(&mut pages), s.transcript(&sid).await.items);
}
