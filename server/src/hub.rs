//! Live fan-out: bounded per-subscriber buffers, one list per scope log plus
//! the global list. Frames are published in commit order (the caller holds
//! the store lock), so a subscriber's buffer is always in order; a full buffer
//! either ends the subscription or skips frames, never reorders them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use replay_core::protocol::{Envelope, Scope};
use tokio::sync::mpsc;

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
/// stream one per sub).
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
}

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
    /// Subscriptions ended to make room on a full list for an address
    /// with fewer streams there ([`Hub::subscribe`]).
    pub evicted_for_fairness: AtomicU64,
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
    tx: mpsc::Sender<Arc<Frame>>,
    /// Bytes of frames in `tx` not yet received.
    queued: Arc<AtomicUsize>,
}

/// Open subscriptions, counted until each [`Subscription`] is dropped (or
/// ended for fairness).
#[derive(Default)]
struct Open {
    per_client: HashMap<IpAddr, usize>,
    /// Each list's subscriptions, oldest first: id and client (its length
    /// is the list's count).
    streams: HashMap<Key, Vec<(u64, Option<IpAddr>)>>,
}

impl Open {
    /// Subscriptions open on every list.
    fn total(&self) -> usize {
        self.streams.values().map(Vec::len).sum()
    }

    /// Stops counting subscription `id` of `key`; false when it was not
    /// counted (any more).
    fn forget(&mut self, key: &Key, id: u64) -> bool {
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
pub struct Hub {
    subs: Mutex<HashMap<Key, Vec<Sub>>>,
    /// Subscriptions alive per list and per client. Unlike `subs` (which
    /// the hub leaves on lag or `close_all`) this counts until the
    /// [`Subscription`] is dropped, that is until its stream has ended.
    open: Mutex<Open>,
    next_id: AtomicU64,
    buffer: usize,
    buffer_bytes: usize,
    policy: LagPolicy,
    limits: StreamLimits,
    /// Counters.
    pub stats: CommsStats,
}

/// A live subscription; dropping it unsubscribes.
pub struct Subscription {
    /// Frames in publish order; ends when the hub lets go of this subscriber.
    rx: mpsc::Receiver<Arc<Frame>>,
    queued: Arc<AtomicUsize>,
    id: u64,
    key: Key,
    hub: Arc<Hub>,
}

impl Subscription {
    /// The next frame; `None` once the hub has let go and the buffer is empty.
    pub async fn recv(&mut self) -> Option<Arc<Frame>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// [`Subscription::recv`] as a poll.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Arc<Frame>>> {
        let got = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(frame)) = &got {
            self.queued.fetch_sub(frame.json.len(), Ordering::Relaxed);
        }
        got
    }

    /// A frame already buffered, if any.
    pub fn try_recv(&mut self) -> Result<Arc<Frame>, mpsc::error::TryRecvError> {
        let frame = self.rx.try_recv()?;
        self.queued.fetch_sub(frame.json.len(), Ordering::Relaxed);
        Ok(frame)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub
            .open
            .lock()
            .expect("hub lock")
            .forget(&self.key, self.id);
        self.hub.leave(&self.key, self.id);
    }
}

impl Hub {
    /// A hub with at most `buffer` frames and `buffer_bytes` bytes of frames
    /// (past the first) per subscriber.
    pub fn new(
        buffer: usize,
        buffer_bytes: usize,
        policy: LagPolicy,
        limits: StreamLimits,
    ) -> Arc<Hub> {
        Arc::new(Hub {
            subs: Mutex::new(HashMap::new()),
            open: Mutex::new(Open::default()),
            next_id: AtomicU64::new(1),
            buffer: buffer.max(1),
            buffer_bytes: buffer_bytes.max(1),
            policy,
            limits,
            stats: CommsStats::default(),
        })
    }

    /// The lag policy in force.
    pub fn policy(&self) -> LagPolicy {
        self.policy
    }

    /// Subscriptions alive now (streams open), in every list.
    pub fn open_streams(&self) -> usize {
        self.open.lock().expect("hub lock").total()
    }

    /// Takes subscriber `id` off list `key` (its stream ends after what is
    /// buffered).
    fn leave(&self, key: &Key, id: u64) {
        let mut subs = self.subs.lock().expect("hub lock");
        if let Some(list) = subs.get_mut(key) {
            let before = list.len();
            list.retain(|s| s.id != id);
            if list.len() < before {
                self.stats.subscribers.fetch_sub(1, Ordering::Relaxed);
            }
            if list.is_empty() {
                subs.remove(key);
            }
        }
    }

