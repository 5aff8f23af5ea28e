//! Fair connection slots: one peer address cannot hold
//! every connection slot. Past its `--max-connections-per-address` a new
//! connection of that address is answered `503 too_many_connections` at
//! once; at the process's `--max-connections` an idle keep-alive
//! connection is closed to make room, and when none is idle the new one is
//! answered `503` instead of waiting unanswered in the kernel's queue.
//!
//! The binary on loopback, with raw sockets bound to other loopback
//! addresses (Linux routes all of 127.0.0.0/8 to `lo`).

mod common;

use common::bin::{connect_from, start_bin, Bin, Db};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The binary on an in-memory log with these environment variables.
fn start(env: &[(&str, &str)]) -> Bin {
    let mut all = vec![("REPLAY_HEARTBEAT_MS", "300")];
    all.extend_from_slice(env);
    start_bin(&[], Db::Memory, &all)
}

const SEC: Duration = Duration::from_secs(1);

const DIAG: &[u8] = b"GET /v1/diagnostics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const EVENTS: &[u8] =
    b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n";

/// Reads one response head (and a `Content-Length` body), or everything
/// until the peer closes; `None` when neither happens within `within`.
async fn read_response(sock: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let done = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + len {
                    return;
                }
            }
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    done.ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

/// Reads until an SSE stream has sent its head (the stream is open).
async fn read_stream_head(sock: &mut TcpStream) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(3 * SEC, async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream closed");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the stream answers");
    String::from_utf8_lossy(&got).into_owned()
}

/// A fresh connection from `from` asks for diagnostics; its answer (or
/// `None` after `within`) and how long it took.
async fn ask(from: &str, to: SocketAddr, within: Duration) -> (Option<String>, Duration) {
    ask_with(from, to, DIAG, within).await
}

/// A fresh connection from `from` sends `request`; as [`ask`].
async fn ask_with(
    from: &str,
    to: SocketAddr,
    request: &[u8],
    within: Duration,
) -> (Option<String>, Duration) {
    let t0 = Instant::now();
    let mut sock = connect_from(from, to).await;
    sock.write_all(request).await.unwrap();
    let answer = read_response(&mut sock, within).await;
    (answer, t0.elapsed())
}

/// `n` SSE streams from `from`, each answered `200 text/event-stream`:
/// connections serving a request.
async fn open_streams(from: &str, to: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    for _ in 0..n {
        let mut sock = connect_from(from, to).await;
        sock.write_all(EVENTS).await.unwrap();
        let head = read_stream_head(&mut sock).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
        streams.push(sock);
    }
    streams
}

/// A `503 too_many_connections` a client can act on: `Retry-After: 1`,
/// the error JSON, `Connection: close`.
fn assert_refused(answer: &str) {
    let head = answer.to_ascii_lowercase();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(head.contains("\r\nretry-after: 1\r\n"), "{answer}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{answer}"
    );
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(v["error"], "too_many_connections", "{answer}");
    assert!(v["message"].is_string(), "{answer}");
}

#[tokio::test]
async fn an_address_past_its_cap_is_refused_at_once_and_others_are_served() {
    let s = start(&[
        ("REPLAY_MAX_CONNECTIONS", "16"),
        ("REPLAY_MAX_CONNECTIONS_PER_ADDRESS", "4"),
    ]);
    // Four streams: connections serving a request (an idle one of its
    // own would make room).
    let held = open_streams("127.0.0.2", s.addr, 4).await;
    let (answer, took) = ask("127.0.0.2", s.addr, SEC).await;
    let answer = answer.expect("the fifth connection of 127.0.0.2 is answered within 1 s");
    eprintln!("127.0.0.2's fifth connection answered in {took:?}");
    assert_refused(&answer);
    let (answer, took) = ask("127.0.0.3", s.addr, SEC).await;
    let answer = answer.expect("127.0.0.3 is answered within 1 s");
    eprintln!("127.0.0.3 answered in {took:?}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains(r#""max_connections_per_address":4"#),
        "{answer}"
    );
    drop(held);
}

