//! What the live worker takes over after a recovery pass and when turns
//! end: a waiter for each turn kept waiting for an answer
//! (`agent::resume_waiting`), deferred team deliveries retried
//! (`team`). [`go_on`] runs right after a pass (before the server serves,
//! or before `restart_worker` answers); [`start`] runs the task that carries
//! out what the app hands over later ([`Handover`]).

use std::sync::Arc;

use crate::agent;
use crate::app::{App, Handover};
use crate::recovery::Recovered;
use crate::team;

/// Starts the waiters of the turns a pass kept waiting, then retries the
/// deferred deliveries it found takeable.
pub fn go_on(app: &Arc<App>, recovered: Recovered) {
    for waiting in recovered.waiting {
        agent::resume_waiting(app, waiting);
    }
    if !recovered.deliveries.is_empty() {
        if let Err(e) = team::retry(app, &recovered.deliveries) {
            tracing::warn!(error = %e, "retrying deferred deliveries failed");
        }
    }
}

/// Runs, while the app lives, what it hands over (once per app).
pub fn start(app: &Arc<App>) {
    let Some(mut queue) = app.take_handover() else {
        return;
    };
    let app = Arc::downgrade(app);
    tokio::spawn(async move {
        while let Some(work) = queue.recv().await {
            let Some(app) = app.upgrade() else { return };
            match work {
                Handover::SessionReady(session_id) => {
                    if !team::may_have_deferred(&app) {
                        continue;
                    }
                    let app = Arc::clone(&app);
                    // The store calls block: off the runtime's workers.
                    let done = tokio::task::spawn_blocking(move || {
                        team::deliver_deferred(&app, &session_id)
                    })
                    .await;
                    if let Ok(Err(e)) = done {
                        tracing::warn!(error = %e, "deferred deliveries not retried");
                    }
                }
                Handover::Adopted(waiting) => {
                    for w in waiting {
                        agent::resume_waiting(&app, w);
                    }
                }
            }
        }
    });
}
