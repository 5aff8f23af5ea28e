//! The process-wide byte budgets of large JSON answers (`--max-response-bytes`)
//! and of buffered stream backlogs (`--max-stream-buffer-bytes`), held by
//! the app; the API reserves from them (`api/budget.rs`, `api/stream.rs`).
//! Kept apart from the API so that the app, which the API reads, depends on
//! no API module.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One permit is one KiB.
pub(crate) const UNIT: usize = 1024;

/// Bytes held process-wide, one semaphore permit per [`UNIT`]: what both
/// budgets below count with.
#[derive(Debug)]
pub struct ByteBudget {
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) units: usize,
}

impl ByteBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> ByteBudget {
        let units = bytes.div_ceil(UNIT).max(1);
        ByteBudget {
            permits: Arc::new(Semaphore::new(units)),
            units,
        }
    }

    /// The permits that room for `bytes` takes: at least one, at most the
    /// whole budget.
    pub(crate) fn units_for(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(UNIT).clamp(1, self.units)).unwrap_or(u32::MAX)
    }

    /// Permits held now.
    pub(crate) fn held_units(&self) -> usize {
        self.units.saturating_sub(self.permits.available_permits())
    }
}

/// Shrinks `held` to what `bytes` need (at least one permit), giving the
/// rest back; returns the permits still missing when it holds fewer.
pub(crate) fn fit(held: &mut OwnedSemaphorePermit, bytes: usize) -> usize {
    let need = bytes.div_ceil(UNIT).max(1);
    match held.num_permits().checked_sub(need) {
        Some(spare) => {
            drop(held.split(spare));
            0
        }
        None => need - held.num_permits(),
    }
}

/// The process-wide budget of large JSON answers (`--max-response-bytes`).
#[derive(Debug)]
pub struct ResponseBudget(pub(crate) ByteBudget);

impl ResponseBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> ResponseBudget {
        ResponseBudget(ByteBudget::new(bytes))
    }
}

/// The process-wide budget of stream bytes buffered (`--max-stream-buffer-bytes`):
/// the backlog pages of every SSE stream being read, encoded, or waiting to
/// be handed to their connection. A stream reserves a page's room before it
/// reads the page and gives it back as the bytes are taken by the
/// connection, so backlog reads go at the pace the sockets accept.
#[derive(Debug)]
pub struct StreamBudget {
    pub(crate) room: ByteBudget,
    /// The most ever held at once, in units.
    peak: AtomicUsize,
    /// Streams ended because no room was free within the write timeout.
    pub(crate) starved: AtomicU64,
}

impl StreamBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> StreamBudget {
        StreamBudget {
            room: ByteBudget::new(bytes),
            peak: AtomicUsize::new(0),
            starved: AtomicU64::new(0),
        }
    }

    /// The budget, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.room.units * UNIT
    }

    /// Bytes held now (reserved for pages being read or not yet taken by
    /// their connection).
    pub fn held_bytes(&self) -> usize {
        self.room.held_units() * UNIT
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
        self.peak
            .fetch_max(self.room.held_units(), Ordering::Relaxed);
    }
}
