//! Shared server state and the operations that span store, fan-out and worker.

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use replay_core::protocol::{
    BackgroundWait, Event, LiveTurn, LiveTurnSnapshot, Scope, Task, TaskState, TasksSnapshot,
};

use crate::budget::{ResponseBudget, StreamBudget};
use crate::cluster::{Cluster, Renewed};
use crate::config::Config;
use crate::fanout::{Fanout, StreamLimits};
use crate::faults::Faults;
use crate::log::Log;
use crate::net::Connections;
use crate::recovery;
use crate::store::StoreResult;
use crate::util::{now_rfc3339, random_id};
use crate::worker::Worker;

/// Everything a handler needs.
pub struct App {
    /// Configuration.
    pub cfg: Config,
    /// Store + fan-out.
    pub log: Log,
    /// Fault injection.
    pub faults: Faults,
    /// The link to the other nodes when the store is a cluster's shared log
    /// (Postgres), held once: `None` on SQLite.
    pub cluster: Option<Cluster>,
    worker: RwLock<Arc<Worker>>,
    /// Held to read by a message's acceptance until its turn is started,
    /// and to write by a worker restart: a turn is accepted and started on
    /// one worker, which a restart then stops (its recovery pass ends the
    /// turn), or after the restart on the new one, never accepted before
    /// the recovery pass and started after it (ended twice).
    turn_starts: tokio::sync::RwLock<()>,
    /// When this process started.
    pub started_at: String,
    last_recovery: Mutex<serde_json::Value>,
    /// SSE responses (scoped and multiplexed) whose body is still open.
    pub streams_open: Arc<std::sync::atomic::AtomicU64>,
    /// The connection slots (`--max-connections`).
    pub conns: Connections,
    /// Bytes of large JSON answers in flight (`--max-response-bytes`).
    pub responses: ResponseBudget,
    /// Bytes of stream output buffered (`--max-stream-buffer-bytes`),
    /// shared with the fan-out (its subscriber buffers).
    pub streams: Arc<StreamBudget>,
    /// False once a look found no deferred team delivery and none was
    /// deferred since (`team::deliver_deferred` skips its query then).
    pub deliveries_deferred: std::sync::atomic::AtomicBool,
    handover: tokio::sync::mpsc::UnboundedSender<Handover>,
    handover_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Handover>>>,
}

/// Work the live worker takes over from the parts that end turns (a turn's
/// own end, the reaping of a lost node's turns), carried out by the
/// `resume` task (`resume::start`).
#[derive(Debug)]
pub enum Handover {
    /// A turn of the session ended: it may take a deferred team message.
    SessionReady(String),
    /// Turns waiting for an answer that this node adopted: start their
    /// waiters.
    Adopted(Vec<recovery::Waiting>),
}

impl App {
    /// Opens the store, runs startup recovery and starts a worker; returns
    /// what the worker goes on with (`resume::go_on`).
    pub fn boot(cfg: Config) -> StoreResult<(Arc<App>, recovery::Recovered)> {
        let limits = StreamLimits {
            total: cfg.max_streams,
            per_list: cfg.max_streams_per_scope,
            per_client: cfg.max_streams_per_client,
        };
        let streams = Arc::new(StreamBudget::new(cfg.max_stream_buffer_bytes));
        let fanout = Fanout::new(
            cfg.subscriber_buffer,
            cfg.subscriber_buffer_bytes,
            cfg.lag_policy,
            limits,
            Arc::clone(&streams),
        );
        let lease = Duration::from_millis(cfg.turn_lease_ms.max(1));
        let log = Log::open(&cfg.db, cfg.synchronous, fanout, lease)?;
        if let Some(url) = &cfg.redis {
            log.start_tail(url, lease)
                .map_err(|e| crate::store::StoreError::Backend(e.to_string()))?;
        }
        let boot_id = random_id("b");
        let recovered = recovery::recover(&log, &boot_id)?;
        let cfg_conns = (cfg.max_connections, cfg.max_connections_per_address);
        let (handover, handover_rx) = tokio::sync::mpsc::unbounded_channel();
        let app = Arc::new(App {
            faults: Faults::new(cfg.faults),
            cluster: Cluster::of(&log),
            responses: ResponseBudget::new(cfg.max_response_bytes),
            streams,
            cfg,
            log,
            worker: RwLock::new(Worker::new(boot_id)),
            turn_starts: tokio::sync::RwLock::new(()),
            started_at: now_rfc3339(),
            last_recovery: Mutex::new(recovered.report.clone()),
            streams_open: Arc::default(),
            conns: Connections::new(cfg_conns.0, cfg_conns.1),
            deliveries_deferred: std::sync::atomic::AtomicBool::new(true),
            handover,
            handover_rx: Mutex::new(Some(handover_rx)),
        });
        if let Some(cluster) = &app.cluster {
            let weak = Arc::downgrade(&app);
            let renewed = cluster.renew_leases(&app.cfg.db, lease, move || {
                let worker = weak.upgrade()?.worker();
                Some((worker.boot_id.clone(), worker.abandoned()))
            });
            tokio::spawn(reap_expired(Arc::downgrade(&app), lease, renewed));
        }
        Ok((app, recovered))
    }

    /// Queues work for the `resume` task (dropped once the app is going).
    pub fn hand_over(&self, work: Handover) {
        let _ = self.handover.send(work);
    }

