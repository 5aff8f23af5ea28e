//! Live fan-out: bounded per-subscriber buffers, one list per scope log plus
//! the global list. Frames are published in commit order (the caller holds
//! the store lock), so a subscriber's buffer is always in order; a full buffer
//! either ends the subscription or skips frames, never reorders them.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use replay_core::protocol::{Envelope, Scope};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};

use crate::budget::StreamBudget;

/// What to do with a subscriber whose buffer is full (PROTOCOL.md §4.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LagPolicy {
    /// End its stream; the client reconnects with its cursor.
    Disconnect,
    /// Drop durable frames it has no room for (the client repairs the gap);
    /// a critical transient that does not fit ends its stream instead, since
    /// nothing would repair it.
    Skip,
}

/// Caps on open subscriptions (a scoped stream holds one, a multiplexed
/// stream one per sub). One address holds at most `per_client`; at that
/// cap its new stream ends its own oldest, and at `total` a new stream of
/// an address holding fewer ends the oldest stream of the address holding
/// the most ([`Fanout::subscribe_all`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// In the whole process.
    pub total: usize,
    /// On one list (a scope log, or the global list).
    pub per_list: usize,
    /// Held by one client (peer address).
    pub per_client: usize,
}

/// A subscription refused by [`StreamLimits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamsFull {
    /// The process holds `total` streams.
    #[error("this server holds its maximum of {0} open streams")]
    Process(usize),
    /// The list holds `per_list` streams.
    #[error("this log has its maximum of {0} open streams")]
    List(usize),
    /// The client holds `per_client` subscriptions.
    #[error("this client holds its maximum of {0} open streams (each sub of a multiplexed stream counts)")]
    Client(usize),
}

/// One event, encoded once for every subscriber.
#[derive(Debug)]
pub struct Frame {
    /// The event.
    pub env: Envelope,
    /// `env` as one line of JSON.
    pub json: String,
}

impl Frame {
    /// Encodes an envelope.
    pub fn new(env: Envelope) -> Arc<Frame> {
        let json = env.to_json();
        Arc::new(Frame { env, json })
    }

    /// The memory a queued frame holds: its line of JSON and about as
    /// much again for the decoded envelope (whose data is the same text).
    fn held_bytes(&self) -> usize {
        2 * self.json.len()
    }
}

/// A frame in a subscriber's buffer, with the room it holds in the stream
/// budget's `queued` quota until it is received (`None`: the one frame an
/// empty buffer takes when the quota is full).
type Queued = (Arc<Frame>, Option<OwnedSemaphorePermit>);

/// Which list a subscriber is on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// One scope log.
    Scope(Scope, String),
    /// Every durable event of every scope.
    Global,
}

/// Counters for `/v1/diagnostics/comms`.
#[derive(Debug, Default)]
pub struct CommsStats {
    /// Subscribers connected now.
    pub subscribers: AtomicU64,
    /// Subscriptions ever opened.
    pub subscriptions_total: AtomicU64,
    /// Subscribers disconnected because their buffer was full (under
    /// `skip`: by a critical transient that did not fit).
    pub lagged_disconnects: AtomicU64,
    /// Subscriptions refused by the stream caps.
    pub refused: AtomicU64,
    /// Streams ended to make room for an address with fewer streams (on a
    /// full list, at the process cap) or for the same address's newer
    /// stream at its cap ([`Fanout::subscribe_all`]).
    pub evicted_for_fairness: AtomicU64,
    /// Frames that found no room in the stream budget's `queued` quota for
    /// a subscriber whose buffer held some (its buffer was full: the lag
    /// policy followed).
    pub budget_full: AtomicU64,
    /// Durable frames skipped for a full buffer (skip policy).
    pub skipped_durable: AtomicU64,
    /// Transient frames not delivered for a full buffer.
    pub dropped_transient: AtomicU64,
    /// Frames written to streams.
    pub frames_sent: AtomicU64,
    /// Bytes written to streams.
    pub bytes_sent: AtomicU64,
}

struct Sub {
    id: u64,
    tx: mpsc::Sender<Queued>,
    /// Bytes of frames in `tx` not yet received.
    queued: Arc<AtomicUsize>,
    /// Set when the fan-out lets go of any subscription of this one's stream
    /// for lag or to make room for another stream.
    let_go: Arc<watch::Sender<bool>>,
}

