//! Fan-out across nodes (Postgres store): the log is the truth, a
//! notification (sent after each append's commit) only a wake-up. A node publishes durable events to its hub
//! only by reading them from the log in id order, after the last id it
//! published: its own writes right after they commit, other nodes' when
//! `LISTEN` wakes it, and everything after a lost connection once it is
//! back. Ids commit in order (see `store::pg`), so reading "after the last
//! id" never skips one that commits later.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::StreamExt;
use replay_core::protocol::{Envelope, Event, Scope};
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::hub::{Frame, Hub};
use crate::store::pg::cluster::COMMANDS;
use crate::store::pg::{self, events_after, read as pgr, Committed, CHANNEL};
use crate::store::{LogInfo, StoreResult};

/// Events read from the log per query while catching up.
const CATCH_UP_PAGE: usize = 1000;
/// A quiet node still reads the log this often (a notification lost in a
/// way the connection did not report costs at most this much delay).
const SAFETY_POLL: Duration = Duration::from_secs(2);
/// Commands from other nodes not yet taken by this node's command task
/// before the oldest are dropped (their senders time out and say so).
const COMMANDS_BUFFERED: usize = 1024;
/// Waits between attempts to reconnect the listening connection.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// The published heads: every event up to a log's head here has been handed
/// to the hub.
#[derive(Default)]
pub struct Heads {
    /// Scope logs.
    pub logs: HashMap<(Scope, String), LogInfo>,
    /// The global list (its head is the last id published).
    pub global: LogInfo,
}

/// Publishes a Postgres log to this node's hub, in id order, once each.
pub struct Publisher {
    pool: Pool,
    hub: Arc<Hub>,
    heads: Arc<RwLock<Heads>>,
    /// Held while publishing, so frames go out in id order.
    turn: tokio::sync::Mutex<()>,
    /// Counts catch-ups that found events other nodes wrote (diagnostics).
    wake: Notify,
    /// Commands other nodes sent (payloads on [`COMMANDS`]).
    commands: tokio::sync::broadcast::Sender<String>,
    /// Woken when a turn's end is published (turns waiting for it).
    turn_ended: Arc<Notify>,
    /// This node's tag: its own wake-ups are skipped (its writers publish
    /// what they commit).
    node: String,
    /// Events published without reading them back (diagnostics).
    pub published_own: std::sync::atomic::AtomicU64,
}

impl Publisher {
    /// A publisher starting from the log as it is now: `heads` are filled
    /// with every log's head, and the global head with the highest id.
    pub async fn start(
        pool: Pool,
        hub: Arc<Hub>,
        heads: Arc<RwLock<Heads>>,
        global_epoch: String,
        node: String,
    ) -> StoreResult<Arc<Publisher>> {
        let snap = pgr::PgSnapshot::begin(&pool).await?;
        let rows = snap
            .client()
            .query("SELECT scope, scope_id, epoch, head FROM logs", &[])
            .await?;
        let last = pgr::global_info(snap.client()).await?.head;
        drop(snap);
        {
            let mut h = heads.write().unwrap_or_else(PoisonError::into_inner);
            for r in &rows {
                let key = (crate::store::scope_from_str(r.get(0)), r.get(1));
                let head: i64 = r.get(3);
                h.logs.insert(
                    key,
                    LogInfo {
                        epoch: r.get(2),
                        head: u64::try_from(head).unwrap_or(0),
                    },
                );
            }
            h.global = LogInfo {
                epoch: global_epoch,
                head: last,
            };
        }
        Ok(Arc::new(Publisher {
            pool,
            hub,
            heads,
            turn: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            commands: tokio::sync::broadcast::channel(COMMANDS_BUFFERED).0,
            turn_ended: Arc::default(),
            node,
            published_own: Default::default(),
        }))
    }

    fn published(&self) -> u64 {
        self.heads
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .global
            .head
    }

    /// Publishes every event committed and not published yet, unless all
    /// up to `upto` already are. Everything committed is read, not only up
    /// to `upto`: appends waiting here behind this one then find theirs
    /// published and send no query of their own.
    pub async fn catch_up(&self, upto: Option<u64>) -> StoreResult<()> {
        let done = || upto.is_some_and(|u| u <= self.published());
        if done() {
            return Ok(());
        }
        let _turn = self.turn.lock().await;
        if done() {
            return Ok(());
        }
        self.read_up_to(u64::MAX).await
    }

    /// Reads and publishes every committed event after the published head
    /// and up to `upto`; the caller holds `turn`.
    async fn read_up_to(&self, upto: u64) -> StoreResult<()> {
        let client = self.pool.get().await?;
        loop {
            let after = self.published();
            if after >= upto {
                return Ok(());
            }
            let events = events_after(&client, after, upto, CATCH_UP_PAGE).await?;
            let last_page = events.len() < CATCH_UP_PAGE;
            for (env, epoch) in events {
                self.publish_one(env, epoch);
            }
            if last_page {
                return Ok(());
            }
        }
    }

