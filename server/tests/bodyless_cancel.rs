//! `curl -X POST …/cancel` as PROTOCOL.md §4.4 shows it (no body, so no
//! `Content-Type`) is accepted; a browser page's bodyless POST (it always
//! sends `Origin`) still needs JSON, so a page on another origin cannot
//! cancel a turn with a "simple" no-cors request.

mod common;

use common::server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `head` (request line and headers, no body) over a fresh
/// connection and returns the status code and the raw answer.
async fn raw_post(base: &str, path: &str, extra_headers: &str) -> (u16, String) {
    let authority = base.strip_prefix("http://").expect("http base");
    let mut tcp = TcpStream::connect(authority).await.expect("connect");
    // curl 8's request for `curl -X POST URL`, byte for byte, plus extras.
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: curl/8.14.1\r\n\
         Accept: */*\r\n{extra_headers}Connection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.expect("read");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_curls_shape_is_accepted() {
    let s = server().await;
    let sid = s.create_session().await;
    let turn = s.send(&sid, "m1", "/long 5000").await;
    s.wait_event(&format!("sessions/{sid}"), |e| {
        e.event.type_name() == "turn.started"
    })
    .await;
    let path = format!("/v1/sessions/{sid}/cancel");
    let (status, answer) = raw_post(&s.base, &path, "").await;
    assert_eq!(status, 202, "{answer}");
    assert!(
        answer.contains(&turn),
        "names the turn it stopped: {answer}"
    );
    let end = s.wait_turn_end(&sid, &turn).await;
    assert_eq!(end.event.type_name(), "turn.cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bodyless_post_from_a_page_still_needs_json() {
    let s = server().await;
    let sid = s.create_session().await;
    let cancel = format!("/v1/sessions/{sid}/cancel");
    // A browser's no-cors POST carries its Origin: refused before the handler.
    let (status, answer) = raw_post(&s.base, &cancel, "Origin: http://evil.example\r\n").await;
    assert_eq!(status, 415, "{answer}");
    // A body of any length without JSON's type is refused as before.
    let (status, answer) = raw_post(&s.base, &cancel, "Content-Length: 2\r\n").await;
    assert_eq!(status, 415, "{answer}");
    // Only the cancel is bodyless: other writes need their JSON body's type.
    let (status, answer) = raw_post(&s.base, "/v1/sessions", "").await;
    assert_eq!(status, 415, "{answer}");
}
