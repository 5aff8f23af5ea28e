//! The process-wide byte budgets of large JSON answers (`--max-response-bytes`)
//! and of buffered stream backlogs (`--max-stream-buffer-bytes`), held by
//! the app; the API reserves from them (`api/budget.rs`, `api/stream.rs`).
//! Kept apart from the API so that the app, which the API reads, depends on
//! no API module.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

/// One permit is one KiB.
pub(crate) const UNIT: usize = 1024;

/// The process-wide budget.
#[derive(Debug)]
pub struct ResponseBudget {
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) units: usize,
}

impl ResponseBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> ResponseBudget {
        let units = bytes.div_ceil(UNIT).max(1);
        ResponseBudget {
            permits: Arc::new(Semaphore::new(units)),
            units,
        }
    }
}

/// The process-wide budget of stream bytes buffered (`--max-stream-buffer-bytes`):
/// the backlog pages of every SSE stream being read, encoded, or waiting to
/// be handed to their connection. A stream reserves a page's room before it
/// reads the page and gives it back as the bytes are taken by the
/// connection, so backlog reads go at the pace the sockets accept.
#[derive(Debug)]
pub struct StreamBudget {
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) units: usize,
    /// The most ever held at once, in units.
    peak: AtomicUsize,
    /// Streams ended because no room was free within the write timeout.
    pub(crate) starved: AtomicU64,
}

impl StreamBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> StreamBudget {
        let units = bytes.div_ceil(UNIT).max(1);
        StreamBudget {
            permits: Arc::new(Semaphore::new(units)),
            units,
            peak: AtomicUsize::new(0),
            starved: AtomicU64::new(0),
        }
    }

    /// The budget, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.units * UNIT
    }

    /// Bytes held now (reserved for pages being read or not yet taken by
    /// their connection).
    pub fn held_bytes(&self) -> usize {
        self.units.saturating_sub(self.permits.available_permits()) * UNIT
    }

    /// The most bytes ever held at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed) * UNIT
    }

    /// Streams ended because no room was free within the write timeout.
    pub fn starved(&self) -> u64 {
        self.starved.load(Ordering::Relaxed)
    }

    /// Records the amount held now as the peak if it is one.
    pub(crate) fn note_peak(&self) {
        let held = self.units.saturating_sub(self.permits.available_permits());
        self.peak.fetch_max(held, Ordering::Relaxed);
    }
}
