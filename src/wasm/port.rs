//! How an executor of one request hands what happened back to the machine,
//! without knowing the driver (no import cycle): the driver implements
//! [`Port`], the request runners are generic over it.

use crate::core::machine::{Client as Machine, RequestId};

/// The driver, as seen by a running request.
pub trait Port {
    /// Delivers one input about request `id` if it is still wanted; returns
    /// whether it still is afterwards.
    fn feed(&self, id: RequestId, input: impl FnOnce(&mut Machine, u64)) -> bool;

    /// Delivers the last input about request `id` and forgets it.
    fn finish(&self, id: RequestId, input: impl FnOnce(&mut Machine, u64));
}
