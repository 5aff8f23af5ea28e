//! Connections are bounded before any request is read:
//! a peer has `--header-timeout-ms` to send a request head (and an idle
//! keep-alive connection as long to start the next one), and at most
//! `--max-connections` are open at once; the next takes the slot of the
//! one idle the longest (rather than wait to be accepted; the
//! rest of the rule is in `fair_slots.rs`). Raw sockets on loopback
//! against the real server.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEC: Duration = Duration::from_secs(1);

async fn connect(s: &Server) -> TcpStream {
    let addr: SocketAddr = s.base.strip_prefix("http://").unwrap().parse().unwrap();
    TcpStream::connect(addr).await.unwrap()
}

/// Reads until the server closes the connection, or `None` after `within`.
async fn read_to_close(sock: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    closed
        .ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

const PARTIAL_HEAD: &str = "GET /v1/diagnostics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ";

#[tokio::test]
async fn a_partial_request_head_is_dropped_after_the_header_timeout() {
    let s = server_with(|c| c.header_timeout_ms = 300).await;
    let mut partial = connect(&s).await;
    partial.write_all(PARTIAL_HEAD.as_bytes()).await.unwrap();
    partial.write_all(&[b'a'; 30_000]).await.unwrap();
    let mut silent = connect(&s).await;
    assert!(
        read_to_close(&mut partial, 3 * SEC).await.is_some(),
        "a connection that never finishes its head stays open"
    );
    assert!(
        read_to_close(&mut silent, 3 * SEC).await.is_some(),
        "a connection that sends nothing stays open"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let s = server_with(|c| c.header_timeout_ms = 300).await;
    let mut sock = connect(&s).await;
    sock.write_all(b"GET /v1/diagnostics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut sock, 3 * SEC)
        .await
        .expect("the idle connection is closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_request_head_over_64_kib_is_refused() {
    let s = server().await;
    let mut sock = connect(&s).await;
    sock.write_all(PARTIAL_HEAD.as_bytes()).await.unwrap();
    // The server may close before it has read all of it.
    let _ = sock.write_all(&[b'a'; 100_000]).await;
    let answer = read_to_close(&mut sock, 3 * SEC).await.expect("closed");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_connection_over_the_cap_takes_the_slot_of_a_partial_head() {
    let s = server_with(|c| {
        c.max_connections = 3;
        c.max_connections_per_address = Some(3);
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut sock = connect(&s).await;
        sock.write_all(PARTIAL_HEAD.as_bytes()).await.unwrap();
        held.push(sock);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fourth = connect(&s).await;
    fourth
        .write_all(b"GET /v1/diagnostics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut fourth, SEC)
        .await
        .expect("served at once: a partial head is not a request in flight");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Two held, plus the one answering.
    assert!(answer.contains(r#""connections":3"#), "{answer}");
    assert!(
        answer.contains(r#""connections_closed_idle":1"#),
        "{answer}"
    );
    assert!(answer.contains(r#""max_connections":3"#), "{answer}");
    assert!(
        read_to_close(&mut held[0], SEC).await.is_some(),
        "the oldest partial head was closed"
    );
}

#[tokio::test]
async fn a_request_body_not_sent_in_time_is_refused() {
    let s = server_with(|c| c.header_timeout_ms = 300).await;
    let mut sock = connect(&s).await;
    sock.write_all(
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"title\":",
    )
    .await
    .unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(3 * SEC, sock.read(&mut buf))
        .await
        .expect("the server answers a body that never comes")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
}

/// A probe with 256 file descriptors: 300 idle sockets made
/// `accept` fail for everyone (`EMFILE`). The binary, started under
/// `ulimit -n 256`, caps its connections below the limit and closes idle
/// ones, so a real request still gets through.
#[tokio::test]
async fn idle_sockets_past_the_fd_limit_do_not_lock_everyone_out() {
    let bin = std::env::var("REPLAY_SERVER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_replay-server").to_owned());
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec '{bin}' --listen 127.0.0.1:0 --db :memory:"
        ))
        .env("REPLAY_HEADER_TIMEOUT_MS", "500")
        // All 300 from 127.0.0.1: every slot, not a quarter of them.
        .env("REPLAY_MAX_CONNECTIONS_PER_ADDRESS", "1000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = common::listening_base(&mut child);
    let s = Server::remote(base);
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(connect(&s).await);
    }
    let t0 = std::time::Instant::now();
    let answer = tokio::time::timeout(5 * SEC, s.get("/v1/diagnostics")).await;
    let _ = child.kill();
    let _ = child.wait();
    let (status, v) = answer.expect("served while 300 idle sockets are open");
    assert_eq!(status, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["config"]["max_connections"], 256 - 64, "{v}");
    eprintln!("served after {:?}", t0.elapsed());
}
