//! Fan-out across nodes (Postgres store): the log is the truth. A node
//! publishes durable events to its fan-out in id order, each once, after the
//! last id it published: its own groups from their commit, other nodes'
//! from their wake-ups (the `NOTIFY` each group sends after its commit
//! carries its events, `store::pg::wakeup`), and from the log whenever that
//! is not enough: a wake-up without events (a group too big for one), a
//! gap (a wake-up lost, or one still on its way after [`GAP_WAIT`]), a lost
//! connection, the safety poll. Ids are dense and commit in order (see
//! `store::pg`): a group whose first id is the next one expected follows
//! everything published, and one further on waits until what is below it
//! has arrived or has been read ("after the last id" never skips one that
//! commits later).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::StreamExt;
use replay_core::protocol::{Envelope, Event, Scope};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::fanout::{Fanout, Frame};
use crate::store::pg::cluster::COMMANDS;
use crate::store::pg::wakeup::{self, Wakeup};
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
/// Question ids whose state moved, not yet taken by a forwarded answer
/// waiting on them, before the oldest are dropped (the waiter then looks at
/// the log again: a lag is a wake-up too).
const QUESTIONS_BUFFERED: usize = 256;
/// Waits between attempts to reconnect the listening connection.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// How long a group waits for the groups below it (their wake-ups come on
/// one connection but are not sent in id order) before those are read from
/// the log: a wake-up lost (its node died between commit and `NOTIFY`, or
/// this node's queue of them was full) costs this much, not [`SAFETY_POLL`].
const GAP_WAIT: Duration = Duration::from_millis(50);
/// Groups held at most while a gap is open; a wake-up past this many is
/// dropped (the log has its events).
const HELD_MAX: usize = 1024;
/// Wake-ups received and not yet handled at most; past this many they are
/// dropped (the log has their events).
const WAKEUPS_QUEUED: usize = 4096;

/// The published heads: every event up to a log's head here has been handed
/// to the fan-out.
#[derive(Default)]
pub struct Heads {
    /// Scope logs.
    pub logs: HashMap<(Scope, String), LogInfo>,
    /// The global list (its head is the last id published).
    pub global: LogInfo,
}

/// Counts for `/v1/diagnostics` (`store.follow`) and the tests: where the
/// events this node published came from.
#[derive(Default, Debug)]
pub struct FollowStats {
    /// Other nodes' events published from their wake-ups.
    pub from_wakeups: AtomicU64,
    /// Events read from the log.
    pub read: AtomicU64,
    /// Queries that read the log.
    pub reads: AtomicU64,
    /// Of those, reads of a gap no wake-up filled within [`GAP_WAIT`].
    pub gap_reads: AtomicU64,
    /// Wake-ups that asked for a read (no events in them).
    pub plain_wakeups: AtomicU64,
    /// Wake-ups dropped: the queue or the held groups were full, or a
    /// `lose_wakeups` fault.
    pub wakeups_dropped: AtomicU64,
}

/// A group waiting for the ids below it.
struct Held {
    group: Arc<[Committed]>,
    /// This node's own (counted as `published_own`).
    own: bool,
}

/// What is published in order: held while publishing.
#[derive(Default)]
struct Order {
    /// Groups ahead of the published head, by first id.
    held: BTreeMap<u64, Held>,
    /// When the gap below the first held group was seen.
    gap_since: Option<Instant>,
}

/// Publishes a Postgres log to this node's fan-out, in id order, once each.
pub struct Publisher {
    pool: Pool,
    fanout: Arc<Fanout>,
    heads: Arc<RwLock<Heads>>,
    /// Held while publishing, so frames go out in id order.
    turn: tokio::sync::Mutex<Order>,
    /// The last id published (what a group waiting for a gap watches).
    head: watch::Sender<u64>,
    /// Asks the follower to read the log.
    wake: Notify,
    /// Commands other nodes sent (payloads on [`COMMANDS`]).
    commands: tokio::sync::broadcast::Sender<String>,
    /// Woken when a turn's end is published (turns waiting for it).
    turn_ended: Arc<Notify>,
    /// The question id of each question event published (asked, answered,
    /// declined): forwarded answers wait on it.
    questions: tokio::sync::broadcast::Sender<String>,
    /// This node's tag: its own wake-ups are skipped (its writers publish
    /// what they commit).
    node: String,
    /// The next this many wake-ups of other nodes are dropped on arrival
    /// (fault `lose_wakeups`).
    lose: AtomicU64,
    /// Events published without reading them back (diagnostics).
    pub published_own: AtomicU64,
    /// Where other events came from (diagnostics).
    pub stats: FollowStats,
}

