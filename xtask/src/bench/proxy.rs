//! The figures of `tests/js/bench-proxy.mjs` (`tests/js/bench.mjs`'s proxy
//! part): the clients behind nginx compressing event streams
//! (`xtask/src/nginx.rs`), where they follow by polling.

use super::{figure, Figure, Goal};

/// The part's name in `BENCH_ONLY` (`--proxy` runs it alone).
pub const PART: &str = "proxy";

/// How `--proxy` names its run in the report's commands.
pub const SOURCE: &str = "headless Chromium: tests/js/bench.mjs, its proxy part alone (`cargo xtask bench --proxy`; the other figures carried over)";

const THREE_SECONDS: Option<(Goal, f64)> = Some((Goal::AtMost, 3000.0));

/// The figures, in the report's order.
pub const FIGURES: &[Figure] = &[
    figure("browser_proxy_shared_last_words_p95_ms", "ms", "behind nginx compressing event streams, shared host: a fresh page load (new browser context) on a new session, a `/long 8000` posted 1.5 s after its load; the server's commit of the answer to the first view showing its last words, p95 of 5 page loads (nearest rank: the slowest)", THREE_SECONDS),
    figure("browser_proxy_shared_last_words_p50_ms", "ms", "the same, median of 5", None),
    figure("browser_proxy_shared_live_growths_min", "times", "the same: times the live text grew while the answer ran, the fewest of 5", None),
    figure("browser_proxy_page_last_words_p95_ms", "ms", "behind the same proxy, on-page client (`ReplayClient`): commit to the last words shown, p95 of 5 page loads", THREE_SECONDS),
    figure("browser_proxy_page_last_words_p50_ms", "ms", "the same, median of 5", None),
    figure("browser_proxy_page_live_growths_min", "times", "the same: times the live text grew, the fewest of 5", None),
    figure("browser_proxy_shared_idle_requests_per_min", "req/min", "behind the proxy, idle: three tabs of the shared host following one idle session by polling, the runtime's requests for it at the proxy (polls and stream probes) over one probe cycle (3 minutes 10 s: the re-probe period after a muted probe's connect deadline), per minute, per scope per browser", Some((Goal::AtMost, 6.0))),
    figure("browser_proxy_page_idle_requests_per_min", "req/min", "the same for one on-page client on a session of its own, measured beside them", None),
];
