//! Every fault kind of `POST /v1/admin/faults`, and both lag policies,
//! observed from a real client over loopback.

mod common;

use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::Event;
use replay_server::LagPolicy;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Opens a team stream after `after` and reads through `hello`.
async fn team_stream(s: &Server, id: &str, after: u64) -> Sse {
    let mut sse = s
        .stream(&format!("/v1/teams/{id}/events?after_seq={after}"), None)
        .await;
    assert_eq!(sse.status, StatusCode::OK);
    sse.until(SEC, |f| is_type(f, "hello"))
        .await
        .expect("hello");
    sse
}

fn durable(frames: &[Frame]) -> Vec<u64> {
    frames.iter().filter_map(Frame::seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_streams_ends_every_stream() {
    let s = server().await;
    s.append("team", "c", 0).await;
    let mut a = team_stream(&s, "c", 0).await;
    let mut b = s.stream("/v1/events", None).await;
    b.until(SEC, |f| is_type(f, "hello")).await.unwrap();
    s.fault(json!({"kind": "close_streams"})).await;
    a.collect_for(2 * SEC).await;
    b.collect_for(2 * SEC).await;
    assert!(a.ended && b.ended);
    // New streams work.
    let mut c = team_stream(&s, "c", 0).await;
    assert_eq!(
        c.until(SEC, |f| f.seq().is_some()).await.unwrap().seq(),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_after_bytes_cuts_mid_frame() {
    let s = server().await;
    s.append("team", "c", 0).await;
    let mut open = team_stream(&s, "c", 1).await;
    s.fault(json!({"kind": "cut_after_bytes", "bytes": 40, "count": 1}))
        .await;
    // A new stream: exactly 40 bytes, the hello frame left incomplete.
    let mut fresh = s.stream("/v1/teams/c/events?after_seq=0", None).await;
    let frames = fresh.collect_for(2 * SEC).await;
    assert!(fresh.ended);
    assert_eq!(fresh.bytes, 40);
    assert!(matches!(frames.as_slice(), [Frame::Retry(_)]), "{frames:?}");
    // The open stream is cut too, after 40 more bytes of its next frame.
    s.append("team", "c", 1).await;
    let before = open.bytes;
    let frames = open.collect_for(2 * SEC).await;
    assert!(open.ended);
    assert_eq!(open.bytes - before, 40);
    assert!(
        durable(&frames).is_empty(),
        "the cut frame is never dispatched"
    );
    // count = 1: the next new stream is whole.
    let mut next = team_stream(&s, "c", 0).await;
    assert_eq!(
        durable(&next.collect_for(Duration::from_millis(300)).await),
        vec![1, 2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_holds_frames_until_cleared() {
    let s = server().await;
    s.append("team", "st", 0).await;
    let mut sse = team_stream(&s, "st", 1).await;
    s.fault(json!({"kind": "stall"})).await;
    let (_, list) = s.get("/v1/admin/faults").await;
    assert_eq!(list["faults"][0]["kind"], "stall");
    for i in 0..3 {
        s.append("team", "st", i).await;
    }
    // Held by the server, not slow on the way: the events are committed
    // and the stream stays subscribed, yet its writer sends no byte, not
    // even a heartbeat (interval 300 ms), for five intervals.
    let sent = |c: &Value| (c["frames_sent"].clone(), c["bytes_sent"].clone());
    let (_, before) = s.get("/v1/diagnostics/comms").await;
    let held = sse.collect_for(Duration::from_millis(1500)).await;
    assert!(held.is_empty(), "{held:?}");
    assert!(!sse.ended);
    let (_, during) = s.get("/v1/diagnostics/comms").await;
    assert_eq!(sent(&during), sent(&before), "the stalled stream wrote");
    assert_eq!(during["subscribers"], 1, "{during}");
    let (_, page) = s.get("/v1/teams/st/events?after_seq=1").await;
    assert_eq!(page["events"].as_array().unwrap().len(), 3, "{page}");
    s.fault(json!({"kind": "clear"})).await;
    let (_, list) = s.get("/v1/admin/faults").await;
    assert_eq!(list["faults"], json!([]));
    // Released by the clear: all three at once, in order.
    let frames = sse.collect_for(Duration::from_millis(300)).await;
    assert_eq!(durable(&frames), vec![2, 3, 4]);
    // A timed stall expires on its own.
    s.fault(json!({"kind": "stall", "ms": 300})).await;
    let t0 = Instant::now();
    s.append("team", "st", 9).await;
    let f = sse.until(3 * SEC, |f| f.seq().is_some()).await.unwrap();
    assert_eq!(f.seq(), Some(5));
    assert!(t0.elapsed() >= Duration::from_millis(250));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_durable_leaves_a_gap_the_heartbeat_reveals() {
    let s = server().await;
    s.append("team", "sk", 0).await;
    let mut sse = team_stream(&s, "sk", 1).await;
    s.fault(json!({"kind": "skip_durable", "count": 1})).await;
    for i in 0..3 {
        s.append("team", "sk", i).await;
    }
    let frames = sse.collect_for(Duration::from_millis(700)).await;
    assert_eq!(durable(&frames), vec![3, 4], "seq 2 skipped, order kept");
    let beat = frames
        .iter()
        .find(|f| is_type(f, "heartbeat"))
        .expect("heartbeat");
    let Some(Event::Heartbeat(h)) = beat.env().map(|e| &e.event) else {
        unreachable!()
    };
    assert_eq!(h.head, 4);
    // Repair is possible: the page has the missing event.
    let (_, page) = s.get("/v1/teams/sk/events?after_seq=1&limit=1").await;
    assert_eq!(page["events"][0]["seq"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_repeats_a_durable_frame() {
    let s = server().await;
    let mut sse = s.stream("/v1/teams/d/events", None).await;
    assert_eq!(sse.status, StatusCode::NOT_FOUND, "unknown log");
    s.append("team", "d", 0).await;
    sse = team_stream(&s, "d", 1).await;
    s.fault(json!({"kind": "duplicate", "count": 1})).await;
    s.append("team", "d", 1).await;
    s.append("team", "d", 2).await;
    let frames = sse.collect_for(Duration::from_millis(400)).await;
    assert_eq!(durable(&frames), vec![2, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_requests_answers_with_the_given_status() {
    let s = server().await;
    let sid = s.create_session().await;
    s.fault(json!({"kind": "fail_requests", "route": "replay", "status": 503, "count": 2, "retry_after": 2}))
        .await;
    for _ in 0..2 {
        let r = s
            .http
            .get(s.url(&format!("/v1/sessions/{sid}/replay")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "2");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "injected_fault");
    }
    assert_eq!(
        s.get(&format!("/v1/sessions/{sid}/replay")).await.0,
        StatusCode::OK
    );

    s.fault(json!({"kind": "fail_requests", "route": "messages", "status": 429}))
        .await;
    let (st, _) = s
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"message_id": "m", "text": "x"}),
        )
        .await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    let (_, page) = s.get(&format!("/v1/sessions/{sid}/events")).await;
    assert_eq!(page["head"], 1, "the failed write wrote nothing");

    s.fault(json!({"kind": "fail_requests", "route": "stream", "status": 500}))
        .await;
    // A JSON page is not a stream: unaffected.
    assert_eq!(
        s.get(&format!("/v1/sessions/{sid}/events")).await.0,
        StatusCode::OK
    );
    let sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    assert_eq!(sse.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        s.stream(&format!("/v1/sessions/{sid}/events"), None)
            .await
            .status,
        StatusCode::OK
    );

    for (route, status, path) in [
        ("events", 400, format!("/v1/sessions/{sid}/events")),
        ("any", 401, "/v1/diagnostics".to_owned()),
        ("transcript", 500, format!("/v1/sessions/{sid}/transcript")),
    ] {
        s.fault(json!({"kind": "fail_requests", "route": route, "status": status}))
            .await;
        assert_eq!(s.get(&path).await.0.as_u16(), status, "{route}");
        assert_eq!(s.get(&path).await.0, StatusCode::OK, "{route} once only");
    }
    // Admin requests are never failed.
    s.fault(json!({"kind": "fail_requests", "route": "any", "status": 500, "count": 5}))
        .await;
    assert_eq!(s.get("/v1/admin/faults").await.0, StatusCode::OK);
    s.fault(json!({"kind": "clear"})).await;
    assert_eq!(s.get("/v1/diagnostics").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_slows_the_next_requests() {
    let s = server().await;
    let sid = s.create_session().await;
    s.fault(json!({"kind": "delay", "ms": 400, "route": "transcript"}))
        .await;
    let t0 = Instant::now();
    assert_eq!(
        s.get(&format!("/v1/sessions/{sid}/transcript")).await.0,
        StatusCode::OK
    );
    assert!(t0.elapsed() >= Duration::from_millis(400));
    let t0 = Instant::now();
    s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    assert!(t0.elapsed() < Duration::from_millis(400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_worker_runs_recovery_in_process() {
    let s = server().await;
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "/slow /long 400 /tool").await;
    s.wait_event(&format!("sessions/{sid}"), |e| {
        matches!(e.event, Event::TurnStarted(_))
    })
    .await;
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    let hello = sse.until(SEC, |f| is_type(f, "hello")).await.unwrap();
    let Some(Event::Hello(h1)) = hello.env().map(|e| e.event.clone()) else {
        unreachable!()
    };
    let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert!(r["live_turn"].is_object());
    let v = s.fault(json!({"kind": "restart_worker"})).await;
    let boot = v["boot_id"].as_str().unwrap().to_owned();
    assert_ne!(boot, h1.boot_id);
    sse.collect_for(2 * SEC).await;
    assert!(sse.ended, "streams end at a worker restart");
    let end = s.wait_turn_end(&sid, &turn).await;
    assert!(matches!(&end.event, Event::TurnFailed(f) if f.reason == "worker_restart"));
    let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert!(r["live_turn"].is_null());
    assert_eq!(r["boot_id"], boot.as_str());
    assert_eq!(r["epoch"], h1.epoch.as_str());
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    let hello = sse.until(SEC, |f| is_type(f, "hello")).await.unwrap();
    let Some(Event::Hello(h2)) = hello.env().map(|e| e.event.clone()) else {
        unreachable!()
    };
    assert_eq!(h2.boot_id, boot);
    let (_, rec) = s.get("/v1/diagnostics/recovery").await;
    assert_eq!(rec["boot_id"], boot.as_str());
    assert_eq!(rec["turns_failed"][0]["turn_id"], turn.as_str());
    // The old worker is really gone: nothing more is written for that turn.
    let head = r["head"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, r) = s.get(&format!("/v1/sessions/{sid}/replay")).await;
    assert_eq!(r["head"].as_u64().unwrap(), head);
}

async fn lagging(policy: LagPolicy) -> (Vec<u64>, bool, Value) {
    let s = server_with(|c| {
        c.subscriber_buffer = 4;
        c.lag_policy = policy;
    })
    .await;
    s.append("team", "lag", 0).await;
    let mut sse = team_stream(&s, "lag", 1).await;
    // A stall stops the stream's writer from draining its buffer.
    s.fault(json!({"kind": "stall"})).await;
    for i in 0..12 {
        s.append("team", "lag", i).await;
    }
    s.fault(json!({"kind": "clear"})).await;
    let mut frames = sse.collect_for(Duration::from_millis(500)).await;
    if !sse.ended {
        s.append("team", "lag", 99).await;
        frames.extend(sse.collect_for(Duration::from_millis(500)).await);
    }
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    (durable(&frames), sse.ended, comms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_subscriber_is_disconnected_or_skipped_never_reordered() {
    let (seqs, ended, comms) = lagging(LagPolicy::Disconnect).await;
    assert!(ended, "disconnected");
    assert_eq!(
        seqs,
        (2..2 + seqs.len() as u64).collect::<Vec<_>>(),
        "in order, then cut"
    );
    assert!(seqs.len() < 12);
    assert_eq!(comms["lagged"], 1);
    assert_eq!(comms["lag_policy"], "disconnect");

    let (seqs, ended, comms) = lagging(LagPolicy::Skip).await;
    assert!(!ended, "kept connected");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(*seqs.last().unwrap(), 14, "the newest event arrives");
    assert!(seqs.len() < 13, "some were skipped: {seqs:?}");
    assert!(comms["skipped_durable"].as_u64().unwrap() >= 1);
}