impl Publisher {
    /// A publisher starting from the log as it is now: `heads` are filled
    /// with every log's head, and the global head with the highest id.
    pub async fn start(
        pool: Pool,
        fanout: Arc<Fanout>,
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
            fanout,
            heads,
            turn: tokio::sync::Mutex::default(),
            head: watch::channel(last).0,
            wake: Notify::new(),
            commands: tokio::sync::broadcast::channel(COMMANDS_BUFFERED).0,
            turn_ended: Arc::default(),
            questions: tokio::sync::broadcast::channel(QUESTIONS_BUFFERED).0,
            node,
            lose: AtomicU64::new(0),
            published_own: AtomicU64::new(0),
            stats: FollowStats::default(),
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
        let mut order = self.turn.lock().await;
        if done() {
            return Ok(());
        }
        self.read_up_to(&mut order, u64::MAX).await
    }

    /// Reads and publishes every committed event after the published head
    /// and up to `upto`, then the held groups that follow; the caller holds
    /// `turn` (its `order`).
    async fn read_up_to(&self, order: &mut Order, upto: u64) -> StoreResult<()> {
        let mut client = None;
        loop {
            let after = self.published();
            if after >= upto {
                break;
            }
            // A connection only once there is something to read.
            let c = match client.take() {
                Some(c) => c,
                None => self.pool.get().await?,
            };
            let events = events_after(&c, after, upto, CATCH_UP_PAGE).await?;
            client = Some(c);
            self.stats.reads.fetch_add(1, Relaxed);
            self.stats.read.fetch_add(events.len() as u64, Relaxed);
            let last_page = events.len() < CATCH_UP_PAGE;
            for (env, epoch) in events {
                self.publish_one(env, epoch);
            }
            if last_page {
                break;
            }
        }
        self.release(order);
        Ok(())
    }

    /// Hands one event (the next id) to the fan-out, then moves the heads.
    fn publish_one(&self, env: Envelope, epoch: String) {
        let (id, seq) = (env.id.unwrap_or(0), env.seq.unwrap_or(0));
        let key = (env.scope, env.scope_id.clone());
        let turn_end = matches!(
            env.event,
            Event::TurnCompleted(_) | Event::TurnFailed(_) | Event::TurnCancelled(_)
        );
        let question = match &env.event {
            Event::QuestionAsked(q) => Some(q.question_id.clone()),
            Event::QuestionAnswered(q) => Some(q.question_id.clone()),
            Event::QuestionDeclined(q) => Some(q.question_id.clone()),
            _ => None,
        };
        self.fanout.publish(&Frame::new(env));
        // Heads move after the frame is in the subscribers' buffers.
        let mut h = self.heads.write().unwrap_or_else(PoisonError::into_inner);
        h.logs.insert(key, LogInfo { epoch, head: seq });
        h.global.head = id;
        drop(h);
        self.head.send_replace(id);
        if turn_end {
            self.turn_ended.notify_waiters();
        }
        if let Some(question) = question {
            // No receiver is the usual case: nothing forwarded waits.
            let _ = self.questions.send(question);
        }
    }

    /// Publishes the events of `group` after the published head, in order;
    /// false when one is not the next id (never expected: ids are dense).
    fn publish_run(&self, group: &[Committed], own: bool) -> bool {
        for (env, epoch) in group {
            let id = env.id.unwrap_or(0);
            let published = self.published();
            if id <= published {
                continue;
            }
            if id != published + 1 {
                return false;
            }
            self.publish_one(env.clone(), epoch.clone());
            let counter = if own {
                &self.published_own
            } else {
                &self.stats.from_wakeups
            };
            counter.fetch_add(1, Relaxed);
        }
        true
    }