    /// The queue of [`App::hand_over`], once (for `resume::start`).
    pub fn take_handover(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Handover>> {
        self.handover_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The live worker.
    pub fn worker(&self) -> Arc<Worker> {
        Arc::clone(&self.worker.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// What the last recovery pass did.
    pub fn last_recovery(&self) -> serde_json::Value {
        self.last_recovery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Adds what a reaping pass did ([`recovery::reap`]) to the report of
    /// `/v1/diagnostics/recovery`: its lists grow (each keeps its newest
    /// [`REAPED_KEPT`]), `reaped_at` says when.
    fn note_reaped(&self, reaped: serde_json::Value) {
        let mut report = self.last_recovery.lock().unwrap_or_else(|e| e.into_inner());
        let serde_json::Value::Object(fields) = reaped else {
            return;
        };
        for (key, items) in fields {
            let serde_json::Value::Array(items) = items else {
                continue;
            };
            let list = report[key.as_str()].as_array().cloned().unwrap_or_default();
            let mut list: Vec<serde_json::Value> = list.into_iter().chain(items).collect();
            let over = list.len().saturating_sub(REAPED_KEPT);
            list.drain(..over);
            report[key.as_str()] = serde_json::Value::Array(list);
        }
        report["reaped_at"] = serde_json::Value::String(now_rfc3339());
    }

    /// Held while a message is accepted and its turn started: no worker
    /// restart comes in between.
    pub async fn turn_start(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.turn_starts.read().await
    }

    /// In-process restart: stop live work, run startup recovery, new boot id,
    /// end every stream (clients reconnect and see the new boot id). Returns
    /// the boot id and what the new worker goes on with (`resume::go_on`).
    pub async fn restart_worker(&self) -> StoreResult<(String, recovery::Recovered)> {
        let _guard = self.turn_starts.write().await;
        let old = self.worker();
        // The recovery pass reads the log once the old worker's tasks wrote
        // their last: one still writing would end a turn the pass also ends.
        for stopped in old.stop() {
            let _ = stopped.await;
        }
        let boot_id = random_id("b");
        let recovered = recovery::recover(&self.log, &boot_id)?;
        *self.worker.write().unwrap_or_else(|e| e.into_inner()) = Worker::new(boot_id.clone());
        self.log.forget_live();
        *self.last_recovery.lock().unwrap_or_else(|e| e.into_inner()) = recovered.report.clone();
        self.log.fanout.close_all();
        self.faults.close_streams();
        Ok((boot_id, recovered))
    }

    /// Changes a session's overlay under its lock, bumps `rev`, and publishes
    /// a `live_turn.snapshot` when `snapshot` is set.
    pub fn edit_live(
        &self,
        worker: &Worker,
        session_id: &str,
        snapshot: bool,
        f: impl FnOnce(&mut Option<LiveTurn>),
    ) {
        let live = worker.session(session_id);
        let mut st = live.lock();
        f(&mut st.live_turn);
        if let Some(lt) = st.live_turn.as_mut() {
            lt.rev = worker.next_rev();
        }
        // Before the transients that follow this change (see `crate::tail`).
        self.log.share_live(session_id, st.live_turn.as_ref());
        if snapshot {
            let event = Event::LiveTurnSnapshot(LiveTurnSnapshot {
                live_turn: st.live_turn.clone(),
            });
            // Published under the session lock so snapshots go out in rev order.
            self.log
                .publish_transient(Scope::Session, session_id, event, true);
        }
    }

    /// Changes a session's tasks, recomputes `background_wait`, persists a new
    /// version and publishes it as `tasks.snapshot`.
    pub fn edit_tasks(
        &self,
        worker: &Worker,
        session_id: &str,
        f: impl FnOnce(&mut Vec<Task>),
    ) -> StoreResult<TasksSnapshot> {
        let live = worker.session(session_id);
        let mut st = live.lock();
        let mut db = self.log.db();
        let current = db.tasks(session_id)?;
        let mut tasks = current.tasks;
        f(&mut tasks);
        let waiting: Vec<String> = tasks
            .iter()
            .filter(|t| matches!(t.state, TaskState::Queued | TaskState::Running))
            .map(|t| t.task_id.clone())
            .collect();
        let bg = if st.running.is_none() && !waiting.is_empty() {
            let since = st.bg_since.get_or_insert_with(now_rfc3339).clone();
            Some(BackgroundWait {
                task_ids: waiting,
                since,
            })
        } else {
            st.bg_since = None;
            None
        };
        let snap = db.put_tasks(session_id, &tasks, bg.as_ref())?;
        self.log.publish_tasks(&db, session_id, &snap);
        Ok(snap)
    }
}

/// Entries each list of the recovery report keeps of what reaping did
/// (a node may reap for weeks; the report stays small).
pub const REAPED_KEPT: usize = 1000;

/// On a shared store, while the app lives: every third of a lease, ends
/// what nodes whose lease ran out left open (see [`recovery::reap`]) and
/// reports it. Not in a round whose last successful renewal began more than
/// half a lease ago: this node's own leases may have run out (Postgres was
/// unreachable) and its claim would take its own live work.
async fn reap_expired(app: Weak<App>, lease: Duration, renewed: Renewed) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let fresh = renewed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < lease / 2);
        if !fresh {
            continue;
        }
        let Some(app) = app.upgrade() else { return };
        let reaped = tokio::task::spawn_blocking(move || {
            let reaped = recovery::reap(&app.log);
            if let Ok((report, waiting)) = &reaped {
                if let Some(report) = report {
                    app.note_reaped(report.clone());
                    // Their sessions may take the team messages deferred
                    // while those turns held them.
                    let ended = report["turns_failed"].as_array().into_iter().flatten();
                    for sid in ended.filter_map(|t| t["session_id"].as_str()) {
                        app.hand_over(Handover::SessionReady(sid.to_owned()));
                    }
                }
                if !waiting.is_empty() {
                    app.hand_over(Handover::Adopted(waiting.clone()));
                }
            }
            reaped
        })
        .await;
        if let Ok(Err(e)) = reaped {
            tracing::warn!(error = %e, "ending what a lost node left open failed");
        }
    }
}