    /// Hands one event (the next id) to the hub, then moves the heads.
    fn publish_one(&self, env: Envelope, epoch: String) {
        let (id, seq) = (env.id.unwrap_or(0), env.seq.unwrap_or(0));
        let key = (env.scope, env.scope_id.clone());
        let turn_end = matches!(
            env.event,
            Event::TurnCompleted(_) | Event::TurnFailed(_) | Event::TurnCancelled(_)
        );
        self.hub.publish(&Frame::new(env));
        // Heads move after the frame is in the subscribers' buffers.
        let mut h = self.heads.write().unwrap_or_else(PoisonError::into_inner);
        h.logs.insert(key, LogInfo { epoch, head: seq });
        h.global.head = id;
        drop(h);
        if turn_end {
            self.turn_ended.notify_waiters();
        }
    }

    /// Publishes a group this node just committed (contiguous ids, in
    /// order) without reading it back: what committed before it (other
    /// nodes', or this node's other group) is read from the log first, so
    /// the hub still gets every id once, in order. Ids commit in order, so
    /// everything below the group's first id is committed by now.
    pub async fn publish_own(&self, group: &[Committed]) -> StoreResult<()> {
        let (Some(first), Some(last)) = (
            group.first().and_then(|(e, _)| e.id),
            group.last().and_then(|(e, _)| e.id),
        ) else {
            return Ok(());
        };
        if last <= self.published() {
            return Ok(());
        }
        let _turn = self.turn.lock().await;
        if last <= self.published() {
            return Ok(());
        }
        self.read_up_to(first - 1).await?;
        for (env, epoch) in group {
            let id = env.id.unwrap_or(0);
            let published = self.published();
            if id <= published {
                continue;
            }
            if id != published + 1 {
                // Not the next id (never expected): the log decides.
                return self.read_up_to(u64::MAX).await;
            }
            self.publish_one(env.clone(), epoch.clone());
            self.published_own
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`Publisher::publish_own`] from synchronous code.
    pub fn publish_own_now(&self, group: &[Committed]) -> StoreResult<()> {
        pg::block(self.publish_own(group))
    }

    /// [`Publisher::catch_up`] from synchronous code (a writer that just
    /// committed `upto`).
    pub fn catch_up_now(&self, upto: Option<u64>) -> StoreResult<()> {
        pg::block(self.catch_up(upto))
    }

    /// Woken each time a turn's end is published (on any node's write).
    pub fn turn_ended(&self) -> Arc<Notify> {
        Arc::clone(&self.turn_ended)
    }

    /// The commands nodes send from now on (see `crate::cluster`).
    pub fn commands(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.commands.subscribe()
    }

    /// Wakes the follower (tests and diagnostics).
    pub fn poke(&self) {
        self.wake.notify_one();
    }
}

/// Follows the log from `url` until the runtime stops: `LISTEN`, catch up,
/// then catch up at each notification (and every [`SAFETY_POLL`]); on a lost
/// connection, reconnect with backoff and catch up again.
pub async fn follow(url: String, publisher: Arc<Publisher>) {
    let mut backoff = RECONNECT_MIN;
    loop {
        match listen_once(&url, &publisher).await {
            Ok(()) => backoff = RECONNECT_MIN,
            Err(e) => {
                tracing::warn!(error = %e, "follower: postgres connection lost; reconnecting")
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// One listening connection's life; returns when it is lost.
async fn listen_once(url: &str, publisher: &Arc<Publisher>) -> StoreResult<()> {
    let (client, mut conn) = tokio_postgres::connect(url, NoTls).await?;
    let wake = Arc::new(Notify::new());
    let (lost_tx, mut lost) = tokio::sync::oneshot::channel::<()>();
    {
        let wake = Arc::clone(&wake);
        let commands = publisher.commands.clone();
        let node = publisher.node.clone();
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                if let AsyncMessage::Notification(n) = msg {
                    if n.channel() == COMMANDS {
                        // No receiver (yet) is no error: nothing waits here.
                        let _ = commands.send(n.payload().to_owned());
                        continue;
                    }
                    // Its own writers publish what this node commits.
                    if n.payload() != node {
                        wake.notify_one();
                    }
                }
            }
            let _ = lost_tx.send(());
        });
    }
    client
        .batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {COMMANDS}"))
        .await?;
    // Listening before reading: nothing committed from now on goes unnoticed.
    publisher.catch_up(None).await?;
    loop {
        tokio::select! {
            _ = wake.notified() => publisher.catch_up(None).await?,
            _ = publisher.wake.notified() => publisher.catch_up(None).await?,
            _ = tokio::time::sleep(SAFETY_POLL) => publisher.catch_up(None).await?,
            _ = &mut lost => return Err(crate::store::StoreError::Backend("listening connection closed".into())),
        }
    }
}