impl Sub {
    /// The fan-out lets go of it for lag or for another stream: its stream's
    /// writer stops waiting for a peer that takes nothing, so what it
    /// holds is freed at once. (Not when its own stream drops it: a
    /// multiplexed stream goes on without a scope it could not open.)
    fn let_go(&self) {
        self.let_go.send_replace(true);
    }
}

/// Open subscriptions, counted until each [`Subscription`] is dropped (or
/// ended for fairness).
#[derive(Default)]
struct Open {
    per_client: HashMap<IpAddr, usize>,
    /// Each list's subscriptions, oldest first: id and client (its length
    /// is the list's count).
    streams: HashMap<Key, Vec<(u64, Option<IpAddr>)>>,
    /// The subscriptions of each stream (one, or a multiplexed stream's
    /// subs), by stream id: oldest stream first.
    groups: BTreeMap<u64, Group>,
    /// The stream of each subscription.
    group_of: HashMap<u64, u64>,
}

/// One stream's subscriptions.
struct Group {
    client: Option<IpAddr>,
    subs: Vec<(Key, u64)>,
}

impl Open {
    /// Subscriptions open on every list.
    fn total(&self) -> usize {
        self.streams.values().map(Vec::len).sum()
    }

    /// Subscriptions `client` holds.
    fn of_client(&self, client: IpAddr) -> usize {
        self.per_client.get(&client).copied().unwrap_or(0)
    }

    /// Stops counting subscription `id` of `key`, and takes it out of its
    /// stream; false when it was not counted (any more).
    fn forget(&mut self, key: &Key, id: u64) -> bool {
        if let Some(g) = self.group_of.remove(&id) {
            if let Some(group) = self.groups.get_mut(&g) {
                group.subs.retain(|(_, i)| *i != id);
                if group.subs.is_empty() {
                    self.groups.remove(&g);
                }
            }
        }
        self.uncount(key, id)
    }

    /// Ends stream `g`: stops counting all its subscriptions, which it
    /// returns (for the fan-out to let go of).
    fn end_group(&mut self, g: u64) -> Vec<(Key, u64)> {
        let Some(group) = self.groups.remove(&g) else {
            return Vec::new();
        };
        for (key, id) in &group.subs {
            self.group_of.remove(id);
            self.uncount(key, *id);
        }
        group.subs
    }

    /// The oldest stream of `client`.
    fn oldest_of(&self, client: IpAddr) -> Option<u64> {
        self.groups
            .iter()
            .find(|(_, g)| g.client == Some(client))
            .map(|(id, _)| *id)
    }

    /// At the process cap, the stream to end for `client`, which would
    /// then hold `mine` subscriptions: the oldest of the address holding
    /// the most, if that address still holds no fewer than `mine` once it
    /// is ended (so that two addresses never take turns ending each other).
    fn process_victim(&self, client: IpAddr, mine: usize) -> Option<u64> {
        let (most, count) = self
            .per_client
            .iter()
            .filter(|(ip, _)| **ip != client)
            .max_by_key(|(ip, n)| (**n, std::cmp::Reverse(**ip)))?;
        let g = self.oldest_of(*most)?;
        let size = self.groups.get(&g).map_or(0, |g| g.subs.len());
        (mine + size <= *count).then_some(g)
    }

    /// Stops counting subscription `id` of `key` on its list and for its
    /// client; false when it was not counted (any more).
    fn uncount(&mut self, key: &Key, id: u64) -> bool {
        let Some(list) = self.streams.get_mut(key) else {
            return false;
        };
        let Some(at) = list.iter().position(|(i, _)| *i == id) else {
            return false;
        };
        let (_, client) = list.remove(at);
        if list.is_empty() {
            self.streams.remove(key);
        }
        if let Some(client) = &client {
            release(&mut self.per_client, client);
        }
        true
    }

