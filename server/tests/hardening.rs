//! Hardening of the server, over real HTTP: bounded directives,
//! JSON-only writes, the Host allow-list, loopback-only binding without a
//! token, the token from the environment or a file, stream caps, streams
//! whose peer reads nothing, the user's message durable before `202`, the
//! skip policy, validated admin event types and a bounded transcript.
//! Also: no secret in diagnostics, blank tokens refused, strict
//! bracketed `Host` values, a `limit` past u64 clamped.

mod cluster_support;
mod common;

use common::bin::binary_refuses;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::{Event, Role, REASON_WORKER_RESTART};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Opens a stream with a tiny receive buffer and then never reads from it:
/// the server's writes back up after a few KB.
async fn stuck_stream(base: &str, path: &str) -> tokio::net::TcpStream {
    let addr: SocketAddr = base.strip_prefix("http://").unwrap().parse().unwrap();
    common::unread_stream(addr, path, 4096).await
}

/// Appends `n` events of ~60 KB to a team log: far more than a stuck
/// reader's socket buffers hold.
async fn flood(s: &Server, team: &str, n: usize) {
    let text = "x".repeat(60_000);
    for _ in 0..n {
        let (st, v) = s
            .post(
                "/v1/admin/events",
                json!({"scope": "team", "scope_id": team, "type": "team.message",
                       "data": {"from": "a", "to": "b", "text": text}}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
}

async fn stream_status(s: &Server, path: &str) -> (StatusCode, reqwest::header::HeaderMap) {
    let sse = s.stream(path, None).await;
    (sse.status, sse.headers.clone())
}

/// Polls until a new stream on `path` is accepted; panics after `within`.
async fn accepted_within(s: &Server, path: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let (st, _) = stream_status(s, path).await;
        if st == StatusCode::OK {
            return start.elapsed();
        }
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            start.elapsed() < within,
            "the stuck stream still holds its slot after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the server holds no open stream.
async fn no_streams_within(s: &Server, within: Duration) {
    let start = Instant::now();
    while s.get("/v1/diagnostics/comms").await.1["streams"] != 0 {
        assert!(start.elapsed() < within, "streams still open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directives_and_total_work_are_bounded() {
    let s = server().await;
    let sid = s.create_session().await;
    let path = format!("/v1/sessions/{sid}/messages");
    let (st, v) = s
        .post(&path, json!({"message_id": "m1", "text": "/long 200000"}))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "directive_limit");
    assert!(v["message"].as_str().unwrap().contains("100000"), "{v}");
    let many = "/bg ".repeat(17);
    let (st, v) = s
        .post(&path, json!({"message_id": "m2", "text": many}))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "directive_limit");
    assert!(v["message"].as_str().unwrap().contains("16"), "{v}");
    // Nothing was written for the refused messages; a bounded one still runs.
    assert_eq!(s.events(&format!("sessions/{sid}")).await.len(), 1);
    let t = s.send(&sid, "m3", "/long 50 /tool").await;
    s.wait_turn_end(&sid, &t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_require_a_json_content_type() {
    let s = server().await;
    let post = |ct: Option<&'static str>, path: &'static str| {
        let mut req = s.http.post(s.url(path)).body(r#"{"title":"t"}"#);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        req.send()
    };
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let r = post(ct, "/v1/sessions").await.unwrap();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "unsupported_media_type");
    }
    let r = post(Some("application/json; charset=utf-8"), "/v1/sessions")
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // The admin API too (a no-cors page must not reach it).
    let r = s
        .http
        .post(s.url("/v1/admin/faults"))
        .body(r#"{"kind":"restart_worker"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

async fn with_host(s: &Server, host: &str) -> StatusCode {
    s.http
        .get(s.url("/v1/diagnostics"))
        .header("host", host)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_header_must_be_loopback_or_a_configured_origin() {
    let s = server_with(|c| c.allow_origins = vec!["http://app.example:8080".into()]).await;
    for ok in [
        "127.0.0.1:1",
        "localhost:8787",
        "localhost",
        "[::1]:9",
        "app.example:8080",
    ] {
        assert_eq!(with_host(&s, ok).await, StatusCode::OK, "{ok}");
    }
    for bad in [
        "evil.example",
        "evil.example:8787",
        "127.0.0.1.evil.example",
        "app.example.evil:1",
        "[::1]evil.example",
        "[::1]evil.example:9",
        "[::1]:9evil",
        "[::1]:",
        "[::1",
    ] {
        assert_eq!(with_host(&s, bad).await, StatusCode::FORBIDDEN, "{bad}");
    }
    // `*` allows any origin for CORS, never any Host.
    let any = server_with(|c| c.allow_origins = vec!["*".into()]).await;
    assert_eq!(with_host(&any, "evil.example").await, StatusCode::FORBIDDEN);
    assert_eq!(with_host(&any, "localhost:1").await, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_loopback_bind_needs_a_token() {
    let mut cfg = test_config();
    cfg.listen = "0.0.0.0:0".into();
    cfg.faults = false;
    let err = replay_server::start(cfg.clone())
        .await
        .err()
        .expect("refused without a token");
    assert!(err.to_string().contains("token"), "{err}");
    cfg.faults = true;
    assert!(replay_server::start(cfg.clone()).await.is_err());
    cfg.token = Some("secret".into());
    let running = replay_server::start(cfg).await.expect("with a token");
    running.shutdown().await;
}

/// The diagnostics endpoints, every one of them.
const DIAGNOSTICS: [&str; 4] = [
    "/v1/diagnostics",
    "/v1/diagnostics/recovery",
    "/v1/diagnostics/processes",
    "/v1/diagnostics/comms",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_never_show_a_secret() {
    const TOKEN: &str = "tok-3f9a-secret";
    const PASSWORD: &str = "pw-71c2-secret";
    let mut dbs = vec![":memory:".to_owned()];
    // The test Postgres trusts every login, so a password in the URL is
    // accepted and ignored: what matters is whether it is served.
    if let Some(url) = cluster_support::fresh_db("diag_secret").await {
        dbs.push(url.replacen("://replay@", &format!("://replay:{PASSWORD}@"), 1));
    }
    for db in dbs {
        let s = server_with(|c| {
            c.db = db.clone();
            c.token = Some(TOKEN.into());
        })
        .await;
        for path in DIAGNOSTICS {
            let r = s
                .http
                .get(s.url(path))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let text = r.text().await.unwrap();
            for secret in [TOKEN, PASSWORD] {
                assert!(!text.contains(secret), "{path} shows {secret}: {text}");
            }
            if path == "/v1/diagnostics" && db.starts_with("postgres") {
                let v: Value = serde_json::from_str(&text).unwrap();
                let shown = v["config"]["db"].as_str().unwrap();
                assert!(
                    shown.starts_with("postgres://replay:***@127.0.0.1:"),
                    "{shown}"
                );
            }
        }
        s.running.unwrap().shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_past_u64_is_clamped_like_any_large_limit() {
    let s = server().await;
    for n in 1..=3 {
        s.append("team", "t1", n).await;
    }
    for limit in ["5001", "99999999999999999999", "18446744073709551616"] {
        let (st, v) = s
            .get(&format!("/v1/teams/t1/events?after_seq=0&limit={limit}"))
            .await;
        assert_eq!(st, StatusCode::OK, "{limit}: {v}");
        assert_eq!(v["events"].as_array().unwrap().len(), 3, "{limit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_or_blank_token_is_refused_at_start() {
    for listen in ["0.0.0.0:0", "127.0.0.1:0"] {
        for (args, env) in [
            (vec!["--token", ""], vec![]),
            (vec!["--token", " "], vec![]),
            (vec!["--token", "\t \n"], vec![]),
            (vec![], vec![("REPLAY_TOKEN", "")]),
            (vec![], vec![("REPLAY_TOKEN", "  ")]),
        ] {
            let args: Vec<&str> = ["--listen", listen].into_iter().chain(args).collect();
            let err = binary_refuses(&args, &env);
            assert!(err.contains("token"), "{args:?} {env:?}: {err}");
        }
    }
    for blank in ["", " ", "\t"] {
        let mut cfg = test_config();
        cfg.token = Some(blank.into());
        let err = replay_server::start(cfg).await.err().expect("refused");
        assert!(err.to_string().contains("token"), "{err}");
    }
}

/// A child server, killed on drop (also when a test panics).
struct ChildServer(Child);

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary with `args` and `env`; returns it and its base URL.
fn spawn_binary(args: &[&str], env: &[(&str, &str)]) -> (ChildServer, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replay-server"))
        .args(["--listen", "127.0.0.1:0", "--db", ":memory:"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replay-server");
    let base = common::listening_base(&mut child);
    (ChildServer(child), base)
}

async fn status_with_token(base: &str, token: Option<&str>) -> StatusCode {
    let mut req = reqwest::Client::new().get(format!("{base}/v1/diagnostics"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_from_environment_or_file() {
    let (child, base) = spawn_binary(&[], &[("REPLAY_TOKEN", "from-env")]);
    assert_eq!(
        status_with_token(&base, None).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status_with_token(&base, Some("from-en")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status_with_token(&base, Some("from-env")).await,
        StatusCode::OK
    );
    drop(child);

    let file = TempDb::new("token");
    std::fs::write(&file.0, "from-file\n").unwrap();
    let (child, base) = spawn_binary(&["--token-file", &file.0], &[]);
    assert_eq!(
        status_with_token(&base, None).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status_with_token(&base, Some("from-file")).await,
        StatusCode::OK
    );
    drop(child);
}

#[test]
fn help_lists_every_flag_and_its_environment_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_replay-server"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "listen",
        "db",
        "token",
        "token-file",
        "allow-origin",
        "allow-host",
        "static",
        "faults",
        "heartbeat-ms",
        "delta-ms",
        "ask-persist-ms",
        "bg-ms",
        "seed",
        "lag-policy",
        "subscriber-buffer",
        "max-streams",
        "max-streams-per-scope",
        "write-timeout-ms",
        "transcript-max-events",
        "max-stream-buffer-bytes",
        "socket-send-buffer-bytes",
    ] {
        assert!(
            help.contains(&format!("--{flag}")),
            "--{flag} missing:\n{help}"
        );
        let var = format!("REPLAY_{}", flag.replace('-', "_").to_uppercase());
        assert!(help.contains(&var), "{var} missing:\n{help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_is_synchronous_full() {
    let db = TempDb::new("sync");
    let s = server_with(|c| c.db = db.0.clone()).await;
    let (st, v) = s.get("/v1/diagnostics").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["store"]["synchronous"], "full", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_message_is_durable_before_202_and_survives_a_restart() {
    let db = TempDb::new("accept");
    let mut s = server_with(|c| c.db = db.0.clone()).await;
    let sid = s.create_session().await;
    // The first turn waits on a question, so the second stays queued.
    let t1 = s.send(&sid, "m1", "/ask").await;
    let t2 = s.send(&sid, "m2", "queued é🙂").await;
    let committed = |events: &[replay_core::protocol::Envelope]| {
        events.iter().any(|e| {
            matches!(&e.event, Event::MessageCommitted(m)
                if m.message_id == "m2" && m.turn_id == t2 && m.role == Role::User && m.text == "queued é🙂")
        })
    };
    let events = s.events(&format!("sessions/{sid}")).await;
    assert!(committed(&events), "not durable at 202: {events:?}");
    assert!(!events
        .iter()
        .any(|e| matches!(&e.event, Event::TurnStarted(t) if t.turn_id == t2)));

    // A crash-like restart before the turn starts loses nothing.
    s.running.take().unwrap().shutdown().await;
    let s = server_with(|c| c.db = db.0.clone()).await;
    let events = s.events(&format!("sessions/{sid}")).await;
    assert!(committed(&events));
    let failed = |t: &str| {
        events.iter().any(|e| {
            matches!(&e.event, Event::TurnFailed(f)
            if f.turn_id == t && f.reason == REASON_WORKER_RESTART)
        })
    };
    assert!(failed(&t1) && failed(&t2), "{events:?}");
    // A retry with the same message_id is the same accepted result.
    let path = format!("/v1/sessions/{sid}/messages");
    let (st, v) = s
        .post(&path, json!({"message_id": "m2", "text": "queued é🙂"}))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    assert_eq!(v["turn_id"], t2.as_str());
    let users = s
        .events(&format!("sessions/{sid}"))
        .await
        .into_iter()
        .filter(|e| matches!(&e.event, Event::MessageCommitted(m) if m.message_id == "m2"))
        .count();
    assert_eq!(users, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_policy_closes_a_stream_rather_than_drop_a_critical_transient() {
    let s = server_with(|c| {
        c.lag_policy = replay_server::LagPolicy::Skip;
        c.subscriber_buffer = 4;
    })
    .await;
    let sid = s.create_session().await;
    let mut sse = s.stream(&format!("/v1/sessions/{sid}/events"), None).await;
    sse.until(3 * SEC, |f| is_type(f, "tasks.snapshot"))
        .await
        .expect("snapshots");
    // The stream stops taking frames; a turn's deltas (critical) pile up.
    s.fault(json!({"kind": "stall"})).await;
    let t = s.send(&sid, "m1", "/long 300").await;
    s.wait_turn_end(&sid, &t).await;
    s.fault(json!({"kind": "clear"})).await;
    let frames = sse.collect_for(2 * SEC).await;
    assert!(
        sse.ended,
        "the stream went on after losing deltas: {} frames",
        frames.len()
    );
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    assert!(comms["lagged"].as_u64().unwrap() >= 1, "{comms}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_event_types_are_validated() {
    let s = server().await;
    for ty in [
        "team.message\nid: 99",
        "team.message\r\ndata: x",
        "Team.Message",
        "team message",
        "",
        &"a".repeat(65),
    ] {
        let (st, v) = s
            .post(
                "/v1/admin/events",
                json!({"scope": "team", "scope_id": "t", "type": ty, "data": {}}),
            )
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{ty:?}: {v}");
        assert_eq!(v["error"], "invalid_event");
    }
    let (st, _) = s
        .post(
            "/v1/admin/events",
            json!({"scope": "team", "scope_id": "t", "type": "x.custom_2", "data": {}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcript_is_bounded() {
    let s = server_with(|c| c.transcript_max_events = 4).await;
    let sid = s.create_session().await;
    let t = s.send(&sid, "m1", "hi").await;
    s.wait_turn_end(&sid, &t).await;
    let (st, v) = s.get(&format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(v["error"], "transcript_too_large");
    assert!(v["message"].as_str().unwrap().contains("at most 4"), "{v}");
    let small = s.create_session().await;
    let (st, _) = s.get(&format!("/v1/sessions/{small}/transcript")).await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_per_scope_and_per_process() {
    let s = server_with(|c| {
        c.max_streams = 3;
        c.max_streams_per_scope = 2;
    })
    .await;
    let a = s.create_session().await;
    let b = s.create_session().await;
    let pa = format!("/v1/sessions/{a}/events");
    let _s1 = s.stream(&pa, None).await;
    let _s2 = s.stream(&pa, None).await;
    let (st, h) = stream_status(&s, &pa).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    assert!(h.get("retry-after").is_some());
    let _s3 = s.stream(&format!("/v1/sessions/{b}/events"), None).await;
    assert_eq!(_s3.status, StatusCode::OK);
    let (st, h) = stream_status(&s, "/v1/events").await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    assert!(h.get("retry-after").is_some());
    // JSON pages are not streams.
    assert_eq!(s.get(&format!("{pa}?after_seq=0")).await.0, StatusCode::OK);
    drop(_s1);
    accepted_within(&s, &pa, 2 * SEC).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_peer_reads_nothing_ends_on_close_and_restart() {
    let s = server_with(|c| {
        c.max_streams_per_scope = 1;
        // Room for the whole flood: a stream cut for lag whose peer takes
        // nothing ends at once; this one must be held by its peer alone.
        c.subscriber_buffer = 1024;
        c.subscriber_buffer_bytes = 16 << 20;
        c.max_stream_buffer_bytes = 256 << 20;
    })
    .await;
    let path = "/v1/teams/t1/events";
    s.append("team", "t1", 0).await;
    for kind in ["close_streams", "restart_worker"] {
        no_streams_within(&s, SEC).await;
        let _stuck = stuck_stream(&s.base, path).await;
        flood(&s, "t1", 140).await;
        assert_eq!(
            stream_status(&s, path).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.fault(json!({ "kind": kind })).await;
        let took = accepted_within(&s, path, SEC).await;
        eprintln!("{kind}: slot free after {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_peer_reads_nothing_times_out() {
    let s = server_with(|c| {
        c.max_streams_per_scope = 1;
        // Room for the whole flood: the stream is never cut for lag (which
        // would end it at once), only for its peer reading nothing.
        c.subscriber_buffer = 1024;
        c.subscriber_buffer_bytes = 16 << 20;
        c.max_stream_buffer_bytes = 256 << 20;
        // Long enough for a slow machine to finish the flood before it.
        c.write_timeout_ms = 4000;
    })
    .await;
    let path = "/v1/teams/t1/events";
    s.append("team", "t1", 0).await;
    let _stuck = stuck_stream(&s.base, path).await;
    // In process, off the runtime: the flood is done well within the write
    // timeout, and the stream's socket is full long before its end.
    let app = std::sync::Arc::clone(s.running.as_ref().unwrap().app());
    tokio::task::spawn_blocking(move || {
        let text = "x".repeat(60_000);
        for _ in 0..100 {
            let event = Event::TeamMessage(replay_core::protocol::TeamMessage {
                from: "a".into(),
                to: "b".into(),
                text: text.clone(),
            });
            app.log
                .append(replay_core::protocol::Scope::Team, "t1", event)
                .unwrap();
        }
    })
    .await
    .unwrap();
    let flooded = Instant::now();
    assert_eq!(
        stream_status(&s, path).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let took = accepted_within(&s, path, 8 * SEC).await;
    eprintln!("slot free {:?} after the flood", flooded.elapsed());
    // Not before the write timeout (4 s, from the first write that stuck).
    assert!(took > Duration::from_millis(500), "{took:?}");
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_promptly_with_a_stuck_reader() {
    let (mut child, base) = spawn_binary(&["--faults", "--subscriber-buffer", "8"], &[]);
    let child = &mut child.0;
    let s = Server::remote(base.clone());
    s.append("team", "t1", 0).await;
    let _stuck = stuck_stream(&base, "/v1/teams/t1/events").await;
    flood(&s, "t1", 140).await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            assert!(code.success(), "{code:?}");
            break;
        }
        assert!(start.elapsed() < 3 * SEC, "no exit 3 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    eprintln!("exited {:?} after SIGTERM", start.elapsed());
}

/// The frames of a stream until it ends (or 5 s pass).
async fn frames_until_end(s: &Server, path: &str) -> (Vec<Frame>, bool) {
    let mut sse = s.stream(path, None).await;
    assert_eq!(sse.status, StatusCode::OK);
    let mut frames = Vec::new();
    let start = Instant::now();
    while start.elapsed() < 5 * SEC {
        match sse.next(5 * SEC).await {
            Some(f) => frames.push(f),
            None => break,
        }
    }
    (frames, sse.ended)
}

fn hello_epoch(f: &Frame) -> Option<String> {
    match f.env().map(|e| &e.event) {
        Some(Event::Hello(h)) => Some(h.epoch.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_faults_lie_to_one_session_as_documented() {
    let s = server().await;
    let (victim, bystander) = (s.create_session().await, s.create_session().await);
    let hostile = |shape: &str| json!({"kind": "hostile", "session": victim, "shape": shape});
    let stream = format!("/v1/sessions/{victim}/events");

    s.fault(hostile("hello_then_close")).await;
    let (frames, ended) = frames_until_end(&s, &stream).await;
    assert!(ended, "{frames:?}");
    assert!(matches!(frames[0], Frame::Retry(0)), "{frames:?}");
    assert!(hello_epoch(&frames[1]).is_some(), "{frames:?}");
    assert_eq!(frames.len(), 2, "{frames:?}");
    // Other sessions are served as usual.
    let mut other = s
        .stream(&format!("/v1/sessions/{bystander}/events"), None)
        .await;
    assert!(matches!(
        other.next(3 * SEC).await,
        Some(Frame::Retry(1000))
    ));

    s.fault(hostile("epoch_flip_after_restore")).await;
    let (frames, ended) = frames_until_end(&s, &stream).await;
    let epochs: Vec<String> = frames.iter().filter_map(hello_epoch).collect();
    assert!(ended, "{frames:?}");
    assert_eq!(epochs.len(), 2, "{frames:?}");
    assert_ne!(epochs[0], epochs[1]);

    s.fault(hostile("endless_history")).await;
    let (st, v) = s
        .get(&format!("/v1/sessions/{victim}/replay?after_cursor=1000"))
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        (v["head"].as_u64(), v["has_more"].as_bool()),
        (Some(3), Some(true))
    );
    let history = v["history"].as_array().unwrap();
    assert_eq!(history.len(), 500);
    assert_eq!(history[0]["seq"], 1001);

    s.fault(hostile("gzip_bomb_stream")).await;
    let mut bomb = s
        .http
        .get(s.url(&stream))
        .header("accept", "text/event-stream")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    // reqwest decompresses (and drops `Content-Encoding`): what it reads
    // is what a browser's `fetch` hands the client.
    assert_eq!(bomb.status(), StatusCode::OK);
    let (mut read, mut first) = (0, Vec::new());
    while read < 8 << 20 {
        let chunk = bomb.chunk().await.unwrap().expect("the bomb goes on");
        read += chunk.len();
        if first.len() < 16 {
            first.extend_from_slice(&chunk);
        }
    }
    assert!(first.starts_with(b"data: xxxxxxxxxx"), "{first:?}");
}
