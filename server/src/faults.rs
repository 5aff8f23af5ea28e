//! Fault injection (`--faults`): what `POST /v1/admin/faults` can switch on,
//! and the checks streams and requests make against it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Request classes a `fail_requests` or `delay` fault can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Every non-admin request.
    Any,
    /// `GET .../replay`.
    Replay,
    /// JSON event pages.
    Events,
    /// SSE streams.
    Stream,
    /// `POST .../messages`.
    Messages,
    /// `POST .../questions/{qid}/answer`.
    Answer,
    /// `POST .../cancel`.
    Cancel,
    /// `POST /v1/sessions`.
    Sessions,
    /// `GET .../transcript`.
    Transcript,
    /// `/v1/diagnostics*`.
    Diagnostics,
}

/// One fault request, the body of `POST /v1/admin/faults`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// End every open stream now.
    CloseStreams,
    /// Cut streams after `bytes` more bytes, mid-frame if it falls there.
    /// Applies to every open stream and to the next `count` new ones
    /// (absent: every new stream until cleared).
    CutAfterBytes {
        /// Bytes each stream may still write.
        bytes: u64,
        /// How many new streams it also applies to.
        #[serde(default)]
        count: Option<u64>,
    },
    /// Streams stop writing (connection kept open) for `ms`, or until cleared.
    Stall {
        /// Duration; absent = until `clear`.
        #[serde(default)]
        ms: Option<u64>,
    },
    /// The next `count` live durable frames (across all streams) are not written.
    SkipDurable {
        /// How many.
        count: u64,
    },
    /// The next `count` live durable frames (across all streams) are written twice.
    Duplicate {
        /// How many.
        count: u64,
    },
    /// The next `count` requests of `route` are answered with `status`.
    FailRequests {
        /// Which requests.
        route: Route,
        /// HTTP status, e.g. 500, 503, 429, 400, 401.
        status: u16,
        /// How many requests (default 1).
        #[serde(default = "one")]
        count: u64,
        /// `Retry-After` seconds to send, if any.
        #[serde(default)]
        retry_after: Option<u64>,
        /// The body's error code (default `injected_fault`), e.g.
        /// `invalid_cursor` to exercise a client's restore from 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The next `count` messages accepted are committed, then answered as
    /// if the store's reply had been lost (`500 store_error`): what a
    /// Postgres restart between a commit and its reply does. Their turns
    /// are in the log with no task to run them.
    LoseCommitReply {
        /// How many.
        count: u64,
    },
    /// The next `count` messages accepted wait `ms` between their commit
    /// and their turn's start: the window in which a worker restart may
    /// come (a restart waits for it to close).
    SlowTurnStart {
        /// Milliseconds.
        ms: u64,
        /// How many (default 1).
        #[serde(default = "one")]
        count: u64,
    },
    /// Drop live state, run startup recovery, take a new boot id.
    RestartWorker,
    /// The session's provider reference cannot be resumed: the next
    /// startup recovery fails the session (stored, so it holds across a
    /// restart of the process too).
    ProviderResumeFails {
        /// The session.
        session_id: String,
    },
    /// The next `count` wake-ups of other nodes (Postgres store) are
    /// dropped on arrival, as if lost: the follower must fill the gaps
    /// they leave from the log.
    LoseWakeups {
        /// How many.
        count: u64,
    },
    /// Delay the next `count` responses of `route` (default any) by `ms`.
    Delay {
        /// Milliseconds.
        ms: u64,
        /// How many requests (default 1).
        #[serde(default = "one")]
        count: u64,
        /// Which requests (default any).
        #[serde(default = "any")]
        route: Route,
    },
    /// A lying server for one session's requests (`api/hostile.rs`), for
    /// the client's hardening tests; the latest one given for a session wins.
    Hostile {
        /// The session whose requests it answers.
        session: String,
        /// How it lies.
        shape: Hostile,
    },
    /// Remove every active fault.
    Clear,
}

/// How a `hostile` fault lies to a session's client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hostile {
    /// Streams run as usual, then, 300 ms after their `hello` (once the
    /// client's restore agreed), send a `hello` with a new epoch and end.
    EpochFlipAfterRestore,
    /// Replay pages of 500 new events each, `has_more: true`, under a head
    /// that stays 3.
    EndlessHistory,
    /// Streams send `retry: 0` and their `hello`, then end.
    HelloThenClose,
    /// Streams answer a gzip bomb: one `data:` line of 1 GiB decompressed.
    GzipBombStream,
}

fn one() -> u64 {
    1
}

fn any() -> Route {
    Route::Any
}

#[derive(Clone, Debug, Serialize)]
struct Active {
    id: u64,
    #[serde(flatten)]
    spec: FaultSpec,
    #[serde(skip)]
    until: Option<Instant>,
}

/// A status a `fail_requests` fault decided to answer with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After` seconds.
    pub retry_after: Option<u64>,
    /// The error code of the body, when not `injected_fault`.
    pub error: Option<String>,
}

