//! Group commit: the appends one node makes at the same time share a
//! transaction. Each append queues itself; whoever gets one of
//! [`IN_FLIGHT`] slots takes everything queued (up to [`GROUP_MAX`]) and
//! commits it as one transaction: one statement takes every log's seqs,
//! one the ids, one commit, one wake-up for the whole group, instead of
//! each of those per event. Under light load a group is one append, as
//! before. Every append still returns only after its transaction committed.
//!
//! A group whose staging fails (an event of a turn this node no longer
//! holds, a deadlock) rolls back, and each of its appends is then tried
//! alone, so one refused event never fails the others (unless Postgres is
//! unreachable: then every append of it gets that error at once). A commit whose
//! outcome is unknown (the connection lost after `COMMIT` was sent) is
//! never retried: every append of it gets the error, as a lone append
//! would.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::Pool;
use replay_core::protocol::{Event, Scope};
use tokio::sync::{oneshot, Notify, Semaphore};

use super::append::{stage_many, Holder, Item};
use super::tx::{Committed, WriteTx};
use crate::store::{StoreError, StoreResult};

/// Group transactions of one node in flight at once (the others queue).
/// One: the appends made while a group commits all wait for the next
/// group, so groups are larger and a node sends fewer commits, sequencer
/// statements and wake-ups (each wakes every other node's follower for a
/// read of the log). With two, the 2-node cluster bench committed ~1.8
/// events per transaction and Postgres spent twice the CPU per event on
/// 1 node; a slot waiting for Postgres also holds up nothing
/// else: reads and the follower have their own connections.
const IN_FLIGHT: usize = 1;

/// Most appends in one group.
const GROUP_MAX: usize = 64;

/// Longest a busy node's group waits for more appends before it commits
/// (see [`gather_target`]).
const LINGER: Duration = Duration::from_millis(1);

/// A group this large commits without waiting for more.
const ENOUGH: usize = 8;

/// How many appends a group waits for, up to [`LINGER`], given the size of
/// the group before it: none after a lone append (one writer at a time
/// must not wait) or after a group of [`ENOUGH`], else [`ENOUGH`]. Each
/// commit costs Postgres about as much as a handful of events: with the
/// writers of a cluster spread over its nodes, groups without this held ~2
/// events each on 2 and 3 nodes against ~5 on one, and Postgres spent
/// twice the CPU per event.
pub fn gather_target(previous: usize) -> Option<usize> {
    (2..ENOUGH).contains(&previous).then_some(ENOUGH)
}

/// An append's place in its committed group: every event of the group (in
/// id order, contiguous ids) and which one is this append's.
#[derive(Clone)]
pub struct Grouped {
    /// The group's events with their logs' epochs.
    pub group: Arc<[Committed]>,
    /// This append's index in `group`.
    pub at: usize,
}

impl Grouped {
    /// This append's own event and its log's epoch.
    pub fn own(&self) -> &Committed {
        &self.group[self.at]
    }
}

/// One queued append.
struct Request {
    scope: Scope,
    scope_id: String,
    event: Event,
    owner: Arc<str>,
    done: oneshot::Sender<StoreResult<Grouped>>,
}

/// Counts for `/v1/diagnostics` and the test that groups form.
#[derive(Default, Debug)]
pub struct GroupStats {
    /// Append transactions committed.
    pub commits: AtomicU64,
    /// Events they held.
    pub events: AtomicU64,
}

/// The appends of one node waiting for a group.
pub struct Groups {
    queue: Mutex<Vec<Request>>,
    /// Signalled at each append queued (a gathering group counts them).
    queued: Notify,
    /// Appends in the group committed last.
    previous: AtomicUsize,
    slots: Semaphore,
    /// Commits and events so far.
    pub stats: GroupStats,
}

impl Default for Groups {
    fn default() -> Groups {
        Groups {
            queue: Mutex::default(),
            queued: Notify::new(),
            previous: AtomicUsize::new(0),
            slots: Semaphore::new(IN_FLIGHT),
            stats: GroupStats::default(),
        }
    }
}

/// What a group needs from its node: the pool, the node's tag (the
/// wake-up's payload) and its lease length.
pub struct Node<'a> {
    /// Connections.
    pub pool: &'a Pool,
    /// The node's tag.
    pub tag: &'a Arc<str>,
    /// How long a lease lasts, in seconds.
    pub lease_secs: f64,
}

