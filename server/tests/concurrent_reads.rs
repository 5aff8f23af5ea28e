//! Reads on a file store run concurrently: a stream's `hello` and the
//! writer never wait for page reads in flight, reads do not wait for each
//! other, and every page is one consistent snapshot (dense events, `head`,
//! `cursor` and `has_more` agreeing) while a writer appends.
//! Orderings are forced with in-process reads held open, never with timers.

mod common;

use std::sync::Arc;

use common::*;
use replay_core::protocol::{Event, Scope, TeamMessage};
use replay_server::app::App;
use replay_server::store::READERS;
use reqwest::StatusCode;
use serde_json::Value;

fn event(i: u64) -> Event {
    Event::TeamMessage(TeamMessage {
        from: "a".into(),
        to: "b".into(),
        text: format!("backlog {i} é🙂 {}", "x".repeat(64)),
    })
}

async fn file_server(name: &str) -> (Server, TempDb, Arc<App>) {
    let db = TempDb::new(name);
    let path = db.0.clone();
    // Tens of thousands of fill appends: one disk sync each under the
    // default `full` would take minutes here, and reads do not depend on it.
    let s = server_with(move |c| {
        c.db = path;
        c.synchronous = replay_server::store::Synchronous::Normal;
    })
    .await;
    let app = Arc::clone(s.running.as_ref().unwrap().app());
    assert!(app.log.concurrent_reads(), "a file store reads on a pool");
    (s, db, app)
}

/// Appends `n` events to a log, off the async runtime.
async fn fill(app: &Arc<App>, scope: Scope, id: &str, n: u64) {
    let (app, id) = (Arc::clone(app), id.to_owned());
    tokio::task::spawn_blocking(move || {
        for i in 0..n {
            app.log.append(scope, &id, event(i)).unwrap();
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_and_writes_go_through_while_every_reader_is_busy() {
    let (s, _db, app) = file_server("busy").await;
    fill(&app, Scope::Team, "busy", 50).await;

    // Occupy every read connection: each read pins its snapshot, says so,
    // then waits to be released (a page query that takes as long as we like).
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut releases = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..READERS {
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        releases.push(release_tx);
        let (app, started) = (Arc::clone(&app), started_tx.clone());
        reads.push(tokio::spawn(async move {
            app.log
                .read(move |snap| {
                    let before = snap.log_info(Scope::Team, "busy")?.unwrap().head;
                    started.send(()).unwrap();
                    release_rx.recv().unwrap();
                    let page = snap.page(Scope::Team, "busy", 0, 1000)?;
                    let after = snap.log_info(Scope::Team, "busy")?.unwrap().head;
                    Ok((before, after, page.len()))
                })
                .await
                .unwrap()
        }));
    }
    for _ in 0..READERS {
        started_rx.recv().await.unwrap();
    }

    // The stream answers `hello` although no read connection is free.
    let mut sse = s.stream("/v1/teams/busy/events?after_seq=0", None).await;
    assert_eq!(sse.status, StatusCode::OK);
    let hello = sse.until(10 * SEC, |f| is_type(f, "hello")).await;
    let Some(Event::Hello(h)) = hello.and_then(|f| f.env().map(|e| e.event.clone())) else {
        panic!("hello while every reader is busy");
    };
    assert_eq!(h.head, 50);
    // The writer does not wait for readers either.
    let appended = s.append("team", "busy", 50).await;
    assert_eq!(appended["seq"], 51);
    assert!(
        reads.iter().all(|r| !r.is_finished()),
        "the reads were in flight all along"
    );

    // Released, each read still sees its own snapshot: the append is not in it.
    for r in releases {
        r.send(()).unwrap();
    }
    for r in reads {
        assert_eq!(r.await.unwrap(), (50, 50, 50));
    }
    // The stream then delivers the backlog and the new event, dense.
    for expect in 1..=51 {
        let f = sse
            .until(10 * SEC, |f| f.seq().is_some())
            .await
            .expect("durable frame");
        assert_eq!(f.seq(), Some(expect));
    }
}

/// Walks a log's JSON pages (or replay pages) from 0 to the end, checking
/// each page against its own head; returns every event.
async fn walk(s: &Server, path: &str, replay: bool) -> Vec<Value> {
    let mut after = 0u64;
    let mut all = Vec::new();
    loop {
        let url = if replay {
            format!("{path}/replay?after_cursor={after}&limit=2000")
        } else {
            format!("{path}/events?after_seq={after}&limit=2000")
        };
        let (status, page) = s.get(&url).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let events = page[if replay { "history" } else { "events" }]
            .as_array()
            .unwrap()
            .clone();
        let head = page["head"].as_u64().unwrap();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["seq"].as_u64(), Some(after + 1 + i as u64), "dense");
        }
        let last = after + events.len() as u64;
        if replay {
            assert_eq!(page["cursor"].as_u64(), Some(last), "cursor = last seq");
        }
        assert!(last <= head, "no event above the page's head");
        assert_eq!(
            page["has_more"].as_bool(),
            Some(last < head),
            "has_more agrees with the head"
        );
        all.extend(events);
        if last == head {
            return all;
        }
        after = last;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pages_are_dense_identical_snapshots_while_a_writer_appends() {
    const BACKLOG: u64 = 10_000;
    const MORE: u64 = 300;
    let (s, _db, app) = file_server("pages").await;
    let s = Arc::new(s);
    fill(&app, Scope::Team, "big", BACKLOG).await;
    fill(&app, Scope::Session, "ses_big", BACKLOG).await;
    let reference = walk(&s, "/v1/teams/big", false).await;
    assert_eq!(reference.len() as u64, BACKLOG);

    // A writer keeps appending to both logs while eight walks run at once.
    let writer = {
        let app = Arc::clone(&app);
        tokio::task::spawn_blocking(move || {
            for i in 0..MORE {
                app.log.append(Scope::Team, "big", event(i)).unwrap();
                app.log.append(Scope::Session, "ses_big", event(i)).unwrap();
            }
        })
    };
    let mut walks = Vec::new();
    for n in 0..8 {
        let s = Arc::clone(&s);
        walks.push(tokio::spawn(async move {
            match n % 4 {
                0 => walk(&s, "/v1/sessions/ses_big", true).await,
                _ => walk(&s, "/v1/teams/big", false).await,
            }
        }));
    }
    for w in walks {
        let events = w.await.unwrap();
        assert!(events.len() as u64 >= BACKLOG);
        for (got, want) in events.iter().zip(&reference) {
            assert_eq!(got["seq"], want["seq"]);
            assert_eq!(got["data"], want["data"], "identical data");
        }
    }
    writer.await.unwrap();
    // After the writer: every page agrees with the final heads.
    assert_eq!(
        walk(&s, "/v1/teams/big", false).await.len() as u64,
        BACKLOG + MORE
    );
    assert_eq!(
        walk(&s, "/v1/sessions/ses_big", true).await.len() as u64,
        BACKLOG + MORE
    );
    let (_, global) = s.get("/v1/events?after_id=0&limit=5000").await;
    let ids: Vec<u64> = global["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "global list ascending");
    assert_eq!(global["has_more"], true);
}