    /// Publishes `group` (contiguous ids, in order) if it follows the
    /// published head, then the held groups that follow it; holds it if
    /// ids below it are not published yet. False if it was dropped.
    fn offer(&self, order: &mut Order, group: Arc<[Committed]>, own: bool) -> bool {
        let Some(first) = group.first().and_then(|(e, _)| e.id) else {
            return true;
        };
        if first > self.published() + 1 {
            if order.held.len() >= HELD_MAX {
                return false;
            }
            order.gap_since.get_or_insert_with(Instant::now);
            order.held.insert(first, Held { group, own });
            return true;
        }
        if !self.publish_run(&group, own) {
            return false;
        }
        self.release(order);
        true
    }

    /// Publishes the held groups that now follow the published head, in
    /// order, and forgets those already published.
    fn release(&self, order: &mut Order) {
        let mut moved = false;
        while let Some(entry) = order.held.first_entry() {
            if *entry.key() > self.published() + 1 {
                break;
            }
            let held = entry.remove();
            // Not contiguous (never expected): the log fills what it skipped.
            self.publish_run(&held.group, held.own);
            moved = true;
        }
        if order.held.is_empty() {
            order.gap_since = None;
        } else if moved {
            // A new gap, below the next held group.
            order.gap_since = Some(Instant::now());
        }
    }

    /// When the open gap (if any) is to be read from the log.
    fn gap_deadline(order: &Order) -> Option<Instant> {
        order.gap_since.map(|t| t + GAP_WAIT)
    }

    /// Reads from the log what is below the first held group, if a gap is
    /// open, and publishes the held groups it lets through; returns when the
    /// next gap (if any) is to be read.
    async fn fill_gap(&self) -> StoreResult<Option<Instant>> {
        let mut order = self.turn.lock().await;
        let Some(&first) = order.held.keys().next() else {
            return Ok(None);
        };
        self.stats.gap_reads.fetch_add(1, Relaxed);
        self.read_up_to(&mut order, first - 1).await?;
        Ok(Publisher::gap_deadline(&order))
    }

    /// [`Publisher::catch_up`] of everything, then when the gap left open
    /// (if any) is to be read.
    async fn catch_up_gap(&self) -> StoreResult<Option<Instant>> {
        self.catch_up(None).await?;
        Ok(Publisher::gap_deadline(&*self.turn.lock().await))
    }

