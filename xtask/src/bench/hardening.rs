//! The hardening bench's figures (`server/benches/hardening.rs`: the
//! server's hostile-load probes, slow readers, one address's connections
//! and streams aimed at one log, at full scale against a release server
//! with its default limits).

use super::{figure, Figure, Goal};

/// The bench's label (`--hardening` runs it alone).
pub const LABEL: &str =
    "bench: hardening (the hostile-load probes: slow readers, one address's connections, streams aimed at one log; the multiplexed stream's slots and unread live frames)";

/// Its command.
pub const ARGV: &[&str] = &["bench", "-q", "-p", "replay-server", "--bench", "hardening"];

const SECOND: Option<(Goal, f64)> = Some((Goal::AtMost, 1000.0));
const FIVE_OF_FIVE: Option<(Goal, f64)> = Some((Goal::AtLeast, 5.0));

/// The figures, in the report's order after the others.
pub const FIGURES: &[Figure] = &[
    figure("hardening_slow_250_rss_mb", "MB", "slow readers: 250 SSE streams from seq 0 of a session with a 3 MB log (60 events of 50 KB), one address, each read 1 byte/s: server peak `RssAnon`", Some((Goal::AtMost, 200.0))),
    figure("hardening_slow_250_tcp_mb", "MB", "the same: peak kernel TCP memory (`/proc/net/sockstat` `TCP: mem` pages × 4096; both ends of loopback and the rest of the machine)", Some((Goal::AtMost, 256.0))),
    figure("hardening_slow_250_hello_p50_ms", "ms", "the same: a victim's `hello` from another address, p50 of 5 (from 1 s after the streams opened, 0.5 s apart)", None),
    figure("hardening_slow_250_hello_max_ms", "ms", "the same: a victim's `hello`, max of 5", SECOND),
    figure("hardening_slow_250_ended_s", "s", "the same: from the streams' opening until the server had none open (the write timeout, 10 s by default; 45: not within 45 s)", None),
    figure("hardening_slow_500_rss_mb", "MB", "slow readers: 500 streams, 250 from each of 2 addresses, each address on a 3 MB session of its own (a log takes 256 streams), 1 byte/s: server peak `RssAnon`", Some((Goal::AtMost, 200.0))),
    figure("hardening_slow_500_tcp_mb", "MB", "the same: peak kernel TCP memory", Some((Goal::AtMost, 256.0))),
    figure("hardening_slow_500_hello_p50_ms", "ms", "the same: a victim's `hello`, p50 of 5", None),
    figure("hardening_slow_500_hello_max_ms", "ms", "the same: a victim's `hello`, max of 5", SECOND),
    figure("hardening_slow_500_ended_s", "s", "the same: until the server had no stream open", None),
    figure("hardening_conns_keepalive_victim_max_ms", "ms", "one address's connections: 512 scoped streams, then 520 keep-alive connections from 127.0.0.2; `GET /v1/diagnostics` from 127.0.0.3 on a fresh connection, slowest of 5 (5000: unanswered)", SECOND),
    figure("hardening_conns_keepalive_victim_ok", "of 5", "the same: victim requests answered `200`", FIVE_OF_FIVE),
    figure("hardening_conns_keepalive_attacker_held", "conns", "the same: the attacker's connections still open at the end (its per-address cap: 256)", None),
    figure("hardening_conns_keepalive_attacker_refused", "conns", "the same: the attacker's 1 032 requests answered `503` at once", None),
    figure("hardening_conns_reading_victim_max_ms", "ms", "1 024 streams read as fast as they come, 512 from each of 127.0.0.2 and .3, events appended every 10 ms: a victim's request from 127.0.0.4, slowest of 5", SECOND),
    figure("hardening_conns_reading_victim_ok", "of 5", "the same: victim requests answered `200`", FIVE_OF_FIVE),
    figure("hardening_conns_reading_attacker_held", "streams", "the same: the attackers' streams open at the end", None),
    figure("hardening_conns_reading_attacker_refused", "streams", "the same: the attackers' streams answered `503`", None),
    figure("hardening_conns_slow_victim_max_ms", "ms", "1 200 slow sockets (300 from each of 127.0.0.2 to .5) sending a head 1 byte/s, reconnecting when closed, for 12 s: a victim's request from 127.0.0.6 from the 4th second, slowest of 5", SECOND),
    figure("hardening_conns_slow_victim_ok", "of 5", "the same: victim requests answered `200`", FIVE_OF_FIVE),
    figure("hardening_conns_slow_attacker_held", "conns", "the same: connections open on the server after the victim's tries", None),
    figure("hardening_conns_slow_attacker_refused", "conns", "the same: the slow sockets' `503`s over the 12 s", None),
    figure("hardening_log_session_victim_max_ms", "ms", "streams aimed at one log: 300 streams on one session from 127.0.0.2, one after the other (per-log cap 256), then 5 kept streams on it from 127.0.0.3: slowest `hello`", SECOND),
    figure("hardening_log_session_victim_ok", "of 5", "the same: victim streams that got their `hello`", FIVE_OF_FIVE),
    figure("hardening_log_session_attacker_subs", "streams", "the same: the attacker's streams on the session at the end (opened less ended for fairness)", None),
    figure("hardening_log_session_attacker_refused", "streams", "the same: the attacker's streams answered `503`", None),
    figure("hardening_log_mux_victim_max_ms", "ms", "5 addresses (127.0.0.2 to .6) × 8 multiplexed streams × 64 subs (2 560 subs; the process takes 2 048), then 5 scoped streams from 127.0.0.7: slowest answer", SECOND),
    figure("hardening_log_mux_victim_ok", "of 5", "the same: victim streams that got their `hello` (a `503 too_many_streams` is not)", None),
    figure("hardening_log_mux_attacker_subs", "subs", "the same: the attackers' subscriptions at the end", None),
    figure("hardening_log_mux_attacker_refused", "streams", "the same: the attackers' multiplexed streams answered `503`", None),
    figure("hardening_mux_slots_victim_max_ms", "ms", "one address's multiplexed streams: 32 streams × 64 subs from 127.0.0.2 one after the other, every one read (its share: 512 subs); then a stream of 1 sub from 127.0.0.1, slowest `hello` of 5", SECOND),
    figure("hardening_mux_slots_victim_ok", "of 5", "the same: victim streams that got their `hello`", FIVE_OF_FIVE),
    figure("hardening_mux_slots_attacker_new_ok", "of 1", "the same: the attacker's own new stream got its `hello` (its oldest stream ended for it, not a `503`)", Some((Goal::AtLeast, 1.0))),
    figure("hardening_mux_slots_held_streams", "streams", "the same: streams open on the server at the end (the attacker's 8 and its new one's, less the one it ended)", None),
    figure("hardening_mux_unread_rss_mb", "MB", "unread multiplexed streams: 24 × 64 subs from 127.0.0.2 to .4, none read (4 KiB receive buffer, given up and reopened from seq 0 every 10 s), four writers appending 60 KB events round robin to the 64 logs for 25 s: server peak `RssAnon`", Some((Goal::AtMost, 200.0))),
    figure("hardening_mux_unread_victim_max_ms", "ms", "the same: a stream of 1 sub from 127.0.0.5, slowest `hello` of 5 (from the 3rd second, 4 s apart)", SECOND),
    figure("hardening_mux_unread_victim_ok", "of 5", "the same: victim streams that got their `hello`", FIVE_OF_FIVE),
    figure("hardening_mux_unread_events", "events", "the same: events appended in the 25 s", None),
    figure("hardening_load_avg_max", "", "the machine's 1-minute load average, highest at the start of a shape or the end (2 cores, shared)", None),
];