    /// On a full list, the subscription to end for `client`: the oldest of
    /// the address holding the most streams on it, when `client` holds at
    /// least two fewer (so that after the swap it holds no more than that
    /// address: two addresses never take turns ending each other).
    fn fair_victim(&self, key: &Key, client: IpAddr) -> Option<u64> {
        let list = self.streams.get(key)?;
        let mut counts: HashMap<IpAddr, usize> = HashMap::new();
        for ip in list.iter().filter_map(|(_, c)| *c) {
            *counts.entry(ip).or_default() += 1;
        }
        let most = counts.values().copied().max()?;
        let mine = counts.get(&client).copied().unwrap_or(0);
        if mine + 2 > most {
            return None;
        }
        list.iter()
            .find(|(_, c)| c.is_some_and(|ip| counts.get(&ip) == Some(&most)))
            .map(|(id, _)| *id)
    }
}

/// Subtracts one from a count in a map, removing it at zero.
fn release<K: Eq + std::hash::Hash>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// The fan-out.
pub struct Fanout {
    subs: Mutex<HashMap<Key, Vec<Sub>>>,
    /// Subscriptions alive per list and per client. Unlike `subs` (which
    /// the fan-out leaves on lag or `close_all`) this counts until the
    /// [`Subscription`] is dropped, that is until its stream has ended.
    open: Mutex<Open>,
    next_id: AtomicU64,
    buffer: usize,
    buffer_bytes: usize,
    policy: LagPolicy,
    limits: StreamLimits,
    /// Whose `queued` quota the frames in subscriber buffers hold.
    budget: Arc<StreamBudget>,
    /// Counters.
    pub stats: CommsStats,
}

/// A live subscription; dropping it unsubscribes.
pub struct Subscription {
    /// Frames in publish order; ends when the fan-out lets go of this subscriber.
    rx: mpsc::Receiver<Queued>,
    queued: Arc<AtomicUsize>,
    let_go: watch::Receiver<bool>,
    id: u64,
    key: Key,
    fanout: Arc<Fanout>,
}

impl Subscription {
    /// The next frame; `None` once the fan-out has let go and the buffer is empty.
    pub async fn recv(&mut self) -> Option<Arc<Frame>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// [`Subscription::recv`] as a poll.
    /// Its room in the stream budget is given back: the writer pays for
    /// the bytes it makes of the frame from its own quota.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Arc<Frame>>> {
        self.rx.poll_recv(cx).map(|got| got.map(|q| self.took(q)))
    }

    /// A frame already buffered, if any.
    pub fn try_recv(&mut self) -> Result<Arc<Frame>, mpsc::error::TryRecvError> {
        let q = self.rx.try_recv()?;
        Ok(self.took(q))
    }

    /// Becomes true once the fan-out has let go of this subscription or of
    /// another of its stream.
    pub fn let_go(&self) -> watch::Receiver<bool> {
        self.let_go.clone()
    }

    fn took(&self, (frame, _room): Queued) -> Arc<Frame> {
        self.queued.fetch_sub(frame.json.len(), Ordering::Relaxed);
        frame
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.fanout
            .open
            .lock()
            .expect("fanout lock")
            .forget(&self.key, self.id);
        self.fanout.leave(&self.key, self.id, false);
    }
}

impl Fanout {
    /// A fan-out with at most `buffer` frames and `buffer_bytes` bytes of frames
    /// (past the first) per subscriber, all of them held in `budget`'s
    /// `queued` quota.
    pub fn new(
        buffer: usize,
        buffer_bytes: usize,
        policy: LagPolicy,
        limits: StreamLimits,
        budget: Arc<StreamBudget>,
    ) -> Arc<Fanout> {
        Arc::new(Fanout {
            subs: Mutex::new(HashMap::new()),
            open: Mutex::new(Open::default()),
            next_id: AtomicU64::new(1),
            buffer: buffer.max(1),
            buffer_bytes: buffer_bytes.max(1),
            policy,
            limits,
            budget,
            stats: CommsStats::default(),
        })
    }

    /// The lag policy in force.
    pub fn policy(&self) -> LagPolicy {
        self.policy
    }

    /// Subscriptions alive now (streams open), in every list.
    pub fn open_streams(&self) -> usize {
        self.open.lock().expect("fanout lock").total()
    }