/// Per-stream fault bookkeeping.
#[derive(Debug, Default)]
pub struct StreamFaults {
    seen_gen: u64,
    claimed_cut: u64,
    /// Bytes this stream may still write before it is cut.
    pub cut_remaining: Option<u64>,
}

/// The active faults.
pub struct Faults {
    enabled: bool,
    gen: AtomicU64,
    active: Mutex<Vec<Active>>,
    next_id: AtomicU64,
    close_tx: watch::Sender<u64>,
}

impl Faults {
    /// Fault state; `enabled` only with `--faults`.
    pub fn new(enabled: bool) -> Faults {
        Faults {
            enabled,
            gen: AtomicU64::new(0),
            active: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            close_tx: watch::channel(0).0,
        }
    }

    /// Whether `/v1/admin/*` exists.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Active>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver that changes whenever every stream must close.
    pub fn close_signal(&self) -> watch::Receiver<u64> {
        self.close_tx.subscribe()
    }

    /// Ends every open stream.
    pub fn close_streams(&self) {
        self.close_tx.send_modify(|g| *g += 1);
    }

    /// Adds a fault (`close_streams`, `restart_worker`, `lose_wakeups` and `clear` act at once
    /// and are handled by the caller). Returns its id.
    pub fn add(&self, spec: FaultSpec) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let until = match &spec {
            FaultSpec::Stall { ms: Some(ms) } => Some(Instant::now() + Duration::from_millis(*ms)),
            _ => None,
        };
        if matches!(spec, FaultSpec::Clear) {
            self.lock().clear();
        } else {
            self.lock().push(Active { id, spec, until });
        }
        self.gen.fetch_add(1, Ordering::Release);
        id
    }

    /// The active faults as JSON.
    pub fn list(&self) -> serde_json::Value {
        let mut active = self.lock();
        let now = Instant::now();
        active.retain(|a| a.until.is_none_or(|u| u > now));
        serde_json::to_value(&*active).unwrap_or_default()
    }

    /// For a stream: picks up cut faults it has not seen yet (called often, cheap
    /// when nothing changed). `new_stream` marks the first call of a stream.
    pub fn refresh_stream(&self, st: &mut StreamFaults, new_stream: bool) {
        let gen = self.gen.load(Ordering::Acquire);
        if !new_stream && gen == st.seen_gen {
            return;
        }
        st.seen_gen = gen;
        let mut active = self.lock();
        // Exhausted cut faults stay listed (count 0) so that open streams that
        // have not written since still pick them up.
        for a in active.iter_mut() {
            if let FaultSpec::CutAfterBytes { bytes, count } = &mut a.spec {
                if a.id <= st.claimed_cut {
                    continue;
                }
                st.claimed_cut = a.id;
                if new_stream {
                    match count {
                        Some(0) => continue,
                        Some(n) => *n -= 1,
                        None => {}
                    }
                }
                st.cut_remaining = Some(st.cut_remaining.map_or(*bytes, |r| r.min(*bytes)));
            }
        }
    }

    /// The hostile shape in force for `session`'s requests, if any.
    pub fn hostile(&self, session: &str) -> Option<Hostile> {
        if !self.enabled {
            return None;
        }
        self.lock().iter().rev().find_map(|a| match &a.spec {
            FaultSpec::Hostile { session: s, shape } if s == session => Some(*shape),
            _ => None,
        })
    }

    /// How long a stream must hold its writes now (`None`: not stalled).
    pub fn stall(&self) -> Option<Option<Instant>> {
        if !self.enabled {
            return None;
        }
        let mut active = self.lock();
        let now = Instant::now();
        active.retain(|a| a.until.is_none_or(|u| u > now));
        active.iter().find_map(|a| match a.spec {
            FaultSpec::Stall { .. } => Some(a.until),
            _ => None,
        })
    }

    /// Counts down the first active fault that `pick` accepts (gone at its
    /// last count) and gives it as it was before.
    fn take_counted(&self, pick: impl Fn(&FaultSpec) -> bool) -> Option<FaultSpec> {
        if !self.enabled {
            return None;
        }
        let mut active = self.lock();
        let i = active.iter().position(|a| pick(&a.spec))?;
        let taken = active[i].spec.clone();
        let done = match &mut active[i].spec {
            FaultSpec::SkipDurable { count }
            | FaultSpec::Duplicate { count }
            | FaultSpec::LoseCommitReply { count }
            | FaultSpec::SlowTurnStart { count, .. } => {
                *count = count.saturating_sub(1);
                *count == 0
            }
            _ => true,
        };
        if done {
            active.remove(i);
        }
        Some(taken)
    }

    /// Whether the next live durable frame is skipped.
    pub fn take_skip(&self) -> bool {
        self.take_counted(|s| matches!(s, FaultSpec::SkipDurable { count } if *count > 0))
            .is_some()
    }

    /// Whether the next live durable frame is duplicated.
    pub fn take_duplicate(&self) -> bool {
        self.take_counted(|s| matches!(s, FaultSpec::Duplicate { count } if *count > 0))
            .is_some()
    }

    /// Whether the next accepted message's reply is lost after its commit.
    pub fn take_lost_commit_reply(&self) -> bool {
        self.take_counted(|s| matches!(s, FaultSpec::LoseCommitReply { count } if *count > 0))
            .is_some()
    }

    /// How long the next accepted message waits before its turn starts.
    pub fn take_slow_turn_start(&self) -> Option<Duration> {
        // Found and counted down under one lock: two requests never both
        // take a fault's last count.
        match self
            .take_counted(|s| matches!(s, FaultSpec::SlowTurnStart { count, .. } if *count > 0))?
        {
            FaultSpec::SlowTurnStart { ms, .. } => Some(Duration::from_millis(ms)),
            _ => None,
        }
    }

    /// Whether a request of `route` must fail, and how.
    pub fn take_failure(&self, route: Route) -> Option<Failure> {
        if !self.enabled {
            return None;
        }
        let mut active = self.lock();
        let i = active.iter().position(|a| {
            matches!(a.spec, FaultSpec::FailRequests { route: r, count, .. } if count > 0 && (r == route || r == Route::Any))
        })?;
        let FaultSpec::FailRequests {
            status,
            count,
            retry_after,
            error,
            ..
        } = &mut active[i].spec
        else {
            return None;
        };
        let failure = Failure {
            status: *status,
            retry_after: *retry_after,
            error: error.clone(),
        };
        *count -= 1;
        if *count == 0 {
            active.remove(i);
        }
        Some(failure)
    }

    /// How long to delay a request of `route`.
    pub fn take_delay(&self, route: Route) -> Option<Duration> {
        if !self.enabled {
            return None;
        }
        let mut active = self.lock();
        let i = active.iter().position(|a| {
            matches!(a.spec, FaultSpec::Delay { route: r, count, .. } if count > 0 && (r == route || r == Route::Any))
        })?;
        let FaultSpec::Delay { ms, count, .. } = &mut active[i].spec else {
            return None;
        };
        let d = Duration::from_millis(*ms);
        *count -= 1;
        if *count == 0 {
            active.remove(i);
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_from_documented_json() {
        let f: FaultSpec = serde_json::from_str(
            r#"{"kind":"fail_requests","route":"replay","status":503,"count":2,"retry_after":1}"#,
        )
        .unwrap();
        assert_eq!(
            f,
            FaultSpec::FailRequests {
                route: Route::Replay,
                status: 503,
                count: 2,
                retry_after: Some(1),
                error: None,
            }
        );
        let f: FaultSpec = serde_json::from_str(
            r#"{"kind":"fail_requests","route":"stream","status":400,"error":"invalid_cursor"}"#,
        )
        .unwrap();
        assert!(
            matches!(f, FaultSpec::FailRequests { status: 400, count: 1, ref error, .. } if error.as_deref() == Some("invalid_cursor"))
        );
        let f: FaultSpec =
            serde_json::from_str(r#"{"kind":"hostile","session":"s1","shape":"endless_history"}"#)
                .unwrap();
        assert_eq!(
            f,
            FaultSpec::Hostile {
                session: "s1".into(),
                shape: Hostile::EndlessHistory
            }
        );
        let f: FaultSpec = serde_json::from_str(r#"{"kind":"stall"}"#).unwrap();
        assert_eq!(f, FaultSpec::Stall { ms: None });
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"nope"}"#).is_err());
    }

    #[test]
    fn counted_faults_expire() {
        let faults = Faults::new(true);
        faults.add(FaultSpec::FailRequests {
            route: Route::Messages,
            status: 500,
            count: 2,
            retry_after: None,
            error: None,
        });
        assert_eq!(faults.take_failure(Route::Replay), None);
        assert!(faults.take_failure(Route::Messages).is_some());
        assert!(faults.take_failure(Route::Messages).is_some());
        assert_eq!(faults.take_failure(Route::Messages), None);
        faults.add(FaultSpec::SkipDurable { count: 1 });
        assert!(faults.take_skip());
        assert!(!faults.take_skip());
        faults.add(FaultSpec::SlowTurnStart { ms: 40, count: 2 });
        for _ in 0..2 {
            assert_eq!(
                faults.take_slow_turn_start(),
                Some(Duration::from_millis(40))
            );
        }
        assert_eq!(faults.take_slow_turn_start(), None);
    }

    #[test]
    fn disabled_faults_never_fire() {
        let faults = Faults::new(false);
        faults.add(FaultSpec::Duplicate { count: 1 });
        assert!(!faults.take_duplicate());
    }

    #[test]
    fn cut_applies_to_open_streams_and_counted_new_ones() {
        let faults = Faults::new(true);
        let mut open = StreamFaults::default();
        faults.refresh_stream(&mut open, true);
        faults.add(FaultSpec::CutAfterBytes {
            bytes: 10,
            count: Some(1),
        });
        faults.refresh_stream(&mut open, false);
        assert_eq!(open.cut_remaining, Some(10));
        let mut first = StreamFaults::default();
        faults.refresh_stream(&mut first, true);
        assert_eq!(first.cut_remaining, Some(10));
        let mut second = StreamFaults::default();
        faults.refresh_stream(&mut second, true);
        assert_eq!(second.cut_remaining, None);
    }
}
