//! The handoff race (PROTOCOL.md §4.3.1): a writer appends as fast as it can
//! while 50 subscribers connect with random cursors and disconnect at random.
//! Every connection must see a dense, ordered, duplicate-free durable
//! sequence starting right after its cursor (or after `hello.head` when it
//! asked for live only), and every subscriber finally reaches the head.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use replay_core::protocol::Event;
use replay_server::util::Rng;

const SUBSCRIBERS: u64 = 50;
const WRITES: u64 = 500;

/// How a connection picks its cursor.
#[derive(Clone, Copy, Debug)]
enum Cursor {
    Query(u64),
    Header(u64),
    Live,
}

/// One connection: checks density from its start; returns the last seq seen.
async fn connection(s: &Server, cursor: Cursor, frames: usize) -> u64 {
    let (path, header) = match cursor {
        Cursor::Query(c) => (format!("/v1/teams/race/events?after_seq={c}"), None),
        Cursor::Header(c) => ("/v1/teams/race/events".to_owned(), Some(c.to_string())),
        Cursor::Live => ("/v1/teams/race/events".to_owned(), None),
    };
    let mut sse = s.stream(&path, header.as_deref()).await;
    assert_eq!(sse.status, reqwest::StatusCode::OK, "{:?}", sse.error_body);
    let hello = sse
        .until(5 * SEC, |f| is_type(f, "hello"))
        .await
        .expect("hello");
    let Some(Event::Hello(h)) = hello.env().map(|e| e.event.clone()) else {
        panic!("hello frame")
    };
    let mut expect = match cursor {
        Cursor::Query(c) | Cursor::Header(c) => c + 1,
        Cursor::Live => h.head + 1,
    };
    let mut last = expect - 1;
    let mut got = 0;
    // Heartbeats keep an idle stream busy: give up after a second without a
    // durable frame (the writer may be done).
    let mut idle_until = Instant::now() + SEC;
    while got < frames && Instant::now() < idle_until {
        let Some(f) = sse.next(SEC).await else {
            // A lagging subscriber may be disconnected: allowed, never reordered.
            break;
        };
        if let Some(seq) = f.seq() {
            assert_eq!(seq, expect, "dense, ordered, no duplicates ({cursor:?})");
            expect += 1;
            last = seq;
            idle_until = Instant::now() + SEC;
            got += 1;
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subscribers_see_dense_sequences_while_a_writer_appends() {
    race(server().await).await;
}

/// The same race on a file store, whose backlogs are read on the pool of
/// read-only connections rather than under the writer's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_stays_race_free_on_a_file_store() {
    let db = TempDb::new("race");
    let path = db.0.clone();
    race(server_with(move |c| c.db = path).await).await;
}

async fn race(s: Server) {
    let s = Arc::new(s);
    s.append("team", "race", 0).await;
    let done = Arc::new(AtomicBool::new(false));
    let head = Arc::new(AtomicU64::new(1));

    let writer = {
        let (s, done, head) = (Arc::clone(&s), Arc::clone(&done), Arc::clone(&head));
        tokio::spawn(async move {
            for i in 1..WRITES {
                let env = s.append("team", "race", i).await;
                head.store(env["seq"].as_u64().unwrap(), Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    let mut subs = Vec::new();
    for n in 0..SUBSCRIBERS {
        let (s, done, head) = (Arc::clone(&s), Arc::clone(&done), Arc::clone(&head));
        subs.push(tokio::spawn(async move {
            let mut rng = Rng::new(1000 + n);
            let mut last = 0;
            let mut connections = 0;
            while !done.load(Ordering::SeqCst) {
                let h = head.load(Ordering::SeqCst);
                let cursor = match rng.below(4) {
                    0 => Cursor::Query(rng.below(h + 1)),
                    1 => Cursor::Header(rng.below(h + 1)),
                    2 => Cursor::Live,
                    _ => Cursor::Query(last),
                };
                let frames = 1 + rng.below(120) as usize;
                last = connection(&s, cursor, frames).await;
                connections += 1;
                tokio::time::sleep(Duration::from_millis(rng.below(20))).await;
            }
            // Finally catch up from the last cursor to the final head.
            let final_head = head.load(Ordering::SeqCst);
            while last < final_head {
                last = connection(&s, Cursor::Query(last), (final_head - last) as usize).await;
            }
            assert_eq!(last, final_head);
            connections
        }));
    }
    writer.await.unwrap();
    let mut total = 0;
    for sub in subs {
        total += sub.await.unwrap();
    }
    assert!(
        total >= SUBSCRIBERS,
        "every subscriber connected at least once"
    );
    let (_, comms) = s.get("/v1/diagnostics/comms").await;
    assert!(comms["subscriptions_total"].as_u64().unwrap() >= total);
}