    /// Takes subscriber `id` off list `key` (its stream ends after what is
    /// buffered), telling its stream when `let_go` ([`Sub::let_go`]).
    fn leave(&self, key: &Key, id: u64, let_go: bool) {
        let mut subs = self.subs.lock().expect("fanout lock");
        if let Some(list) = subs.get_mut(key) {
            let before = list.len();
            list.retain(|s| {
                let this = s.id == id;
                if this && let_go {
                    s.let_go();
                }
                !this
            });
            if list.len() < before {
                self.stats.subscribers.fetch_sub(1, Ordering::Relaxed);
            }
            if list.is_empty() {
                subs.remove(key);
            }
        }
    }

    /// Subscribes `client` (its peer address; `None`: not counted per
    /// client) to one list: a stream of one subscription
    /// ([`Fanout::subscribe_all`]).
    pub fn subscribe(
        self: &Arc<Self>,
        key: Key,
        client: Option<IpAddr>,
    ) -> Result<Subscription, StreamsFull> {
        let mut subs = self.subscribe_all(vec![key], client)?;
        Ok(subs.pop().expect("one subscription per key"))
    }

    /// Subscribes one stream of `client` (its peer address; `None`: not
    /// counted per client) to every list in `keys`, all or none, unless a
    /// stream cap is reached. Other streams are ended (after what is
    /// buffered; their clients resume from their cursors) to make room:
    ///
    /// - on a full list, the oldest stream there of the address holding the
    ///   most streams on it, when `client` holds at least two fewer;
    /// - at `client`'s cap (`per_client`), its own oldest streams;
    /// - at the process cap, the oldest stream of the address holding the
    ///   most, while that address still holds no fewer than `client` would.
    pub fn subscribe_all(
        self: &Arc<Self>,
        keys: Vec<Key>,
        client: Option<IpAddr>,
    ) -> Result<Vec<Subscription>, StreamsFull> {
        let n = keys.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let group = self.next_id.fetch_add(n as u64 + 1, Ordering::Relaxed);
        // Held until the new subscriptions are on their lists: a stream
        // ended for another one that is still subscribing is then surely
        // let go of.
        let mut open = self.open.lock().expect("fanout lock");
        let ended = {
            let ended = self.make_room(&mut open, &keys, client);
            let ended = match ended {
                Ok(ended) => ended,
                Err(full) => {
                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(full);
                }
            };
            let mut members = Vec::with_capacity(n);
            for (i, key) in keys.iter().enumerate() {
                let id = group + 1 + i as u64;
                if let Some(c) = client {
                    *open.per_client.entry(c).or_default() += 1;
                }
                open.streams
                    .entry(key.clone())
                    .or_default()
                    .push((id, client));
                open.group_of.insert(id, group);
                members.push((key.clone(), id));
            }
            open.groups.insert(
                group,
                Group {
                    client,
                    subs: members,
                },
            );
            ended
        };
        for (key, id) in &ended.1 {
            self.leave(key, *id, true);
        }
        self.stats
            .evicted_for_fairness
            .fetch_add(ended.0, Ordering::Relaxed);
        let (let_go, let_go_rx) = watch::channel(false);
        let let_go = Arc::new(let_go);
        let mut subs = self.subs.lock().expect("fanout lock");
        let subscribed = keys
            .into_iter()
            .enumerate()
            .map(|(i, key)| {
                let id = group + 1 + i as u64;
                let (tx, rx) = mpsc::channel(self.buffer);
                let queued = Arc::new(AtomicUsize::new(0));
                subs.entry(key.clone()).or_default().push(Sub {
                    id,
                    tx,
                    queued: Arc::clone(&queued),
                    let_go: Arc::clone(&let_go),
                });
                Subscription {
                    rx,
                    queued,
                    let_go: let_go_rx.clone(),
                    id,
                    key,
                    fanout: Arc::clone(self),
                }
            })
            .collect();
        drop(subs);
        drop(open);
        self.stats
            .subscribers
            .fetch_add(n as u64, Ordering::Relaxed);
        self.stats
            .subscriptions_total
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(subscribed)
    }

