//! Retry pacing: exponential backoff with full jitter from a seedable RNG,
//! and the parsing of server hints (`Retry-After`).

use super::types::BackoffConfig;

/// The most a retry hint (`retry:`, `Retry-After`) may make a client wait
/// (PROTOCOL.md §6 rule 9): a larger or far-future hint is read as this.
pub const MAX_RETRY_HINT_MS: u64 = 5 * 60 * 1_000;

/// SplitMix64: tiny, fast, deterministic; good enough for jitter and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `0..=max` (modulo bias is irrelevant at these ranges).
    pub fn up_to(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            Some(n) => self.next_u64() % n,
            None => self.next_u64(),
        }
    }
}

/// Attempt counter of one retry loop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// Upper bound of the wait for the current attempt.
    pub fn ceiling(&self, cfg: &BackoffConfig) -> u64 {
        // The exponent must not wrap negative after 2^31 attempts; growth
        // to infinity is capped at `max_ms` below.
        let exponent = self.attempt.min(1_024) as i32;
        let grown = cfg.initial_ms as f64 * cfg.multiplier.max(1.0).powi(exponent);
        (grown.min(cfg.max_ms as f64) as u64).min(cfg.max_ms)
    }

    /// The wait before the next try: the server's hint (`retry:` or
    /// `Retry-After`, capped at [`MAX_RETRY_HINT_MS`]) as a floor, plus full
    /// jitter up to the ceiling (rule 9). The jitter lies above the floor so
    /// that clients told the same hint (a restarting server) do not all
    /// return in the same instant. Counts the attempt.
    pub fn next_delay(&mut self, cfg: &BackoffConfig, rng: &mut SplitMix64, floor: u64) -> u64 {
        let jitter = rng.up_to(self.ceiling(cfg));
        self.attempt = self.attempt.saturating_add(1);
        floor.min(MAX_RETRY_HINT_MS).saturating_add(jitter)
    }

    /// Attempts made since the last success.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Forgets past failures (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Parses `Retry-After` as delay-seconds or an IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), relative to `now` (ms since the Unix
/// epoch). Returns the delay in ms; unparseable values give `None`.
pub fn parse_retry_after(value: &str, now: u64) -> Option<u64> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            v.parse::<u64>()
                .unwrap_or(u64::MAX / 1000)
                .saturating_mul(1000),
        );
    }
    let at = parse_imf_fixdate(v)?;
    Some(at.saturating_sub(now))
}

/// IMF-fixdate to ms since the Unix epoch.
fn parse_imf_fixdate(v: &str) -> Option<u64> {
    let mut parts = v.split_ascii_whitespace();
    let _weekday = parts.next()?;
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    // Four digits (RFC 9110 §5.6.7): keeps the day arithmetic far from overflow.
    let year = parts.next()?;
    if year.len() != 4 || !year.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let year: i64 = year.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|x| x.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day as i64);
    let secs = days.checked_mul(86_400)? + (h * 3600 + m * 60 + s) as i64;
    u64::try_from(secs).ok()?.checked_mul(1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn backoff_full_jitter_stays_under_a_growing_capped_ceiling() {
        let cfg = BackoffConfig {
            initial_ms: 100,
            max_ms: 1_000,
            multiplier: 2.0,
        };
        let mut rng = SplitMix64::new(7);
        let mut b = Backoff::default();
        let mut seen_below_half = false;
        for attempt in 0..12u32 {
            let ceiling = (100u64 << attempt.min(10)).min(1_000);
            assert_eq!(b.ceiling(&cfg), ceiling);
            let d = b.next_delay(&cfg, &mut rng, 0);
            assert!(d <= ceiling, "attempt {attempt}: {d} > {ceiling}");
            seen_below_half |= d < ceiling / 2;
        }
        assert!(
            seen_below_half,
            "full jitter spreads below half the ceiling"
        );
        b.reset();
        assert_eq!(b.attempts(), 0);
    }

    #[test]
    fn backoff_honours_the_server_floor_and_jitters_above_it() {
        let cfg = BackoffConfig::default();
        let mut rng = SplitMix64::new(1);
        let mut b = Backoff::default();
        let mut above = 0;
        for _ in 0..20 {
            let ceiling = b.ceiling(&cfg);
            let d = b.next_delay(&cfg, &mut rng, 45_000);
            assert!((45_000..=45_000 + ceiling).contains(&d), "{d}");
            above += usize::from(d > 45_000);
        }
        assert!(above > 15, "jitter lies above the floor");
    }

    #[test]
    fn a_huge_floor_is_capped_at_five_minutes() {
        let cfg = BackoffConfig::default();
        let mut rng = SplitMix64::new(3);
        let mut b = Backoff::default();
        for floor in [MAX_RETRY_HINT_MS + 1, u64::MAX / 1000 * 1000, u64::MAX] {
            let d = b.next_delay(&cfg, &mut rng, floor);
            assert!((MAX_RETRY_HINT_MS..=MAX_RETRY_HINT_MS + cfg.max_ms).contains(&d));
        }
        let huge = BackoffConfig {
            initial_ms: u64::MAX,
            max_ms: u64::MAX,
            multiplier: 2.0,
        };
        assert!(b.next_delay(&huge, &mut rng, u64::MAX) >= MAX_RETRY_HINT_MS);
    }

    #[test]
    fn retry_after_seconds_and_http_date() {
        assert_eq!(parse_retry_after("120", 0), Some(120_000));
        assert_eq!(parse_retry_after(" 0 ", 5), Some(0));
        // 1994-11-06T08:49:37Z = 784111777 s.
        let at = 784_111_777_000;
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at - 3_000),
            Some(3_000)
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at + 1),
            Some(0)
        );
        assert_eq!(parse_retry_after("soon", 0), None);
        assert_eq!(parse_retry_after("-1", 0), None);
    }

    #[test]
    fn retry_after_dates_out_of_range_are_refused_not_overflowed() {
        for v in [
            "Fri, 31 Dec 9223372036854775807 23:59:59 GMT",
            "Fri, 31 Dec -9223372036854775807 23:59:59 GMT",
            "Fri, 31 Dec 99999 23:59:59 GMT",
        ] {
            assert_eq!(parse_retry_after(v, 0), None, "{v}");
        }
        assert!(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", 0).is_some());
    }

    #[test]
    fn splitmix_is_deterministic_per_seed() {
        let a: Vec<u64> = (0..4)
            .scan(SplitMix64::new(9), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(SplitMix64::new(9), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..4)
            .scan(SplitMix64::new(10), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