impl Groups {
    /// Appends `event` to its log, in a group with whatever else this node
    /// appends meanwhile; returns once that group has committed.
    pub async fn append(
        &self,
        node: &Node<'_>,
        scope: Scope,
        scope_id: &str,
        event: Event,
        owner: Arc<str>,
    ) -> StoreResult<Grouped> {
        let (done, mut rx) = oneshot::channel();
        self.lock().push(Request {
            scope,
            scope_id: scope_id.to_owned(),
            event,
            owner,
            done,
        });
        self.queued.notify_one();
        loop {
            tokio::select! {
                biased;
                out = &mut rx => return out.unwrap_or_else(|_| Err(abandoned())),
                permit = self.slots.acquire() => {
                    let _permit = permit.map_err(|_| abandoned())?;
                    self.gather().await;
                    let batch = {
                        let mut q = self.lock();
                        let n = q.len().min(GROUP_MAX);
                        q.drain(..n).collect::<Vec<_>>()
                    };
                    if batch.is_empty() {
                        // Ours is in a group another append is committing.
                        drop(_permit);
                        return rx.await.unwrap_or_else(|_| Err(abandoned()));
                    }
                    self.previous.store(batch.len(), Ordering::Relaxed);
                    self.run(node, batch).await;
                }
            }
        }
    }

    /// Waits, up to [`LINGER`], until the queue holds [`gather_target`]
    /// appends (no wait after a lone append).
    async fn gather(&self) {
        let Some(target) = gather_target(self.previous.load(Ordering::Relaxed)) else {
            return;
        };
        let deadline = tokio::time::Instant::now() + LINGER;
        while self.lock().len() < target {
            if tokio::time::timeout_at(deadline, self.queued.notified())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Request>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits `batch` as one transaction and answers each append.
    async fn run(&self, node: &Node<'_>, mut batch: Vec<Request>) {
        // Logs locked in key order (see `stage_many`); a stable sort keeps
        // each log's appends in arrival order.
        batch.sort_by(|a, b| (a.scope.as_str(), &a.scope_id).cmp(&(b.scope.as_str(), &b.scope_id)));
        match self.commit(node, &batch).await {
            Ok(group) => answer(batch, Ok(group)),
            // Postgres unreachable: trying each alone would only wait again.
            Err(Failed::Staging(e)) if batch.len() == 1 || e.is_unavailable() => {
                answer(batch, Err(e))
            }
            Err(Failed::Staging(_)) => {
                // Each alone: one refused event must not fail the others.
                for r in batch {
                    let alone = std::slice::from_ref(&r);
                    let out = self.commit(node, alone).await.map_err(Failed::into_error);
                    answer(vec![r], out);
                }
            }
            Err(Failed::Commit(e)) => answer(batch, Err(e)),
        }
    }

    async fn commit(&self, node: &Node<'_>, batch: &[Request]) -> Result<Arc<[Committed]>, Failed> {
        let mut tx = WriteTx::begin(node.pool, node.tag)
            .await
            .map_err(Failed::Staging)?;
        let items: Vec<Item<'_>> = batch
            .iter()
            .map(|r| Item {
                scope: r.scope,
                scope_id: &r.scope_id,
                event: &r.event,
                holder: Holder {
                    owner: &r.owner,
                    lease_secs: node.lease_secs,
                },
            })
            .collect();
        let staged = match stage_many(&mut tx, &items).await {
            Ok(staged) => staged,
            Err(e) => {
                tx.rollback().await;
                return Err(Failed::Staging(e));
            }
        };
        let group = tx
            .commit_with_epochs(staged)
            .await
            .map_err(Failed::Commit)?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        self.stats
            .events
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        Ok(group.into())
    }
}

/// Why a group wrote nothing for sure ([`Failed::Staging`]: rolled back,
/// may be retried) or may have written ([`Failed::Commit`]: never retried).
enum Failed {
    Staging(StoreError),
    Commit(StoreError),
}

impl Failed {
    fn into_error(self) -> StoreError {
        match self {
            Failed::Staging(e) | Failed::Commit(e) => e,
        }
    }
}

/// Sends each append of `batch` its place in `group` (or the error).
fn answer(batch: Vec<Request>, out: StoreResult<Arc<[Committed]>>) {
    match out {
        Ok(group) => {
            for (at, r) in batch.into_iter().enumerate() {
                let group = Arc::clone(&group);
                let _ = r.done.send(Ok(Grouped { group, at }));
            }
        }
        Err(e) if batch.len() == 1 => {
            // A lone append's own error, as it was (`NotHeld` is matched).
            if let Some(r) = batch.into_iter().next() {
                let _ = r.done.send(Err(e));
            }
        }
        Err(e) => {
            let shared = Arc::new(e);
            for r in batch {
                let _ = r.done.send(Err(StoreError::Shared(Arc::clone(&shared))));
            }
        }
    }
}

/// The append's group was dropped unanswered (its committer panicked).
fn abandoned() -> StoreError {
    StoreError::Backend("an append's group was abandoned".into())
}

#[cfg(test)]
mod tests {
    use super::{gather_target, ENOUGH};

    #[test]
    fn a_lone_writer_never_waits_and_small_groups_wait_for_enough() {
        assert_eq!(gather_target(0), None, "nothing committed yet");
        assert_eq!(gather_target(1), None, "one writer at a time");
        for previous in 2..ENOUGH {
            assert_eq!(gather_target(previous), Some(ENOUGH), "{previous}");
        }
        assert_eq!(gather_target(ENOUGH), None, "large enough already");
        assert_eq!(gather_target(64), None);
    }
}