#[tokio::test]
async fn at_the_total_cap_an_idle_keep_alive_connection_makes_room() {
    let s = start(&[
        ("REPLAY_MAX_CONNECTIONS", "16"),
        ("REPLAY_MAX_CONNECTIONS_PER_ADDRESS", "16"),
    ]);
    let mut idle = Vec::new();
    for _ in 0..16 {
        let mut sock = connect_from("127.0.0.2", s.addr).await;
        sock.write_all(DIAG).await.unwrap();
        let answer = read_response(&mut sock, 3 * SEC).await.expect("answered");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        idle.push(sock);
    }
    let (answer, took) = ask("127.0.0.3", s.addr, SEC).await;
    let answer = answer.expect("a new connection is answered within 1 s at the total cap");
    eprintln!("127.0.0.3 answered in {took:?} with 16 idle connections open");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The oldest idle connection was closed for it.
    let mut first = idle.remove(0);
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(SEC, first.read(&mut buf))
        .await
        .expect("the oldest idle connection is closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
}

#[tokio::test]
async fn at_the_total_cap_with_nothing_idle_a_new_connection_gets_503() {
    let s = start(&[
        ("REPLAY_MAX_CONNECTIONS", "8"),
        ("REPLAY_MAX_CONNECTIONS_PER_ADDRESS", "8"),
    ]);
    let mut streams = open_streams("127.0.0.2", s.addr, 8).await;
    let (answer, took) = ask("127.0.0.3", s.addr, SEC).await;
    let answer = answer.expect("a new connection is answered within 1 s at the total cap");
    eprintln!("127.0.0.3 answered in {took:?} with 8 streams open");
    assert_refused(&answer);
    // Every stream is still open: none was closed for the newcomer.
    for sock in &mut streams {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(2 * SEC, sock.read(&mut buf))
            .await
            .expect("a heartbeat within 2 s")
            .unwrap();
        assert!(n > 0, "a stream was closed");
    }
    // Once a stream ends, its slot serves the next connection.
    drop(streams.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (answer, _) = ask("127.0.0.3", s.addr, SEC).await;
    assert!(answer.unwrap().starts_with("HTTP/1.1 200"));
}

/// A log's stream cap leaves room for a new address: at the cap, a stream
/// from an address with fewer streams on the log than the one with the
/// most ends that address's oldest stream and takes its place.
#[tokio::test]
async fn a_full_log_makes_room_for_an_address_with_fewer_streams() {
    let s = common::server_with(|c| c.max_streams_per_scope = 4).await;
    let sid = s.create_session().await;
    let addr: SocketAddr = s.base.strip_prefix("http://").unwrap().parse().unwrap();
    let req = format!(
        "GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Accept: text/event-stream\r\n\r\n"
    );
    let open = |from: &'static str| {
        let req = req.clone();
        async move {
            let mut sock = connect_from(from, addr).await;
            sock.write_all(req.as_bytes()).await.unwrap();
            let head = read_stream_head(&mut sock).await;
            (sock, head)
        }
    };
    let mut hog = Vec::new();
    for _ in 0..4 {
        let (sock, head) = open("127.0.0.2").await;
        assert!(head.contains("text/event-stream"), "{head}");
        hog.push(sock);
    }
    let (_victim, head) = open("127.0.0.3").await;
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"),
        "127.0.0.3 is refused while 127.0.0.2 holds the log's 4 streams: {head}"
    );
    // 127.0.0.2's oldest stream ended for it (its chunked body's last
    // chunk; the connection may stay open).
    let mut got = Vec::new();
    let ended = tokio::time::timeout(2 * SEC, async {
        let mut buf = [0u8; 4096];
        // A data chunk ends `\n\n\r\n` (an SSE event), never so.
        while !got.ends_with(b"0\r\n\r\n") {
            match hog[0].read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "127.0.0.2's oldest stream is still open: {}",
        String::from_utf8_lossy(&got)
    );
    // 127.0.0.2 holds 3 and 127.0.0.3 one: 127.0.0.2 gets no more.
    let (_, head) = open("127.0.0.2").await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
}

/// The `access-control-*` lines and the CORS `vary` line of a response
/// head (compression adds its own), lowercased and sorted.
fn cors_lines(answer: &str) -> Vec<String> {
    let head = &answer[..answer.find("\r\n\r\n").unwrap_or(answer.len())];
    let mut lines: Vec<String> = head
        .lines()
        .map(str::to_ascii_lowercase)
        .filter(|l| {
            l.starts_with("access-control-") || (l.starts_with("vary:") && l.contains("origin"))
        })
        .collect();
    lines.sort();
    lines
}

/// A `503 too_many_connections` is readable by a page on an allowed
/// origin: it carries the CORS headers the routes give the same request
/// (a preflight gets the routes' own preflight answer, since a browser
/// fails a preflight that is not `2xx`), and nothing CORS for a foreign
/// origin or `Host`.
#[tokio::test]
async fn a_refused_request_from_an_allowed_origin_carries_cors_headers() {
    const APP: &str = "http://app.example:5173";
    let s = start(&[
        ("REPLAY_MAX_CONNECTIONS", "4"),
        ("REPLAY_MAX_CONNECTIONS_PER_ADDRESS", "4"),
        ("REPLAY_ALLOW_ORIGIN", APP),
    ]);
    let get = |origin: &str, host: &str| {
        format!("GET /v1/diagnostics HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n\r\n")
    };
    let preflight = format!(
        "OPTIONS /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {APP}\r\n\
         Access-Control-Request-Method: POST\r\n\
         Access-Control-Request-Headers: content-type, authorization\r\n\r\n"
    );
    let send = |req: String| async move {
        let (answer, _) = ask_with("127.0.0.3", s.addr, req.as_bytes(), SEC).await;
        answer.expect("answered within 1 s")
    };
    // What the routes answer while there is room.
    let served_get = send(get(APP, "127.0.0.1")).await;
    assert!(served_get.starts_with("HTTP/1.1 200"), "{served_get}");
    let served_preflight = send(preflight.clone()).await;
    assert!(
        served_preflight.starts_with("HTTP/1.1 200"),
        "{served_preflight}"
    );

    let held = open_streams("127.0.0.2", s.addr, 4).await;
    let refused = send(get(APP, "127.0.0.1")).await;
    assert_refused(&refused);
    let lower = refused.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("\r\naccess-control-allow-origin: {APP}\r\n")),
        "no CORS on the refusal: {refused}"
    );
    assert_eq!(cors_lines(&refused), cors_lines(&served_get), "{refused}");

    let refused_preflight = send(preflight).await;
    assert!(
        refused_preflight.starts_with("HTTP/1.1 200"),
        "{refused_preflight}"
    );
    assert!(
        refused_preflight
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{refused_preflight}"
    );
    assert_eq!(
        cors_lines(&refused_preflight),
        cors_lines(&served_preflight),
        "{refused_preflight}"
    );

    for (req, what) in [
        (get("http://evil.example", "127.0.0.1"), "a foreign origin"),
        (get(APP, "evil.example"), "a foreign Host"),
    ] {
        let answer = send(req).await;
        assert_refused(&answer);
        assert!(
            !answer.to_ascii_lowercase().contains("access-control-"),
            "CORS headers for {what}: {answer}"
        );
    }
    drop(held);
}
