//! Small helpers: wall-clock timestamps (`jiff`), random ids (`getrandom`,
//! the OS generator), the seedable generator of the scripted agent, and a
//! lock wait that leaves the runtime running ([`lock_handing_off`]).

/// The current time as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T23:00:00.123Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(jiff::Timestamp::now())
}

/// Formats an instant as RFC 3339 UTC with exactly three fractional digits.
pub fn format_rfc3339(ts: jiff::Timestamp) -> String {
    format!("{ts:.3}")
}

/// SplitMix64, the client core's: deterministic scripted text and test schedules.
pub use replay_core::machine::SplitMix64 as Rng;

/// 64 random bits from the operating system (epochs, boot ids, temp names).
pub fn entropy() -> u64 {
    // The OS generator failing is not something a server can work around.
    getrandom::u64().expect("the OS random number generator is available")
}

/// A fresh random id with a prefix, e.g. `e_3f9a1c2b04d5` (48 random bits).
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}_{:012x}", entropy() & 0xFFFF_FFFF_FFFF)
}

/// Locks `mutex`. When another thread holds it and this thread is a worker
/// of a multi-thread runtime, waits inside `block_in_place`: the worker's
/// other tasks move to another thread first. Locks held across a Postgres
/// round trip need it: a worker waiting outright would stop every task it
/// runs (with one worker thread, the node's every stream and read) until
/// Postgres answers the holder (test
/// `a_session_waiting_for_postgres_leaves_the_node_serving`). A poisoned
/// lock is still given (its holders keep it consistent).
pub fn lock_handing_off<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    use std::sync::{PoisonError, TryLockError};
    match mutex.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            let wait = || mutex.lock().unwrap_or_else(PoisonError::into_inner);
            let multi_thread = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            if multi_thread {
                tokio::task::block_in_place(wait)
            } else {
                wait()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        let at = |s: i64, ms: i32| jiff::Timestamp::new(s, ms * 1_000_000).expect("in range");
        assert_eq!(format_rfc3339(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339(at(1_795_993_200, 123)),
            "2026-11-29T23:00:00.123Z"
        );
        assert_eq!(
            format_rfc3339(at(951_782_400, 5)),
            "2000-02-29T00:00:00.005Z"
        );
        assert_eq!(now_rfc3339().len(), "2026-11-29T23:00:00.123Z".len());
    }

    #[test]
    fn rng_is_deterministic_per_seed() {
        let a: Vec<u64> = (0..4)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..4)
            .scan(Rng::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(random_id("b"), random_id("b"));
        assert_eq!(random_id("b").len(), 2 + 12);
    }
}
