//! The live worker: state that exists only while this run of the runtime is
//! alive (the `live_turn` overlays, running turns, answer channels). A worker
//! restart drops it wholesale; only the store survives.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use replay_core::protocol::LiveTurn;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;

/// An answer on its way to a waiting turn, with the acknowledgement sent once
/// `question.answered` is committed.
pub type AnswerMsg = (String, oneshot::Sender<()>);

/// The turn a session is running now.
#[derive(Clone)]
pub struct RunningTurn {
    /// The turn.
    pub turn_id: String,
    /// Wakes the turn to cancel it.
    pub cancel: Arc<Notify>,
}

/// Live state of one session.
#[derive(Default)]
pub struct LiveState {
    /// The overlay (PROTOCOL.md §5).
    pub live_turn: Option<LiveTurn>,
    /// The running turn.
    pub running: Option<RunningTurn>,
    /// Questions waiting for an answer, persisted or not.
    pub questions: HashMap<String, mpsc::Sender<AnswerMsg>>,
    /// When the session started waiting on background tasks.
    pub bg_since: Option<String>,
}

/// One session's live part.
#[derive(Default)]
pub struct SessionLive {
    state: Mutex<LiveState>,
    /// Turns accepted and not finished (running or queued).
    pending: AtomicUsize,
    /// Turns this worker accepted and has not finished, in the order they
    /// were accepted: only the first may run (see [`SessionLive::wait_first`]),
    /// so a session's turns run one at a time.
    /// Its own lock, taken last and alone: it is pushed to under the store's
    /// lock, while a running turn holds [`LiveState`] and appends.
    queue: Mutex<VecDeque<String>>,
    /// Woken when a turn leaves the queue.
    queue_moved: Notify,
}

impl SessionLive {
    /// Locks the live state (short sections only; some wait for the store
    /// meanwhile, so a wait here hands the runtime's other tasks over).
    pub fn lock(&self) -> MutexGuard<'_, LiveState> {
        crate::util::lock_handing_off(&self.state)
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once `turn_id` is the first of the turns this worker accepted
    /// for the session and has not finished. Turn tasks may start in any
    /// order; this puts them back in the order they were accepted.
    pub async fn wait_first(&self, turn_id: &str) {
        loop {
            // Armed before the look, so a move meanwhile still wakes.
            let moved = self.queue_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.queue().front().is_none_or(|t| t == turn_id) {
                return;
            }
            moved.await;
        }
    }
}

/// One life of the worker.
pub struct Worker {
    /// This run's boot id.
    pub boot_id: String,
    sessions: Mutex<HashMap<String, Arc<SessionLive>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    rev: AtomicU64,
    /// Turns accepted and not finished, in every session.
    pending: AtomicUsize,
    /// Turns this worker gave up on after a store error, newest last (at
    /// most [`ABANDONED_KEPT`]): on a shared store their leases are let run
    /// out, so that a node ends them (`app::keep_leases`).
    abandoned: Mutex<Vec<String>>,
}

/// How many abandoned turns a worker remembers.
const ABANDONED_KEPT: usize = 1024;

/// Which cap refused a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TurnsFull {
    /// The session has this many turns running or queued.
    #[error("this session has {0} turns running or queued (--max-queued-turns)")]
    Session(usize),
    /// The process has this many.
    #[error("this server has {0} turns running or queued (--max-queued-turns-total)")]
    Process(usize),
}

/// A turn's place in the caps of [`Worker::reserve_turn`], given back when
/// the turn is dropped (finished, cancelled, aborted by a restart) or never
/// started (a retried message).
pub struct TurnSlot {
    worker: Arc<Worker>,
    session: Arc<SessionLive>,
    /// The turn it holds a place in the session's queue for.
    turn: Option<String>,
}

impl TurnSlot {
    /// Puts `turn_id` at the back of its session's queue. Called in the
    /// order turns are accepted (under the store's writer lock, where their
    /// numbers are given).
    pub fn enqueue(&mut self, turn_id: &str) {
        self.session.queue().push_back(turn_id.to_owned());
        self.turn = Some(turn_id.to_owned());
    }
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        if let Some(turn) = self.turn.take() {
            self.session.queue().retain(|t| *t != turn);
            self.session.queue_moved.notify_waiters();
        }
        self.session.pending.fetch_sub(1, Ordering::Relaxed);
        self.worker.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Adds one to `n` unless it is at `cap`.
fn take(n: &AtomicUsize, cap: usize) -> bool {
    n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        (v < cap).then_some(v + 1)
    })
    .is_ok()
}

impl Worker {
    /// A fresh worker with no live state.
    pub fn new(boot_id: String) -> Arc<Worker> {
        Arc::new(Worker {
            boot_id,
            sessions: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            rev: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            abandoned: Mutex::new(Vec::new()),
        })
    }

    /// Gives up on a turn that a store error stopped before its end was written.
    pub fn abandon(&self, turn_id: &str) {
        let mut list = self.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() >= ABANDONED_KEPT {
            list.remove(0);
        }
        list.push(turn_id.to_owned());
    }

    /// The turns given up on (see [`Worker::abandon`]).
    pub fn abandoned(&self) -> Vec<String> {
        self.abandoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A place for one more turn, unless the session has `per_session`
    /// turns running or queued, or the worker `total`.
    pub fn reserve_turn(
        self: &Arc<Self>,
        session_id: &str,
        per_session: usize,
        total: usize,
    ) -> Result<TurnSlot, TurnsFull> {
        let session = self.session(session_id);
        if !take(&session.pending, per_session) {
            return Err(TurnsFull::Session(per_session));
        }
        if !take(&self.pending, total) {
            session.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(TurnsFull::Process(total));
        }
        Ok(TurnSlot {
            worker: Arc::clone(self),
            session,
            turn: None,
        })
    }

    /// The map of sessions. Every turn, message and stream of the node
    /// needs it, so no session's lock is taken while it is held: that one
    /// may be held across a Postgres round trip. Take the `Arc`, let the map
    /// go, then lock the session.
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<SessionLive>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session's live part, created on first use.
    pub fn session(&self, session_id: &str) -> Arc<SessionLive> {
        Arc::clone(self.sessions().entry(session_id.to_owned()).or_default())
    }

    /// The session's overlay now.
    pub fn live_turn(&self, session_id: &str) -> Option<LiveTurn> {
        let live = self.sessions().get(session_id).cloned();
        live.and_then(|s| s.lock().live_turn.clone())
    }

    /// The next overlay revision (increasing across the whole boot).
    pub fn next_rev(&self) -> u64 {
        self.rev.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Tracks a task so that a restart can stop it.
    pub fn track(&self, handle: JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|h| !h.is_finished());
        tasks.push(handle);
    }

    /// Stops every turn and background task of this worker. A task stops
    /// at its next `.await`: the writes it makes before then still land.
    /// The handles returned resolve once each has stopped, after which no
    /// task of this worker writes again.
    pub fn stop(&self) -> Vec<JoinHandle<()>> {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in &tasks {
            t.abort();
        }
        self.sessions().clear();
        tasks
    }

    /// Number of running turns (diagnostics).
    pub fn running_turns(&self) -> usize {
        let sessions: Vec<Arc<SessionLive>> = self.sessions().values().cloned().collect();
        sessions
            .iter()
            .filter(|s| s.lock().running.is_some())
            .count()
    }
}
