//! `--stream-batch-ms` (one write per frame cost half a node's CPU): on a
//! busy stream, a durable frame waits for the frames published behind it
//! and they go out in one write; a quiet stream's frame goes out at once.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;

/// Long enough that three appends made one after another all land in it.
const BATCH_MS: u64 = 400;

/// The `id:` lines of one chunk of the body.
fn ids(chunk: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(chunk)
        .lines()
        .filter_map(|l| l.strip_prefix("id: ")?.parse().ok())
        .collect()
}

/// The next chunk the reader got (within 5 s).
async fn next(chunks: &mut tokio::sync::mpsc::UnboundedReceiver<bytes::Bytes>) -> bytes::Bytes {
    let chunk = tokio::time::timeout(Duration::from_secs(5), chunks.recv()).await;
    chunk.expect("a chunk in time").expect("the stream goes on")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_stream_writes_the_frames_of_its_batch_at_once() {
    let s = server_with(|c| c.stream_batch_ms = BATCH_MS).await;
    s.append("team", "b", 0).await;
    let resp = s
        .http
        .get(s.url("/v1/teams/b/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("stream");
    // Read as it arrives: each chunk is what one read got.
    let (tx, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            if tx.send(chunk).is_err() {
                break;
            }
        }
    });
    // `retry:`, then `hello`, each a write of its own or not.
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("event: hello") {
        seen.extend_from_slice(&next(&mut chunks).await);
    }

    // Quiet: its frame goes out at once, not a batch later.
    let at = Instant::now();
    s.append("team", "b", 1).await;
    assert_eq!(ids(&next(&mut chunks).await), vec![2]);
    assert!(
        at.elapsed() < Duration::from_millis(BATCH_MS / 2),
        "a quiet stream's frame waited {:?}",
        at.elapsed()
    );

    // Busy now: the next frame waits for the two behind it (appended
    // 50 ms apart, while the reader reads), and the three arrive in one
    // write (before: one each, as they were appended).
    for n in 2..=4 {
        s.append("team", "b", n).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ids(&next(&mut chunks).await), vec![3, 4, 5]);
}