    /// Ends the streams that must give way for `n` new subscriptions of
    /// `client` on `keys` ([`Fanout::subscribe_all`]): how many, and their
    /// subscriptions; or the cap that refuses them.
    #[allow(clippy::type_complexity)]
    fn make_room(
        &self,
        open: &mut Open,
        keys: &[Key],
        client: Option<IpAddr>,
    ) -> Result<(u64, Vec<(Key, u64)>), StreamsFull> {
        let n = keys.len();
        let limits = self.limits;
        let (process, list, own) = (
            StreamsFull::Process(limits.total),
            StreamsFull::List(limits.per_list),
            StreamsFull::Client(limits.per_client),
        );
        if n > limits.total {
            return Err(process);
        }
        if client.is_some() && n > limits.per_client {
            return Err(own);
        }
        // A full list with no stream to give way refuses before any stream
        // is ended.
        let full_lists = |open: &Open| -> Vec<&Key> {
            keys.iter()
                .filter(|k| open.streams.get(*k).map_or(0, Vec::len) >= limits.per_list)
                .collect()
        };
        for key in full_lists(open) {
            if client.and_then(|c| open.fair_victim(key, c)).is_none() {
                return Err(list);
            }
        }
        let mut ended = (0, Vec::new());
        let mut end = |open: &mut Open, g: u64| {
            ended.0 += 1;
            ended.1.extend(open.end_group(g));
        };
        for key in keys {
            while open.streams.get(key).map_or(0, Vec::len) >= limits.per_list {
                let victim = client.and_then(|c| open.fair_victim(key, c));
                let Some(g) = victim.and_then(|id| open.group_of.get(&id).copied()) else {
                    return Err(list);
                };
                end(open, g);
            }
        }
        if let Some(c) = client {
            while open.of_client(c) + n > limits.per_client {
                let Some(g) = open.oldest_of(c) else {
                    return Err(own);
                };
                end(open, g);
            }
        }
        while open.total() + n > limits.total {
            let victim = client.and_then(|c| open.process_victim(c, open.of_client(c) + n));
            let Some(g) = victim else {
                return Err(process);
            };
            end(open, g);
        }
        Ok(ended)
    }

    /// Delivers a frame to its scope's list and, when durable, the global list.
    pub fn publish(&self, frame: &Arc<Frame>) {
        let mut subs = self.subs.lock().expect("fanout lock");
        let key = Key::Scope(frame.env.scope, frame.env.scope_id.clone());
        self.deliver(&mut subs, &key, frame);
        if frame.env.is_durable() {
            self.deliver(&mut subs, &Key::Global, frame);
        }
    }