    /// Handles wake-ups of other nodes, in the order they arrived; returns
    /// when the gap left open (if any) is to be read from the log.
    async fn receive(&self, payloads: &[String]) -> StoreResult<Option<Instant>> {
        let mut order = self.turn.lock().await;
        let mut read = false;
        for payload in payloads {
            match wakeup::parse(payload, &self.node) {
                Wakeup::Own => {}
                Wakeup::Plain => {
                    self.stats.plain_wakeups.fetch_add(1, Relaxed);
                    read = true;
                }
                Wakeup::Group(group) => {
                    if !self.offer(&mut order, group.into(), false) {
                        self.stats.wakeups_dropped.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        if read {
            self.read_up_to(&mut order, u64::MAX).await?;
        }
        Ok(Publisher::gap_deadline(&order))
    }

    /// Publishes a group this node just committed (contiguous ids, in
    /// order) without reading it back. What committed below its first id
    /// (other nodes' groups, or this node's other group) goes out first:
    /// from their wake-ups, or read from the log if they have not come
    /// within [`GAP_WAIT`]. Ids commit in order, so everything below the
    /// group's first id is committed by now. Returns once it is published.
    pub async fn publish_own(&self, group: &Arc<[Committed]>) -> StoreResult<()> {
        let (Some(first), Some(last)) = (
            group.first().and_then(|(e, _)| e.id),
            group.last().and_then(|(e, _)| e.id),
        ) else {
            return Ok(());
        };
        if last <= self.published() {
            return Ok(());
        }
        {
            let mut order = self.turn.lock().await;
            if last <= self.published() {
                return Ok(());
            }
            if !self.offer(&mut order, Arc::clone(group), true) {
                // Not the next ids, or too much held: the log decides.
                return self.read_up_to(&mut order, u64::MAX).await;
            }
            if last <= self.published() {
                return Ok(());
            }
        }
        // Held: the follower publishes it once what is below has come.
        let mut head = self.head.subscribe();
        let came = tokio::time::timeout(GAP_WAIT, head.wait_for(|h| *h >= last))
            .await
            .is_ok_and(|r| r.is_ok());
        if came {
            return Ok(());
        }
        let mut order = self.turn.lock().await;
        if last <= self.published() {
            return Ok(());
        }
        self.stats.gap_reads.fetch_add(1, Relaxed);
        self.read_up_to(&mut order, first - 1).await?;
        if last > self.published() && !self.offer(&mut order, Arc::clone(group), true) {
            return self.read_up_to(&mut order, u64::MAX).await;
        }
        Ok(())
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

    /// The question id of each question event published from now on (on
    /// any node's write).
    pub fn questions(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.questions.subscribe()
    }

    /// The commands nodes send from now on (see `crate::cluster`).
    pub fn commands(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.commands.subscribe()
    }

    /// Wakes the follower (tests and diagnostics).
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// Drops the next `count` wake-ups of other nodes on arrival, as if
    /// they had been lost (fault `lose_wakeups`).
    pub fn lose_wakeups(&self, count: u64) {
        self.lose.store(count, Relaxed);
    }

    /// Whether a wake-up just received is to be dropped as lost.
    fn take_lost(&self) -> bool {
        self.lose
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Follows the log from `url` until the runtime stops: `LISTEN`, catch up,
/// then publish what each wake-up carries (reading the log when it carries
/// nothing, or to fill a gap), and read the log every [`SAFETY_POLL`]; on a
/// lost connection, reconnect with backoff and catch up again.
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

/// Wake-ups handled under one hold of the publishing turn at most.
const WAKEUPS_AT_ONCE: usize = 64;

/// One listening connection's life; returns when it is lost.
async fn listen_once(url: &str, publisher: &Arc<Publisher>) -> StoreResult<()> {
    let (client, mut conn) = tokio_postgres::connect(url, NoTls).await?;
    let (wakeups, mut received) = mpsc::channel::<String>(WAKEUPS_QUEUED);
    let (lost_tx, mut lost) = tokio::sync::oneshot::channel::<()>();
    {
        let publisher = Arc::clone(publisher);
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                let AsyncMessage::Notification(n) = msg else {
                    continue;
                };
                if n.channel() == COMMANDS {
                    // No receiver (yet) is no error: nothing waits here.
                    let _ = publisher.commands.send(n.payload().to_owned());
                    continue;
                }
                // Its own writers publish what this node commits.
                if wakeup::parse_tag(n.payload()) == publisher.node {
                    continue;
                }
                if publisher.take_lost() || wakeups.try_send(n.payload().to_owned()).is_err() {
                    // The gap it leaves is read from the log.
                    publisher.stats.wakeups_dropped.fetch_add(1, Relaxed);
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
    let mut gap: Option<Instant> = None;
    let mut batch = Vec::with_capacity(WAKEUPS_AT_ONCE);
    loop {
        let fill = async move {
            match gap {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            n = received.recv_many(&mut batch, WAKEUPS_AT_ONCE) => {
                if n == 0 {
                    return Err(lost_connection());
                }
                gap = publisher.receive(&batch).await?;
                batch.clear();
            }
            () = fill => gap = publisher.fill_gap().await?,
            _ = publisher.wake.notified() => gap = publisher.catch_up_gap().await?,
            _ = tokio::time::sleep(SAFETY_POLL) => gap = publisher.catch_up_gap().await?,
            _ = &mut lost => return Err(lost_connection()),
        }
    }
}

fn lost_connection() -> crate::store::StoreError {
    crate::store::StoreError::Backend("listening connection closed".into())
}
