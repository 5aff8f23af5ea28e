//! The process-wide byte budget of large JSON answers (`--max-response-bytes`),
//! held by the app; the API reserves from it (`api/budget.rs`). Kept apart
//! from the API so that the app, which the API reads, depends on no API module.

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