    fn deliver(&self, subs: &mut HashMap<Key, Vec<Sub>>, key: &Key, frame: &Arc<Frame>) {
        let Some(list) = subs.get_mut(key) else {
            return;
        };
        let stats = &self.stats;
        let size = frame.json.len();
        let units = self.budget.queued.room.units_for(frame.held_bytes());
        list.retain(|s| {
            let queued = s.queued.load(Ordering::Relaxed);
            // Droppable frames give way early so critical ones keep room.
            let room = self.buffer_bytes.saturating_sub(queued);
            if !frame.env.critical
                && (s.tx.capacity() < self.buffer.div_ceil(4)
                    || room < size.saturating_add(self.buffer_bytes / 4))
            {
                stats.dropped_transient.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            // Over the byte budget counts as a full buffer, and so does no
            // room in the stream budget; an empty buffer takes any one
            // frame, so no frame is too large to deliver and a stream that
            // keeps up is never ended for the ones that do not.
            let held = (queued == 0 || size <= room)
                .then(|| {
                    Arc::clone(&self.budget.queued.room.permits)
                        .try_acquire_many_owned(units)
                        .ok()
                })
                .flatten();
            if held.is_some() {
                self.budget.note_peak(&self.budget.queued);
            }
            let over_budget = queued > 0 && size <= room && held.is_none();
            let sent = if queued > 0 && (size > room || held.is_none()) {
                Err(mpsc::error::TrySendError::Full((Arc::clone(frame), held)))
            } else {
                s.tx.try_send((Arc::clone(frame), held))
            };
            match sent {
                Ok(()) => {
                    s.queued.fetch_add(size, Ordering::Relaxed);
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    stats.subscribers.fetch_sub(1, Ordering::Relaxed);
                    false
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    if over_budget {
                        stats.budget_full.fetch_add(1, Ordering::Relaxed);
                    }
                    if !frame.env.critical {
                        stats.dropped_transient.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    match self.policy {
                        LagPolicy::Disconnect => {
                            stats.lagged_disconnects.fetch_add(1, Ordering::Relaxed);
                            stats.subscribers.fetch_sub(1, Ordering::Relaxed);
                            s.let_go();
                            false
                        }
                        LagPolicy::Skip if frame.env.is_durable() => {
                            stats.skipped_durable.fetch_add(1, Ordering::Relaxed);
                            true
                        }
                        // A snapshot or delta lost silently would leave the
                        // client wrong with no gap to repair: end the stream,
                        // the client reconnects and gets fresh snapshots.
                        LagPolicy::Skip => {
                            stats.lagged_disconnects.fetch_add(1, Ordering::Relaxed);
                            stats.subscribers.fetch_sub(1, Ordering::Relaxed);
                            s.let_go();
                            false
                        }
                    }
                }
            }
        });
        if list.is_empty() {
            subs.remove(key);
        }
    }

    /// Lets go of every subscriber: their streams end after what is buffered.
    pub fn close_all(&self) {
        let mut subs = self.subs.lock().expect("fanout lock");
        let n: usize = subs.values().map(Vec::len).sum();
        subs.clear();
        self.stats
            .subscribers
            .fetch_sub(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_core::protocol::{Event, TurnDelta, TurnRef};

    /// A stream budget no test fills.
    fn budget() -> Arc<StreamBudget> {
        Arc::new(StreamBudget::new(1 << 30))
    }

    const UNCAPPED: StreamLimits = StreamLimits {
        total: usize::MAX,
        per_list: usize::MAX,
        per_client: usize::MAX,
    };

    fn durable(seq: u64) -> Arc<Frame> {
        let event = Event::TurnCompleted(TurnRef {
            turn_id: "t".into(),
        });
        Frame::new(Envelope::durable(
            seq,
            Scope::Session,
            "s".into(),
            seq,
            String::new(),
            event,
        ))
    }

    #[test]
    fn full_buffer_disconnects_under_disconnect_policy() {
        let fanout = Fanout::new(2, usize::MAX, LagPolicy::Disconnect, UNCAPPED, budget());
        let mut sub = fanout
            .subscribe(Key::Scope(Scope::Session, "s".into()), None)
            .unwrap();
        for seq in 1..=3 {
            fanout.publish(&durable(seq));
        }
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(2));
        assert!(matches!(
            sub.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(fanout.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn full_buffer_skips_in_order_under_skip_policy() {
        let fanout = Fanout::new(2, usize::MAX, LagPolicy::Skip, UNCAPPED, budget());
        let mut sub = fanout.subscribe(Key::Global, None).unwrap();
        for seq in 1..=3 {
            fanout.publish(&durable(seq));
        }
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        fanout.publish(&durable(4));
        let rest: Vec<_> = std::iter::from_fn(|| sub.try_recv().ok())
            .map(|f| f.env.seq.unwrap())
            .collect();
        assert_eq!(rest, vec![2, 4]);
        assert_eq!(fanout.stats.skipped_durable.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn dropping_a_subscription_unsubscribes() {
        let fanout = Fanout::new(4, usize::MAX, LagPolicy::Skip, UNCAPPED, budget());
        let sub = fanout.subscribe(Key::Global, None).unwrap();
        assert_eq!(fanout.stats.subscribers.load(Ordering::Relaxed), 1);
        drop(sub);
        assert_eq!(fanout.stats.subscribers.load(Ordering::Relaxed), 0);
        fanout.publish(&durable(1));
    }

    #[test]
    fn skip_policy_ends_a_stream_rather_than_drop_a_critical_transient() {
        let fanout = Fanout::new(1, usize::MAX, LagPolicy::Skip, UNCAPPED, budget());
        let key = Key::Scope(Scope::Session, "s".into());
        let mut sub = fanout.subscribe(key, None).unwrap();
        fanout.publish(&durable(1));
        fanout.publish(&Frame::new(Envelope {
            id: None,
            seq: None,
            after_seq: Some(1),
            event: Event::TurnDelta(TurnDelta::default()),
            ..durable(1).env.clone()
        }));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        assert!(matches!(
            sub.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(fanout.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn stream_caps_count_until_the_subscription_is_dropped() {
        let limits = StreamLimits {
            total: 3,
            per_list: 2,
            per_client: usize::MAX,
        };
        let fanout = Fanout::new(4, usize::MAX, LagPolicy::Disconnect, limits, budget());
        let a = || Key::Scope(Scope::Session, "a".into());
        let a1 = fanout.subscribe(a(), None).unwrap();
        let _a2 = fanout.subscribe(a(), None).unwrap();
        assert_eq!(
            fanout.subscribe(a(), None).err(),
            Some(StreamsFull::List(2))
        );
        let _g = fanout.subscribe(Key::Global, None).unwrap();
        assert_eq!(
            fanout.subscribe(Key::Global, None).err(),
            Some(StreamsFull::Process(3))
        );
        // Let go of by the fan-out, still open until its stream drops it.
        fanout.close_all();
        assert_eq!(fanout.open_streams(), 3);
        drop(a1);
        assert_eq!(fanout.open_streams(), 2);
        assert!(fanout.subscribe(a(), None).is_ok());
    }

    #[test]
    fn a_full_list_makes_room_for_a_client_with_two_fewer() {
        let limits = StreamLimits {
            total: usize::MAX,
            per_list: 2,
            per_client: usize::MAX,
        };
        let fanout = Fanout::new(4, usize::MAX, LagPolicy::Disconnect, limits, budget());
        let a = || Key::Scope(Scope::Session, "a".into());
        let ip = |n: u8| Some(IpAddr::from([127, 0, 0, n]));
        let mut old = fanout.subscribe(a(), ip(2)).unwrap();
        let _new = fanout.subscribe(a(), ip(2)).unwrap();
        let _other = fanout.subscribe(a(), ip(3)).unwrap();
        // 127.0.0.2's oldest was ended for 127.0.0.3 and no longer counts.
        assert!(matches!(
            old.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(fanout.open_streams(), 2);
        assert_eq!(fanout.stats.evicted_for_fairness.load(Ordering::Relaxed), 1);
        drop(old);
        assert_eq!(fanout.open_streams(), 2);
        // One each: nobody gives way, to either or to a third address, nor
        // to a stream counted for no client.
        for client in [ip(2), ip(3), ip(4), None] {
            assert_eq!(
                fanout.subscribe(a(), client).err(),
                Some(StreamsFull::List(2))
            );
        }
    }

    fn team_message(seq: u64, text_len: usize) -> Arc<Frame> {
        Frame::new(Envelope {
            event: Event::decode(
                "team.message",
                Some(&format!(
                    r#"{{"from":"a","to":"b","text":"{}"}}"#,
                    "x".repeat(text_len)
                )),
            )
            .unwrap(),
            ..durable(seq).env.clone()
        })
    }

    #[test]
    fn a_buffer_over_its_bytes_disconnects_but_takes_any_first_frame() {
        let fanout = Fanout::new(1024, 10_000, LagPolicy::Disconnect, UNCAPPED, budget());
        let mut sub = fanout
            .subscribe(Key::Scope(Scope::Session, "s".into()), None)
            .unwrap();
        // One frame larger than the whole budget still fits an empty buffer.
        fanout.publish(&team_message(1, 20_000));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        for seq in 2..=3 {
            fanout.publish(&team_message(seq, 4_000));
        }
        fanout.publish(&team_message(4, 4_000));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(2));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(3));
        assert!(matches!(
            sub.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(fanout.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_client_at_its_cap_ends_its_own_oldest_stream() {
        let limits = StreamLimits {
            total: 10,
            per_list: 10,
            per_client: 2,
        };
        let fanout = Fanout::new(4, usize::MAX, LagPolicy::Disconnect, limits, budget());
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let mut a1 = fanout.subscribe(Key::Global, Some(a)).unwrap();
        let _a2 = fanout.subscribe(Key::Global, Some(a)).unwrap();
        let _a3 = fanout.subscribe(Key::Global, Some(a)).unwrap();
        assert!(matches!(
            a1.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(fanout.open_streams(), 2);
        // A stream larger than the cap never fits.
        let three = vec![Key::Global; 3];
        assert_eq!(
            fanout.subscribe_all(three, Some(b)).err(),
            Some(StreamsFull::Client(2))
        );
        let _b1 = fanout.subscribe(Key::Global, Some(b)).unwrap();
        assert_eq!(fanout.open_streams(), 3);
    }

    #[test]
    fn at_the_process_cap_the_address_holding_most_gives_way_whole_streams() {
        let limits = StreamLimits {
            total: 6,
            per_list: 10,
            per_client: 4,
        };
        let fanout = Fanout::new(4, usize::MAX, LagPolicy::Disconnect, limits, budget());
        let ip = |n: u8| Some(IpAddr::from([127, 0, 0, n]));
        let keys = |n: usize| -> Vec<Key> {
            (0..n)
                .map(|i| Key::Scope(Scope::Team, format!("t{i}")))
                .collect()
        };
        let mut old = fanout.subscribe_all(keys(2), ip(2)).unwrap();
        let _new = fanout.subscribe_all(keys(2), ip(2)).unwrap();
        let _other = fanout.subscribe_all(keys(2), ip(3)).unwrap();
        // 127.0.0.4 (none) takes 127.0.0.2's oldest stream, both its subs.
        let _third = fanout.subscribe_all(keys(2), ip(4)).unwrap();
        for sub in &mut old {
            assert!(matches!(
                sub.try_recv(),
                Err(mpsc::error::TryRecvError::Disconnected)
            ));
        }
        assert_eq!(fanout.open_streams(), 6);
        assert_eq!(fanout.stats.evicted_for_fairness.load(Ordering::Relaxed), 1);
        // Two each now: nobody gives way to a third stream of anyone.
        for client in [ip(2), ip(3), ip(5), None] {
            assert_eq!(
                fanout.subscribe_all(keys(2), client).err(),
                Some(StreamsFull::Process(6)),
                "{client:?}"
            );
        }
    }

    #[test]
    fn a_stream_is_told_when_the_fanout_lets_go_not_when_it_drops_a_scope() {
        let fanout = Fanout::new(1, usize::MAX, LagPolicy::Disconnect, UNCAPPED, budget());
        let keys = vec![
            Key::Scope(Scope::Session, "s".into()),
            Key::Scope(Scope::Team, "t".into()),
        ];
        let mut subs = fanout.subscribe_all(keys, None).unwrap();
        let let_go = subs[0].let_go();
        // A multiplexed stream drops a scope it could not open: it goes on.
        drop(subs.pop());
        assert!(!*let_go.borrow());
        // Its other scope lags: the stream is told.
        fanout.publish(&durable(1));
        fanout.publish(&durable(2));
        assert!(*let_go.borrow());
    }

    #[test]
    fn a_buffer_that_finds_no_room_in_the_stream_budget_is_full() {
        // A `queued` quota of 16 KiB: two frames of about 3 KB each (each
        // holding twice its JSON).
        let budget = Arc::new(StreamBudget::new(64 << 10));
        let fanout = Fanout::new(
            1024,
            1 << 20,
            LagPolicy::Disconnect,
            UNCAPPED,
            Arc::clone(&budget),
        );
        let key = || Key::Scope(Scope::Session, "s".into());
        let mut slow = fanout.subscribe(key(), None).unwrap();
        fanout.publish(&team_message(1, 3_000));
        fanout.publish(&team_message(2, 3_000));
        assert!(budget.queued.held_bytes() >= 12_000);
        // A reader that keeps up still gets every frame (an empty buffer
        // takes one), while the one that reads nothing is ended.
        let mut quick = fanout.subscribe(key(), None).unwrap();
        for seq in 3..=5 {
            fanout.publish(&team_message(seq, 3_000));
            assert_eq!(quick.try_recv().unwrap().env.seq, Some(seq));
        }
        let got: Vec<_> = std::iter::from_fn(|| slow.try_recv().ok())
            .map(|f| f.env.seq.unwrap())
            .collect();
        assert!(matches!(
            slow.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert!(got.len() < 5, "{got:?}");
        assert_eq!(budget.queued.held_bytes(), 0);
        assert_eq!(fanout.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }
}
