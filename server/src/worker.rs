//! The live worker: state that exists only while this run of the runtime is
//! alive (the `live_turn` overlays, running turns, answer channels). A worker
//! restart drops it wholesale; only the store survives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use replay_core::protocol::LiveTurn;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::AbortHandle;

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
    /// Turns of a session run one at a time, in arrival order (fair lock).
    pub turn_lock: tokio::sync::Mutex<()>,
}

impl SessionLive {
    /// Locks the live state (short sections only).
    pub fn lock(&self) -> MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One life of the worker.
pub struct Worker {
    /// This run's boot id.
    pub boot_id: String,
    sessions: Mutex<HashMap<String, Arc<SessionLive>>>,
    tasks: Mutex<Vec<AbortHandle>>,
    rev: AtomicU64,
}

impl Worker {
    /// A fresh worker with no live state.
    pub fn new(boot_id: String) -> Arc<Worker> {
        Arc::new(Worker {
            boot_id,
            sessions: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            rev: AtomicU64::new(0),
        })
    }

    /// The session's live part, created on first use.
    pub fn session(&self, session_id: &str) -> Arc<SessionLive> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(sessions.entry(session_id.to_owned()).or_default())
    }

    /// The session's overlay now.
    pub fn live_turn(&self, session_id: &str) -> Option<LiveTurn> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .get(session_id)
            .and_then(|s| s.lock().live_turn.clone())
    }

    /// The next overlay revision (increasing across the whole boot).
    pub fn next_rev(&self) -> u64 {
        self.rev.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Tracks a task so that a restart can stop it.
    pub fn track(&self, handle: AbortHandle) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|h| !h.is_finished());
        tasks.push(handle);
    }

    /// Stops every turn and background task of this worker.
    pub fn stop(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            t.abort();
        }
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Number of running turns (diagnostics).
    pub fn running_turns(&self) -> usize {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .values()
            .filter(|s| s.lock().running.is_some())
            .count()
    }
}
