//! The process-wide byte budgets of large JSON answers (`--max-response-bytes`)
//! and of buffered stream bytes (`--max-stream-buffer-bytes`), held by
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
/// every byte a stream writer has made and its connection has not taken
/// yet, in four quotas, each waited for (or, in the fan-out, tried) only by its
/// own kind of bytes:
///
/// - `pages`: backlog pages being read, encoded, or waiting to be handed to
///   their connection. A stream reserves a page's room before it reads the
///   page and gives it back as the connection takes the bytes, so backlog
///   reads go at the pace the sockets accept.
/// - `frames`: snapshots, live frames and heartbeats.
/// - `queued`: live frames published and waiting in a stream's subscriber
///   buffers for its writer to take them (`crate::fanout`): what a stream that
///   is not read piles up while its logs are busy. Each frame queued for a
///   subscriber holds its room until the writer takes it (or the stream
///   ends); a subscriber that finds no room is full (the lag policy),
///   unless its buffer is empty.
/// - `opening`: what a stream writes before its first `hello` is out
///   (`retry:`, the `hello`): bytes for a fresh response, taken by the
///   connection at once, so a new client's `hello` never waits behind the
///   pages or frames of peers that read nothing.
///
/// Both the JSON pages' budget and this one count in [`UNIT`]s.
#[derive(Debug)]
pub struct StreamBudget {
    pub(crate) pages: Quota,
    pub(crate) frames: Quota,
    pub(crate) queued: Quota,
    pub(crate) opening: Quota,
    /// The most ever held at once in all quotas, in units.
    peak: AtomicUsize,
    /// Streams ended because no room was free within the write timeout.
    pub(crate) starved: AtomicU64,
}

/// One quota of the stream budget.
#[derive(Debug)]
pub struct Quota {
    pub(crate) room: ByteBudget,
    /// The most ever held at once, in units.
    peak: AtomicUsize,
}

impl Quota {
    fn new(units: usize) -> Quota {
        Quota {
            room: ByteBudget::new(units * UNIT),
            peak: AtomicUsize::new(0),
        }
    }

    /// The quota, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.room.units * UNIT
    }

    /// Bytes held now.
    pub fn held_bytes(&self) -> usize {
        self.room.held_units() * UNIT
    }

    /// The most bytes ever held at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed) * UNIT
    }
}

impl StreamBudget {
    /// A budget of `bytes`: a sixteenth for `opening`, a quarter each for
    /// `frames` and `queued`, the rest for `pages` (at least one unit each).
    pub fn new(bytes: usize) -> StreamBudget {
        let units = bytes.div_ceil(UNIT).max(1);
        let opening = (units / 16).max(1);
        let frames = (units / 4).max(1);
        StreamBudget {
            pages: Quota::new(units.saturating_sub(opening + 2 * frames).max(1)),
            frames: Quota::new(frames),
            queued: Quota::new(frames),
            opening: Quota::new(opening),
            peak: AtomicUsize::new(0),
            starved: AtomicU64::new(0),
        }
    }

    /// The quotas with their names, as the diagnostics show them.
    pub fn quotas(&self) -> [(&'static str, &Quota); 4] {
        [
            ("pages", &self.pages),
            ("frames", &self.frames),
            ("queued", &self.queued),
            ("opening", &self.opening),
        ]
    }

    /// The budget, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.quotas().iter().map(|(_, s)| s.max_bytes()).sum()
    }

    /// Bytes held now (reserved for bytes being made or not yet taken by
    /// their connection).
    pub fn held_bytes(&self) -> usize {
        self.held_units() * UNIT
    }

    fn held_units(&self) -> usize {
        self.quotas().iter().map(|(_, s)| s.room.held_units()).sum()
    }

    /// The most bytes ever held at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed) * UNIT
    }

    /// Streams ended because no room was free within the write timeout.
    pub fn starved(&self) -> u64 {
        self.starved.load(Ordering::Relaxed)
    }

    /// Records the amounts held now in `quota` and in all as peaks if they
    /// are.
    pub(crate) fn note_peak(&self, quota: &Quota) {
        quota
            .peak
            .fetch_max(quota.room.held_units(), Ordering::Relaxed);
        self.peak.fetch_max(self.held_units(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_budget() {
        for bytes in [64 << 20, 4 << 20, 1 << 20, 64 << 10] {
            let b = StreamBudget::new(bytes);
            assert_eq!(b.max_bytes(), bytes, "{bytes}");
            assert_eq!(b.opening.max_bytes(), bytes / 16);
            assert_eq!(b.frames.max_bytes(), bytes / 4);
            assert_eq!(b.queued.max_bytes(), bytes / 4);
        }
        // Each quota is at least one unit, so a tiny budget is a bit more.
        let tiny = StreamBudget::new(1);
        assert_eq!(tiny.max_bytes(), 4 * UNIT);
    }
}
