//! PROTOCOL.md §4.3 cursor rules, every row, on scoped and global streams,
//! plus the JSON page and replay variants (paging, limits, gzip).

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

/// A team log with `n` durable events.
async fn team(s: &Server, id: &str, n: u64) {
    for i in 0..n {
        s.append("team", id, i).await;
    }
}

/// Opens a stream and returns the seqs of its first `want` durable frames,
/// checking the frame order obligations on the way.
async fn durable_seqs(sse: &mut Sse, want: usize) -> (u64, Vec<u64>) {
    assert_eq!(sse.status, StatusCode::OK);
    assert_eq!(sse.headers["content-type"], "text/event-stream");
    assert_eq!(sse.headers["cache-control"], "no-cache");
    assert_eq!(sse.headers["x-accel-buffering"], "no");
    assert!(sse.headers.get("content-encoding").is_none());
    assert!(
        matches!(sse.next(SEC).await, Some(Frame::Retry(_))),
        "retry first"
    );
    let hello = sse.next(SEC).await.expect("hello");
    assert!(is_type(&hello, "hello"));
    let Frame::Event { id: None, env, .. } = &hello else {
        panic!("hello carries no id: {hello:?}")
    };
    let head = match &env.event {
        replay_core::protocol::Event::Hello(h) => h.head,
        other => panic!("{other:?}"),
    };
    let mut seqs = Vec::new();
    while seqs.len() < want {
        let f = sse.next(3 * SEC).await.expect("more frames");
        if let Frame::Event { id, env, .. } = &f {
            match env.seq {
                Some(seq) => {
                    assert_eq!(
                        id.as_deref(),
                        Some(seq.to_string().as_str()),
                        "durable id = seq"
                    );
                    seqs.push(seq);
                }
                None => assert!(id.is_none(), "transient frames carry no id"),
            }
        }
    }
    (head, seqs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_seq_wins_over_last_event_id() {
    let s = server().await;
    team(&s, "t1", 6).await;
    let mut sse = s.stream("/v1/teams/t1/events?after_seq=2", Some("4")).await;
    let (head, seqs) = durable_seqs(&mut sse, 4).await;
    assert_eq!(head, 6);
    assert_eq!(seqs, vec![3, 4, 5, 6]);
    // after_seq wins even when the header is malformed.
    let mut sse = s
        .stream("/v1/teams/t1/events?after_seq=5", Some("junk"))
        .await;
    assert_eq!(durable_seqs(&mut sse, 1).await.1, vec![6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_used_without_after_seq() {
    let s = server().await;
    team(&s, "t1", 5).await;
    let mut sse = s.stream("/v1/teams/t1/events", Some("3")).await;
    assert_eq!(durable_seqs(&mut sse, 2).await.1, vec![4, 5]);
    let mut sse = s.stream("/v1/teams/t1/events", Some("0")).await;
    assert_eq!(durable_seqs(&mut sse, 5).await.1, vec![1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cursor_means_live_only() {
    let s = server().await;
    team(&s, "t1", 3).await;
    let mut sse = s.stream("/v1/teams/t1/events", None).await;
    let writer = async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        s.append("team", "t1", 99).await;
    };
    let (reader, ()) = tokio::join!(durable_seqs(&mut sse, 1), writer);
    assert_eq!(
        reader,
        (3, vec![4]),
        "no backlog, first live event is head + 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_cursors_are_400_from_either_source() {
    let s = server().await;
    team(&s, "t1", 2).await;
    for q in ["abc", "-1", "1.0", "+1", "", "0x1"] {
        let sse = s
            .stream(&format!("/v1/teams/t1/events?after_seq={q}"), None)
            .await;
        assert_eq!(sse.status, StatusCode::BAD_REQUEST, "after_seq={q}");
        assert_eq!(sse.error_body.unwrap()["error"], "invalid_cursor");
        let sse = s.stream("/v1/teams/t1/events", Some(q)).await;
        assert_eq!(sse.status, StatusCode::BAD_REQUEST, "Last-Event-ID {q}");
        assert_eq!(sse.error_body.unwrap()["error"], "invalid_cursor");
    }
    let (st, v) = s.get("/v1/teams/t1/events?after_seq=x").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_cursor"))
    );
    let (st, v) = s.get("/v1/events?after_id=-3").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_cursor"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_above_head_is_409_with_epoch_and_head() {
    let s = server().await;
    team(&s, "t1", 2).await;
    let (_, page) = s.get("/v1/teams/t1/events").await;
    let epoch = page["epoch"].as_str().unwrap().to_owned();
    for sse in [
        s.stream("/v1/teams/t1/events?after_seq=3", None).await,
        s.stream("/v1/teams/t1/events", Some("7")).await,
        s.stream(
            "/v1/teams/t1/events?after_seq=99999999999999999999999",
            None,
        )
        .await,
    ] {
        assert_eq!(sse.status, StatusCode::CONFLICT);
        let body = sse.error_body.unwrap();
        assert_eq!(body["error"], "cursor_ahead");
        assert_eq!(body["epoch"], epoch.as_str());
        assert_eq!(body["head"], 2);
    }
    let (st, v) = s.get("/v1/teams/t1/events?after_seq=3").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("cursor_ahead"))
    );
    // The head itself is fine: an empty backlog.
    let mut sse = s.stream("/v1/teams/t1/events?after_seq=2", None).await;
    assert_eq!(sse.status, StatusCode::OK);
    assert!(sse.until(SEC, |f| is_type(f, "hello")).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_stream_sends_backlog_then_snapshots_then_live() {
    let s = server().await;
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "hello /long 20").await;
    s.wait_turn_end(&sid, &turn).await;
    let mut sse = s
        .stream(&format!("/v1/sessions/{sid}/events?after_seq=0"), None)
        .await;
    let frames = sse.collect_for(std::time::Duration::from_millis(500)).await;
    let types: Vec<String> = frames
        .iter()
        .map(|f| match f {
            Frame::Event { ty, .. } => ty.clone(),
            Frame::Retry(_) => "retry".into(),
        })
        .collect();
    let expect = [
        "retry",
        "hello",
        "session.created",
        // The user's message is committed when accepted, before its turn starts.
        "message.committed",
        "turn.started",
        "message.committed",
        "turn.completed",
        "live_turn.snapshot",
        "tasks.snapshot",
    ];
    assert_eq!(&types[..expect.len()], expect, "{types:?}");
    // Transient frames carry after_seq = head, durable ones none.
    for f in &frames {
        if let Some(env) = f.env() {
            assert_eq!(env.is_durable(), env.after_seq.is_none());
        }
    }
    // A second turn arrives live, after the snapshots.
    let turn2 = s.send(&sid, "m2", "again").await;
    let f = sse
        .until(3 * SEC, |f| is_type(f, "turn.started"))
        .await
        .expect("live turn.started");
    assert_eq!(f.seq(), Some(7));
    s.wait_turn_end(&sid, &turn2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_stream_uses_row_ids() {
    let s = server().await;
    team(&s, "g1", 2).await;
    let (_, page) = s.get("/v1/events?after_id=0").await;
    let events = page["events"].as_array().unwrap();
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let last = *ids.last().unwrap();
    let mut sse = s
        .stream(&format!("/v1/events?after_id={}", last - 1), None)
        .await;
    let f = sse.until(SEC, |f| f.seq().is_some()).await.unwrap();
    let Frame::Event { id, env, .. } = f else {
        unreachable!()
    };
    assert_eq!(id, Some(last.to_string()));
    assert_eq!(env.id, Some(last));
    // Last-Event-ID on the global stream is a row id too.
    let mut sse = s.stream("/v1/events", Some(&(last - 1).to_string())).await;
    let f = sse.until(SEC, |f| f.seq().is_some()).await.unwrap();
    assert_eq!(f.env().unwrap().id, Some(last));
    let sse = s
        .stream(&format!("/v1/events?after_id={}", last + 5), None)
        .await;
    assert_eq!(sse.status, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_pages_and_replay_page_with_limits() {
    let s = server().await;
    team(&s, "p1", 12).await;
    let (st, v) = s.get("/v1/teams/p1/events?after_seq=0&limit=5").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["has_more"], true);
    assert_eq!(v["head"], 12);
    let seqs = |v: &Value| -> Vec<u64> {
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(seqs(&v), vec![1, 2, 3, 4, 5]);
    let (_, v) = s.get("/v1/teams/p1/events?after_seq=10&limit=5").await;
    assert_eq!(
        (seqs(&v), v["has_more"].as_bool()),
        (vec![11, 12], Some(false))
    );
    let (_, v) = s.get("/v1/teams/p1/events?after_seq=0&limit=0").await;
    assert_eq!(seqs(&v), vec![1], "limit is at least 1");
    let (st, v) = s.get("/v1/teams/p1/events?limit=lots").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_limit"))
    );

    // Replay pages through a session's history.
    let sid = s.create_session().await;
    let t = s.send(&sid, "m1", "hi").await;
    s.wait_turn_end(&sid, &t).await;
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let (st, v) = s
            .get(&format!(
                "/v1/sessions/{sid}/replay?after_cursor={cursor}&limit=2"
            ))
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        for e in v["history"].as_array().unwrap() {
            seen.push(e["seq"].as_u64().unwrap());
        }
        cursor = v["cursor"].as_u64().unwrap();
        if !v["has_more"].as_bool().unwrap() {
            assert_eq!(v["head"], cursor);
            assert!(v["live_turn"].is_null());
            assert!(v["tasks"]["version"].is_u64());
            assert!(v["boot_id"].as_str().unwrap().starts_with("b_"));
            break;
        }
    }
    assert_eq!(seen, (1..=cursor).collect::<Vec<_>>());
    let (st, v) = s
        .get(&format!(
            "/v1/sessions/{sid}/replay?after_cursor={}",
            cursor + 1
        ))
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("cursor_ahead"))
    );
    assert_eq!(v["head"], cursor);
    let (st, v) = s
        .get(&format!("/v1/sessions/{sid}/replay?after_cursor=-1"))
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_cursor"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_is_gzip_compressed_on_request() {
    let s = server().await;
    let sid = s.create_session().await;
    let t = s.send(&sid, "m1", "/long 1200").await;
    s.wait_turn_end(&sid, &t).await;
    // A client without gzip support to see the raw encoding.
    let raw = reqwest::Client::builder().no_gzip().build().unwrap();
    let r = raw
        .get(s.url(&format!("/v1/sessions/{sid}/replay")))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let zipped = r.bytes().await.unwrap().len();
    let (_, plain) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert!(zipped < plain.to_string().len());
    assert_eq!(plain["history"].as_array().unwrap().len(), 5);
}