    /// Subscribes `client` (its peer address; `None`: not counted per
    /// client) to a list, unless a stream cap is reached. A full list still
    /// takes a client holding at least two streams fewer on it than the
    /// address holding the most: that address's oldest stream there is
    /// ended (after what is buffered; its client reconnects) to make room.
    pub fn subscribe(
        self: &Arc<Self>,
        key: Key,
        client: Option<IpAddr>,
    ) -> Result<Subscription, StreamsFull> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut evicted = None;
        {
            let mut open = self.open.lock().expect("hub lock");
            let total = open.total();
            let on_list = open.streams.get(&key).map_or(0, Vec::len);
            let of_client = client.map_or(0, |c| open.per_client.get(&c).copied().unwrap_or(0));
            let full = if total >= self.limits.total {
                Some(StreamsFull::Process(self.limits.total))
            } else if on_list >= self.limits.per_list {
                let victim = client
                    .filter(|_| of_client < self.limits.per_client)
                    .and_then(|c| open.fair_victim(&key, c));
                match victim {
                    Some(victim) if open.forget(&key, victim) => {
                        evicted = Some(victim);
                        None
                    }
                    _ => Some(StreamsFull::List(self.limits.per_list)),
                }
            } else if of_client >= self.limits.per_client {
                Some(StreamsFull::Client(self.limits.per_client))
            } else {
                None
            };
            if let Some(full) = full {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                return Err(full);
            }
            if let Some(c) = client {
                *open.per_client.entry(c).or_default() += 1;
            }
            open.streams
                .entry(key.clone())
                .or_default()
                .push((id, client));
        }
        if let Some(victim) = evicted {
            self.leave(&key, victim);
            self.stats
                .evicted_for_fairness
                .fetch_add(1, Ordering::Relaxed);
        }
        let (tx, rx) = mpsc::channel(self.buffer);
        let queued = Arc::new(AtomicUsize::new(0));
        self.subs
            .lock()
            .expect("hub lock")
            .entry(key.clone())
            .or_default()
            .push(Sub {
                id,
                tx,
                queued: Arc::clone(&queued),
            });
        self.stats.subscribers.fetch_add(1, Ordering::Relaxed);
        self.stats
            .subscriptions_total
            .fetch_add(1, Ordering::Relaxed);
        Ok(Subscription {
            rx,
            queued,
            id,
            key,
            hub: Arc::clone(self),
        })
    }

    /// Delivers a frame to its scope's list and, when durable, the global list.
    pub fn publish(&self, frame: &Arc<Frame>) {
        let mut subs = self.subs.lock().expect("hub lock");
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
            // Over the byte budget counts as a full buffer; an empty buffer
            // takes any one frame, so no frame is too large to deliver.
            let sent = if queued > 0 && size > room {
                Err(mpsc::error::TrySendError::Full(Arc::clone(frame)))
            } else {
                s.tx.try_send(Arc::clone(frame))
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
                    if !frame.env.critical {
                        stats.dropped_transient.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    match self.policy {
                        LagPolicy::Disconnect => {
                            stats.lagged_disconnects.fetch_add(1, Ordering::Relaxed);
                            stats.subscribers.fetch_sub(1, Ordering::Relaxed);
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
        let mut subs = self.subs.lock().expect("hub lock");
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

    const UNCAPPED: StreamLimits = StreamLimits {
        total: usize::MAX,
        per_list: usize::MAX,
        per_client: usize::MAX,
    };

    fn durable(seq: u64) -> Arc<Frame> {
        Frame::new(Envelope {
            id: Some(seq),
            scope: Scope::Session,
            scope_id: "s".into(),
            seq: Some(seq),
            after_seq: None,
            critical: true,
            ts: String::new(),
            event: Event::TurnCompleted(TurnRef {
                turn_id: "t".into(),
            }),
        })
    }

    #[test]
    fn full_buffer_disconnects_under_disconnect_policy() {
        let hub = Hub::new(2, usize::MAX, LagPolicy::Disconnect, UNCAPPED);
        let mut sub = hub
            .subscribe(Key::Scope(Scope::Session, "s".into()), None)
            .unwrap();
        for seq in 1..=3 {
            hub.publish(&durable(seq));
        }
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(2));
        assert!(matches!(
            sub.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(hub.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn full_buffer_skips_in_order_under_skip_policy() {
        let hub = Hub::new(2, usize::MAX, LagPolicy::Skip, UNCAPPED);
        let mut sub = hub.subscribe(Key::Global, None).unwrap();
        for seq in 1..=3 {
            hub.publish(&durable(seq));
        }
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        hub.publish(&durable(4));
        let rest: Vec<_> = std::iter::from_fn(|| sub.try_recv().ok())
            .map(|f| f.env.seq.unwrap())
            .collect();
        assert_eq!(rest, vec![2, 4]);
        assert_eq!(hub.stats.skipped_durable.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn dropping_a_subscription_unsubscribes() {
        let hub = Hub::new(4, usize::MAX, LagPolicy::Skip, UNCAPPED);
        let sub = hub.subscribe(Key::Global, None).unwrap();
        assert_eq!(hub.stats.subscribers.load(Ordering::Relaxed), 1);
        drop(sub);
        assert_eq!(hub.stats.subscribers.load(Ordering::Relaxed), 0);
        hub.publish(&durable(1));
    }

    #[test]
    fn skip_policy_ends_a_stream_rather_than_drop_a_critical_transient() {
        let hub = Hub::new(1, usize::MAX, LagPolicy::Skip, UNCAPPED);
        let key = Key::Scope(Scope::Session, "s".into());
        let mut sub = hub.subscribe(key, None).unwrap();
        hub.publish(&durable(1));
        hub.publish(&Frame::new(Envelope {
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
        assert_eq!(hub.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn stream_caps_count_until_the_subscription_is_dropped() {
        let limits = StreamLimits {
            total: 3,
            per_list: 2,
            per_client: usize::MAX,
        };
        let hub = Hub::new(4, usize::MAX, LagPolicy::Disconnect, limits);
        let a = || Key::Scope(Scope::Session, "a".into());
        let a1 = hub.subscribe(a(), None).unwrap();
        let _a2 = hub.subscribe(a(), None).unwrap();
        assert_eq!(hub.subscribe(a(), None).err(), Some(StreamsFull::List(2)));
        let _g = hub.subscribe(Key::Global, None).unwrap();
        assert_eq!(
            hub.subscribe(Key::Global, None).err(),
            Some(StreamsFull::Process(3))
        );
        // Let go of by the hub, still open until its stream drops it.
        hub.close_all();
        assert_eq!(hub.open_streams(), 3);
        drop(a1);
        assert_eq!(hub.open_streams(), 2);
        assert!(hub.subscribe(a(), None).is_ok());
    }

    #[test]
    fn a_full_list_makes_room_for_a_client_with_two_fewer() {
        let limits = StreamLimits {
            total: usize::MAX,
            per_list: 2,
            per_client: usize::MAX,
        };
        let hub = Hub::new(4, usize::MAX, LagPolicy::Disconnect, limits);
        let a = || Key::Scope(Scope::Session, "a".into());
        let ip = |n: u8| Some(IpAddr::from([127, 0, 0, n]));
        let mut old = hub.subscribe(a(), ip(2)).unwrap();
        let _new = hub.subscribe(a(), ip(2)).unwrap();
        let _other = hub.subscribe(a(), ip(3)).unwrap();
        // 127.0.0.2's oldest was ended for 127.0.0.3 and no longer counts.
        assert!(matches!(
            old.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(hub.open_streams(), 2);
        assert_eq!(hub.stats.evicted_for_fairness.load(Ordering::Relaxed), 1);
        drop(old);
        assert_eq!(hub.open_streams(), 2);
        // One each: nobody gives way, to either or to a third address, nor
        // to a stream counted for no client.
        for client in [ip(2), ip(3), ip(4), None] {
            assert_eq!(hub.subscribe(a(), client).err(), Some(StreamsFull::List(2)));
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
        let hub = Hub::new(1024, 10_000, LagPolicy::Disconnect, UNCAPPED);
        let mut sub = hub
            .subscribe(Key::Scope(Scope::Session, "s".into()), None)
            .unwrap();
        // One frame larger than the whole budget still fits an empty buffer.
        hub.publish(&team_message(1, 20_000));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(1));
        for seq in 2..=3 {
            hub.publish(&team_message(seq, 4_000));
        }
        hub.publish(&team_message(4, 4_000));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(2));
        assert_eq!(sub.try_recv().unwrap().env.seq, Some(3));
        assert!(matches!(
            sub.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(hub.stats.lagged_disconnects.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_client_holds_at_most_its_share_of_subscriptions() {
        let limits = StreamLimits {
            total: 10,
            per_list: 10,
            per_client: 2,
        };
        let hub = Hub::new(4, usize::MAX, LagPolicy::Disconnect, limits);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let a1 = hub.subscribe(Key::Global, Some(a)).unwrap();
        let _a2 = hub.subscribe(Key::Global, Some(a)).unwrap();
        assert_eq!(
            hub.subscribe(Key::Global, Some(a)).err(),
            Some(StreamsFull::Client(2))
        );
        let _b1 = hub.subscribe(Key::Global, Some(b)).unwrap();
        drop(a1);
        assert!(hub.subscribe(Key::Global, Some(a)).is_ok());
    }
}
