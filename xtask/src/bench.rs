//! `cargo xtask bench`: measures, then rewrites `docs/benchmarks.md`.
//!
//! Each benchmark prints `name value` lines on stdout; this collects them and
//! writes one table with the targets beside the numbers, plus the command and
//! the machine, so every number in the file came from this command.

use crate::cmd::{self, root, Result};
use std::collections::BTreeMap;
use std::process::Command;

mod hardening;
mod proxy;

/// A measured figure: (unit, target text, how it compares).
struct Figure {
    name: &'static str,
    unit: &'static str,
    what: &'static str,
    target: Option<(Goal, f64)>,
}

/// A figure of a bench module's list (`hardening.rs`, `proxy.rs`).
const fn figure(
    name: &'static str,
    unit: &'static str,
    what: &'static str,
    target: Option<(Goal, f64)>,
) -> Figure {
    Figure {
        name,
        unit,
        what,
        target,
    }
}

#[derive(Clone, Copy)]
enum Goal {
    AtLeast,
    AtMost,
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "sse_parse_mb_per_s",
        unit: "MB/s",
        what: "SSE parse, 64 KiB chunks",
        target: Some((Goal::AtLeast, 300.0)),
    },
    Figure {
        name: "sse_parse_events_per_s",
        unit: "events/s",
        what: "SSE parse, events dispatched",
        target: None,
    },
    Figure {
        name: "pipeline_events_per_s",
        unit: "events/s",
        what: "parse + decode + apply (machine and fold)",
        target: Some((Goal::AtLeast, 250_000.0)),
    },
    Figure {
        name: "pipeline_mb_per_s",
        unit: "MB/s",
        what: "parse + decode + apply",
        target: None,
    },
    Figure {
        name: "shared_pipeline_events_per_s",
        unit: "events/s",
        what: "the shared host's path: a multiplexed stream through the share hub (parse, read once, route) to a session's machine and fold",
        target: None,
    },
    Figure {
        name: "server_appends_per_s",
        unit: "appends/s",
        what: "server: durable appends (committed)",
        target: None,
    },
    Figure {
        name: "server_fanout_events_per_s",
        unit: "events/s",
        what: "server: SSE fan-out to 100 subscribers",
        target: None,
    },
    Figure {
        name: "server_latency_p50_ms",
        unit: "ms",
        what: "server: append to delivery, p50",
        target: None,
    },
    Figure {
        name: "server_latency_p99_ms",
        unit: "ms",
        what: "server: append to delivery, p99",
        target: None,
    },
    Figure {
        name: "server_appends_normal_per_s",
        unit: "appends/s",
        what: "server: durable appends with `--synchronous normal`",
        target: None,
    },
    Figure {
        name: "server_latency_normal_p50_ms",
        unit: "ms",
        what: "server: append to delivery, p50, `--synchronous normal`",
        target: None,
    },
    Figure {
        name: "server_load_p50_ms",
        unit: "ms",
        what: "server load: 950 readers alone, append to delivery, p50",
        target: None,
    },
    Figure {
        name: "server_load_p99_ms",
        unit: "ms",
        what: "server load: 950 readers alone, p99",
        target: None,
    },
    Figure {
        name: "server_load_stuck_p50_ms",
        unit: "ms",
        what: "server load: the same readers beside 50 peers that read nothing, p50",
        target: None,
    },
    Figure {
        name: "server_load_stuck_p99_ms",
        unit: "ms",
        what: "server load: beside 50 stuck peers, p99",
        target: None,
    },
    Figure {
        name: "server_load_rss_peak_mb",
        unit: "MB",
        what: "server load: server peak resident memory (1 000 streams)",
        target: None,
    },
    Figure {
        name: "cluster_sqlite_1_events_per_s",
        unit: "events/s",
        what: "cluster, 1 node on SQLite: durable events/s (16 writers, 1 000 streams; median of 3 rounds)",
        target: None,
    },
    Figure {
        name: "cluster_sqlite_1_p99_ms",
        unit: "ms",
        what: "cluster, 1 node on SQLite: append to delivery on every node, p99",
        target: None,
    },
    Figure {
        name: "cluster_pg_1_events_per_s",
        unit: "events/s",
        what: "cluster, 1 node on Postgres: durable events/s (16 writers, 1 000 streams; median of 3 rounds)",
        target: None,
    },
    Figure {
        name: "cluster_pg_1_p99_ms",
        unit: "ms",
        what: "cluster, 1 node on Postgres: append to delivery on every node, p99",
        target: None,
    },
    Figure {
        name: "cluster_pg_2_events_per_s",
        unit: "events/s",
        what: "cluster, 2 nodes on one Postgres: durable events/s (16 writers, 1 000 streams; median of 3 rounds)",
        target: Some((Goal::AtLeast, 1000.0)),
    },
    Figure {
        name: "cluster_pg_2_p99_ms",
        unit: "ms",
        what: "cluster, 2 nodes on one Postgres: append to delivery on every node, p99",
        target: Some((Goal::AtMost, 50.0)),
    },
    Figure {
        name: "cluster_pg_2_cpu_nodes_us_per_event",
        unit: "µs",
        what: "cluster, 2 nodes: CPU time (user + system) of both nodes per durable event, its 100 stream copies included (the first append until every reader has every event)",
        target: None,
    },
    Figure {
        name: "cluster_pg_2_cpu_pg_us_per_event",
        unit: "µs",
        what: "cluster, 2 nodes: Postgres's CPU time per durable event (every backend of the server)",
        target: None,
    },
    Figure {
        name: "cluster_pg_2_cpu_bench_us_per_event",
        unit: "µs",
        what: "cluster, 2 nodes: the bench's own CPU time per durable event (its 16 writers and 1 000 readers)",
        target: None,
    },
    Figure {
        name: "cluster_pg_3_events_per_s",
        unit: "events/s",
        what: "cluster, 3 nodes on one Postgres: durable events/s (16 writers, 1 000 streams; median of 3 rounds)",
        target: None,
    },
    Figure {
        name: "cluster_pg_3_p99_ms",
        unit: "ms",
        what: "cluster, 3 nodes on one Postgres: append to delivery on every node, p99",
        target: Some((Goal::AtMost, 50.0)),
    },
    Figure {
        name: "cluster_pg_1_over_sqlite",
        unit: "x",
        what: "cluster: 1 Postgres node's durable events/s over 1 SQLite node's, median of 3 interleaved rounds' ratios (goal: within 2x)",
        target: Some((Goal::AtLeast, 0.5)),
    },
    Figure {
        name: "cluster_pg_2_over_1",
        unit: "x",
        what: "cluster: 2 nodes' durable events/s over 1 node's, median of 3 interleaved rounds' ratios, every node sized to its share of the machine's cores (goal: adding a node never lowers throughput)",
        target: Some((Goal::AtLeast, 1.0)),
    },
    Figure {
        name: "cluster_pg_3_over_2",
        unit: "x",
        what: "cluster: 3 nodes' durable events/s over 2 nodes', median of 3 interleaved rounds' ratios",
        target: Some((Goal::AtLeast, 1.0)),
    },
    Figure {
        name: "cluster_pg_2_events_per_commit",
        unit: "events",
        what: "cluster, 2 nodes: durable events per append transaction (group commit)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_2_deltas_per_s",
        unit: "deltas/s",
        what: "cluster transient fan-out, 2 nodes on one Postgres and Redis: `turn.delta`s delivered per second on every node (one `/long 20000` answer on node A paced by `--delta-ms 1`; 50 streams per node, half scoped, half multiplexed; each delta counted per stream; the slowest node)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_2_p99_ms",
        unit: "ms",
        what: "cluster transient fan-out, 2 nodes, paced: a delta's first arrival on a stream of node A to its arrival on a stream of another node, p99 (the bench's monotonic clock)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_2_burst_deltas_per_s",
        unit: "deltas/s",
        what: "cluster transient fan-out, 2 nodes, the same answer as a `/burst` (no pause between deltas): deltas delivered per second on every node, the slowest (the path's ceiling here)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_2_burst_p99_ms",
        unit: "ms",
        what: "cluster transient fan-out, 2 nodes, the burst: node A to a stream on another node, p99",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_2_burst_node_us_per_delta",
        unit: "µs",
        what: "cluster transient fan-out, 2 nodes, the burst: the nodes' CPU time (user + system) per delta delivered to a stream",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_3_deltas_per_s",
        unit: "deltas/s",
        what: "cluster transient fan-out, 3 nodes on one Postgres and Redis: `turn.delta`s delivered per second on every node (one `/long 20000` answer on node A paced by `--delta-ms 1`; 50 streams per node, half scoped, half multiplexed; each delta counted per stream; the slowest node)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_3_p99_ms",
        unit: "ms",
        what: "cluster transient fan-out, 3 nodes, paced: a delta's first arrival on a stream of node A to its arrival on a stream of another node, p99 (the bench's monotonic clock)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_3_burst_deltas_per_s",
        unit: "deltas/s",
        what: "cluster transient fan-out, 3 nodes, the same answer as a `/burst` (no pause between deltas): deltas delivered per second on every node, the slowest (the path's ceiling here)",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_3_burst_p99_ms",
        unit: "ms",
        what: "cluster transient fan-out, 3 nodes, the burst: node A to a stream on another node, p99",
        target: None,
    },
    Figure {
        name: "cluster_tail_pg_3_burst_node_us_per_delta",
        unit: "µs",
        what: "cluster transient fan-out, 3 nodes, the burst: the nodes' CPU time (user + system) per delta delivered to a stream",
        target: None,
    },
    Figure {
        name: "browser_wasm_bytes",
        unit: "bytes",
        what: "wasm (optimised), raw",
        target: None,
    },
    Figure {
        name: "browser_wasm_gzip_bytes",
        unit: "bytes",
        what: "wasm (optimised), gzipped",
        target: None,
    },
    Figure {
        name: "browser_js_bytes",
        unit: "bytes",
        what: "JS (glue, entry, snippets; minified), raw",
        target: None,
    },
    Figure {
        name: "browser_js_gzip_bytes",
        unit: "bytes",
        what: "JS (glue, entry, snippets; minified), each file gzipped",
        target: None,
    },
    Figure {
        name: "browser_total_gzip_kb",
        unit: "KB",
        what: "wasm + JS, gzipped",
        target: Some((Goal::AtMost, 90.0)),
    },
    Figure {
        name: "browser_restore_ms",
        unit: "ms",
        what: "restore of a 10 000-event backlog (SDK)",
        target: None,
    },
    Figure {
        name: "browser_restore_events_per_s",
        unit: "events/s",
        what: "restore, SDK",
        target: None,
    },
    Figure {
        name: "browser_baseline_restore_ms",
        unit: "ms",
        what: "restore, plain-JS baseline (JSON.parse + fold)",
        target: None,
    },
    Figure {
        name: "browser_restore_vs_baseline",
        unit: "x",
        what: "baseline time / SDK time (>= 1 is as fast or faster)",
        target: Some((Goal::AtLeast, 1.0)),
    },
    Figure {
        name: "browser_restore_cold_ms",
        unit: "ms",
        what: "the same restore as the first work of a first visit, SDK (median of 3 fresh browser profiles; wasm still in V8's baseline tier)",
        target: None,
    },
    Figure {
        name: "browser_baseline_restore_cold_ms",
        unit: "ms",
        what: "the same, plain-JS baseline (profiles of its own)",
        target: None,
    },
    Figure {
        name: "browser_restore_cold_vs_baseline",
        unit: "x",
        what: "first visit: baseline time / SDK time, each round's pair (the two measured one after the other), median of the 3 rounds (>= 1 is as fast or faster)",
        target: Some((Goal::AtLeast, 1.0)),
    },
    Figure {
        name: "browser_restore_second_visit_ms",
        unit: "ms",
        what: "the same restore on a second visit (same on-disk profile, the first page left open 3 s: HTTP cache, and V8's code cache if it made one)",
        target: None,
    },
    Figure {
        name: "browser_second_visit_code_cache_hits",
        unit: "of 3",
        what: "second visits whose wasm module came from Chromium's code cache (trace event `v8.wasm.moduleCacheHit`)",
        target: None,
    },
    Figure {
        name: "browser_restore_cold_sdk_worker_ms",
        unit: "ms",
        what: "the same first restore with the SDK in a worker started as the page loads (`WorkerClient.connect` to live; the wasm compiles in the worker)",
        target: None,
    },
    Figure {
        name: "browser_init_cold_ms",
        unit: "ms",
        what: "first visit: navigation start to the package ready (wasm fetched, compiled streaming, instantiated)",
        target: None,
    },
    Figure {
        name: "browser_init_second_visit_ms",
        unit: "ms",
        what: "the same on a second visit",
        target: None,
    },
    Figure {
        name: "browser_live_delta_us",
        unit: "µs",
        what: "main-thread time per streamed event of a long answer (sum of a CPU profile's samples, promise jobs included / events; body read, wasm, view, subscriber; profiler overhead included, the same for both followers)",
        target: None,
    },
    Figure {
        name: "browser_live_js_delta_us",
        unit: "µs",
        what: "the same for a plain-JS follower (fetch, TextDecoderStream, split on blank lines, JSON.parse, append deltas, one render per frame)",
        target: None,
    },
    Figure {
        name: "browser_live_vs_js",
        unit: "x",
        what: "SDK / plain-JS main-thread time per streamed event (goal 0.5)",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_live_worker_delta_us",
        unit: "µs",
        what: "the same plain-JS follower with its stream read and parsed in a dedicated worker, posting what changed once per frame: the page's main-thread time per event (the floor of a follower that keeps the network off the main thread)",
        target: None,
    },
    Figure {
        name: "browser_live_worker_vs_js",
        unit: "x",
        what: "that worker-read follower / the plain-JS follower, main-thread time per streamed event",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_worker_delta_us",
        unit: "µs",
        what: "this SDK in a dedicated worker (`replay-client/worker`), the page following through `WorkerClient` with the same subscriber: the page's main-thread time per streamed event",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_worker_vs_js",
        unit: "x",
        what: "the SDK in a worker / the plain-JS follower on the page, main-thread time per streamed event (goal 0.5)",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_live_sdk_shared_js_delta_us",
        unit: "µs",
        what: "the plain-JS follower on the page, measured interleaved with the shared host below (the ratio's denominator)",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_shared_js_worker_delta_us",
        unit: "µs",
        what: "the plain-JS follower reading its stream in a worker, measured interleaved with the shared host below (the floor of a follower that keeps the network off the main thread)",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_shared_host_cpu_us",
        unit: "µs",
        what: "the shared host's SharedWorker: its CPU time per streamed event (a CPU profile of the worker's target during the measured answers: stream, fold, the pages' updates)",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_shared_vs_js_worker",
        unit: "x",
        what: "the shared host / the plain-JS follower reading in a worker, page main-thread time per streamed event, measured in the same rounds",
        target: Some((Goal::AtMost, 1.1)),
    },
    Figure {
        name: "browser_live_sdk_shared_delta_us",
        unit: "µs",
        what: "this SDK in the shared host (`serveShared()` in a SharedWorker), the page following through `SharedClient` with the same subscriber: the page's main-thread time per streamed event",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_shared_vs_js",
        unit: "x",
        what: "the shared host / the plain-JS follower on the page, main-thread time per streamed event",
        target: Some((Goal::AtMost, 0.7)),
    },
    Figure {
        name: "browser_live_sdk_shared_vs_sdk_worker",
        unit: "x",
        what: "the shared host / the SDK in a dedicated worker, page main-thread time per streamed event, measured in the same rounds",
        target: None,
    },
    Figure {
        name: "browser_live_sdk_shared_notifications_per_frame",
        unit: "max",
        what: "the shared host: the page's subscriber notifications per animation frame",
        target: None,
    },
    Figure {
        name: "browser_live_task_script_us",
        unit: "µs",
        what: "SDK, CDP ScriptDuration per event: tasks only (animation frames, timers), promise jobs left out; beside the CPU profile's figures, which count them",
        target: None,
    },
    Figure {
        name: "browser_live_js_task_script_us",
        unit: "µs",
        what: "the same, plain-JS follower",
        target: None,
    },
    Figure {
        name: "browser_burst_events",
        unit: "events",
        what: "a burst: three answers' deltas, each sent back to back (`/long 20000 /burst`), events followed",
        target: None,
    },
    Figure {
        name: "browser_burst_delta_us",
        unit: "µs",
        what: "the burst, SDK: main-thread time per event (thousands of events in a few large chunks)",
        target: None,
    },
    Figure {
        name: "browser_burst_js_delta_us",
        unit: "µs",
        what: "the burst, plain-JS follower",
        target: None,
    },
    Figure {
        name: "browser_burst_vs_js",
        unit: "x",
        what: "SDK / plain-JS main-thread time per event of the burst",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_burst_sdk_worker_delta_us",
        unit: "µs",
        what: "the burst, the SDK in a worker: the page's main-thread time per event",
        target: None,
    },
    Figure {
        name: "browser_burst_sdk_worker_vs_js",
        unit: "x",
        what: "the burst, the SDK in a worker / the plain-JS follower",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_burst_worker_delta_us",
        unit: "µs",
        what: "the burst, the worker-read plain-JS follower: the page's main-thread time per event",
        target: None,
    },
    Figure {
        name: "browser_burst_worker_vs_js",
        unit: "x",
        what: "the burst, worker-read follower / plain-JS follower",
        target: None,
    },
    Figure {
        name: "browser_live_latency_p50_ms",
        unit: "ms",
        what: "a chunk's arrival (body read) to the render that shows it, SDK, p50",
        target: None,
    },
    Figure {
        name: "browser_live_latency_p95_ms",
        unit: "ms",
        what: "the same, SDK, p95",
        target: None,
    },
    Figure {
        name: "browser_live_js_latency_p50_ms",
        unit: "ms",
        what: "the same, plain-JS follower, p50",
        target: None,
    },
    Figure {
        name: "browser_live_js_latency_p95_ms",
        unit: "ms",
        what: "the same, plain-JS follower, p95",
        target: None,
    },
    Figure {
        name: "browser_heap_mb",
        unit: "MB",
        what: "JS heap after 5 restores of 10 000 events and 3 answers of 8 000 characters (after GC)",
        target: None,
    },
    Figure {
        name: "browser_wasm_memory_mb",
        unit: "MB",
        what: "wasm linear memory at the same point (it grows, never shrinks)",
        target: None,
    },
    Figure {
        name: "browser_shared_first_tab_paint_ms",
        unit: "ms",
        what: "shared host, first tab of a fresh browser context: navigation start to the frame showing the 10 000-event session live (starts the SharedWorker, which compiles the wasm and restores); median of 5 contexts",
        target: None,
    },
    Figure {
        name: "browser_shared_second_tab_paint_ms",
        unit: "ms",
        what: "the same for a second tab on that session, already followed by the worker (view from its memory; page files from the HTTP cache)",
        target: None,
    },
    Figure {
        name: "browser_shared_second_vs_first_tab",
        unit: "x",
        what: "second tab / first tab, time to first paint, each context's pair, median of 5",
        target: Some((Goal::AtMost, 0.1)),
    },
    Figure {
        name: "browser_shared_second_vs_first_tab_client",
        unit: "x",
        what: "the same from the client's half imported (`shared-client.js`) to the paint: what the host and the client cost each tab, without the page's own load, the same for both",
        target: None,
    },
    Figure {
        name: "browser_paint_plain_first_ms",
        unit: "ms",
        what: "a hand-written page (fetch the replay pages, render): navigation start to the frame showing a session's 40 messages, first visit (fresh browser context); median of 3",
        target: None,
    },
    Figure {
        name: "browser_paint_plain_reload_ms",
        unit: "ms",
        what: "the same page reloaded (its files from the HTTP cache)",
        target: None,
    },
    Figure {
        name: "browser_paint_shared_first_ms",
        unit: "ms",
        what: "the shared host's tab, first visit: the SharedWorker starts, compiles the wasm, fetches and restores",
        target: None,
    },
    Figure {
        name: "browser_paint_shared_reload_ms",
        unit: "ms",
        what: "that tab reloaded: it paints the snapshot it stored when it was left, before the worker answers",
        target: None,
    },
    Figure {
        name: "browser_paint_shared_first_vs_plain",
        unit: "x",
        what: "first visit: shared host / hand-written page, time to paint, each context pair's ratio, median of 3",
        target: Some((Goal::AtMost, 1.5)),
    },
    Figure {
        name: "browser_paint_shared_reload_vs_plain",
        unit: "x",
        what: "reload: shared host / hand-written page, time to paint, median of 3",
        target: Some((Goal::AtMost, 0.5)),
    },
    Figure {
        name: "browser_send_plain_frames",
        unit: "frames",
        what: "`send()` to its bubble painted: the hand-written page that appends its own, animation frames (1: the next), median of 21",
        target: None,
    },
    Figure {
        name: "browser_send_plain_ms",
        unit: "ms",
        what: "the same, time from the send (0-14 ms into a frame) to the start of the frame that paints it",
        target: None,
    },
    Figure {
        name: "browser_send_page_frames",
        unit: "frames",
        what: "`send()` to its pending bubble painted (`view.pending` from `subscribe`), client on the page, median of 21",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_send_page_max_frames",
        unit: "frames",
        what: "the same, the slowest of the 21",
        target: None,
    },
    Figure {
        name: "browser_send_page_ms",
        unit: "ms",
        what: "the same, time to that frame",
        target: None,
    },
    Figure {
        name: "browser_send_page_vs_plain",
        unit: "ratio",
        what: "client on the page / hand-written page, time to the bubble's frame, ratio of the medians (the frame's phase dominates it: the goal is the frames)",
        target: None,
    },
    Figure {
        name: "browser_send_shared_frames",
        unit: "frames",
        what: "`send()` to its pending bubble painted, shared host (the send and the view cross to the SharedWorker and back), median of 21",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_send_shared_max_frames",
        unit: "frames",
        what: "the same, the slowest of the 21",
        target: None,
    },
    Figure {
        name: "browser_send_shared_ms",
        unit: "ms",
        what: "the same, time to that frame",
        target: None,
    },
    Figure {
        name: "browser_send_shared_vs_plain",
        unit: "ratio",
        what: "shared host / hand-written page, time to the bubble's frame, ratio of the medians (the frame's phase dominates it: the goal is the frames)",
        target: None,
    },
    Figure {
        name: "browser_tabs10_shared_heap_mb",
        unit: "MB",
        what: "10 tabs of the 10 000-event session through the shared host: JS heap used after a full GC (CDP `Runtime.getHeapUsage` after `HeapProfiler.collectGarbage`), summed over the 10 pages and the SharedWorker",
        target: None,
    },
    Figure {
        name: "browser_tabs10_page_heap_mb",
        unit: "MB",
        what: "the same 10 tabs, each with the client on the page: JS heap summed over the 10 pages",
        target: None,
    },
    Figure {
        name: "browser_tabs10_shared_vs_page_heap",
        unit: "x",
        what: "JS heap of 10 tabs, shared host / 10 on-page clients (goal: less than the on-page clients)",
        target: Some((Goal::AtMost, 1.0)),
    },
    Figure {
        name: "browser_tabs10_shared_wasm_mb",
        unit: "MB",
        what: "wasm linear memory of those 10 shared-host tabs (the SharedWorker's one instance; the pages load none), not JS heap",
        target: None,
    },
    Figure {
        name: "browser_tabs10_page_wasm_mb",
        unit: "MB",
        what: "wasm linear memory of the 10 on-page clients (one instance per page)",
        target: None,
    },
    Figure {
        name: "browser_tabs10_shared_vs_page_memory",
        unit: "x",
        what: "10 tabs, JS heap + wasm linear memory: shared host / 10 on-page clients",
        target: None,
    },
    Figure {
        name: "browser_notifications_per_frame",
        unit: "max",
        what: "subscriber notifications per animation frame",
        target: Some((Goal::AtMost, 1.0)),
    },
];

/// The cluster bench's label (`--cluster` runs it alone).
const CLUSTER: &str =
    "bench: cluster (SQLite; 1, 2, 3 nodes on a throwaway Postgres; its tail over 2, 3 nodes on a throwaway Redis)";

/// Runs every benchmark and writes the report.
pub fn run_task(args: &[String]) -> Result {
    // `--native` or `--browser` runs one half (while developing; the report
    // then holds only that half).
    let only_native = args.iter().any(|a| a == "--native");
    // `--only live` (or `burst`, `restore`, `cold`, `memory`, `shared`, `paint`, `link`, `proxy`, `send`, comma-separated) runs
    // those browser parts and prints them without rewriting the report: a
    // quick figure to compare within one run on a noisy machine.
    let only_parts = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    // `--link` runs the browser's link part alone (the paint figures on
    // loopback and through the link emulator) and writes the report, the
    // rest carried over; `--send` the same for the send part (a send's
    // pending bubble painted).
    let only_link = args.iter().any(|a| a == "--link");
    // `--proxy` the same for the proxy part (the clients behind a proxy
    // that mutes event streams). Several of them run their parts together.
    let only_proxy = args.iter().any(|a| a == "--proxy");
    let only_send = args.iter().any(|a| a == "--send");
    let alone: Vec<&str> = [
        (only_link, "link"),
        (only_proxy, proxy::PART),
        (only_send, "send"),
    ]
    .into_iter()
    .filter_map(|(on, part)| on.then_some(part))
    .collect();
    let alone = (!alone.is_empty()).then(|| alone.join(","));
    let only_browser =
        only_parts.is_some() || alone.is_some() || args.iter().any(|a| a == "--browser");
    // `--cluster` runs the cluster bench alone (the rest carried over): it
    // needs no other bench's build and is the one that starts databases.
    let only_cluster = args.iter().any(|a| a == "--cluster");
    if only_cluster && (only_browser || only_native) {
        return Err(
            "--cluster runs the cluster bench alone: not with --native, --browser or --only".into(),
        );
    }
    // `--hardening` runs the hardening bench alone (the rest carried over).
    let only_hardening = args.iter().any(|a| a == "--hardening");
    if only_hardening && (only_browser || only_native || only_cluster) {
        return Err("--hardening runs the hardening bench alone: not with other options".into());
    }
    // V8 flags (tests/js/bench.mjs) are for engine experiments: the report
    // holds what a page gets from a default Chromium.
    if only_parts.is_none() && std::env::var_os("BENCH_JS_FLAGS").is_some() {
        return Err(
            "BENCH_JS_FLAGS is for `--only` runs; the report is not written with V8 flags".into(),
        );
    }
    let mut values = BTreeMap::new();
    let mut sources = Vec::new();
    let native: [(&str, &[&str]); 7] = [
        (
            "bench: SSE parser",
            &["bench", "-q", "-p", "replay-client", "--bench", "sse_parse"],
        ),
        (
            "bench: pipeline",
            &["bench", "-q", "-p", "replay-client", "--bench", "pipeline"],
        ),
        (
            "bench: shared pipeline",
            &[
                "bench",
                "-q",
                "-p",
                "replay-client",
                "--bench",
                "shared_pipeline",
            ],
        ),
        (
            "bench: server",
            &["bench", "-q", "-p", "replay-server", "--bench", "server"],
        ),
        (
            "bench: server load (1 000 streams, 50 stuck)",
            &["bench", "-q", "-p", "replay-server", "--bench", "load"],
        ),
        (
            CLUSTER,
            &["bench", "-q", "-p", "replay-server", "--bench", "cluster"],
        ),
        (hardening::LABEL, hardening::ARGV),
    ];
    // The cluster bench's Postgres and Redis (its transient part), removed
    // when the bench ends.
    let brokers = if only_browser || only_hardening {
        None
    } else {
        Some((
            crate::postgres::TempPostgres::start()?,
            crate::redis::TempRedis::start()?,
        ))
    };
    let runs = native
        .iter()
        .filter(|_| !only_browser)
        .filter(|(label, _)| !only_cluster || *label == CLUSTER)
        .filter(|(label, _)| !only_hardening || *label == hardening::LABEL);
    for (label, argv) in runs {
        cmd::step(label, || {
            let mut command = Command::new("cargo");
            if let Some((pg, redis)) = &brokers {
                command.env("REPLAY_BENCH_POSTGRES", &pg.url);
                command.env("REPLAY_BENCH_REDIS", &redis.url);
            }
            let out = command
                .args(*argv)
                .current_dir(root())
                .output()
                .map_err(|e| format!("cargo: {e}"))?;
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
                return Err(format!("{label} failed"));
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                println!("  {line}");
                if let Some((name, value)) = parse_line(line) {
                    values.insert(name, value);
                }
            }
            Ok(())
        })?;
        sources.push(format!("cargo {}", argv.join(" ")));
    }
    drop(brokers);
    if only_native || only_cluster || only_hardening {
        sources.push(
            "headless Chromium: tests/js/bench.mjs (its figures carried over, see below)".into(),
        );
    } else {
        let parts = match &alone {
            Some(parts) => Some(parts.as_str()),
            None => only_parts,
        };
        crate::browser_bench::run(parts, &mut |name, value| {
            values.insert(name.to_owned(), value);
        })?;
        if only_parts.is_some() {
            return Ok(());
        }
        sources.push(if let Some(parts) = &alone {
            if parts == proxy::PART {
                proxy::SOURCE.into()
            } else {
                format!("headless Chromium: tests/js/bench.mjs, its {parts} part(s) alone (`cargo xtask bench --{}`; the other figures carried over)", parts.replace(',', " --"))
            }
        } else {
            "headless Chromium: tests/js/bench.mjs (driven by xtask)".into()
        });
    }
    write_report(&values, &sources)
}

/// Every figure, in the report's order.
fn all_figures() -> impl Iterator<Item = &'static Figure> {
    FIGURES
        .iter()
        .chain(hardening::FIGURES)
        .chain(link_figures())
        .chain(proxy::FIGURES)
}

/// The paint figures of `tests/js/bench.mjs`'s link part: one set per link
/// (loopback and each of [`crate::link::SHAPES`]) and page host, each host
/// beside the hand-written page (`plain`) in the same rounds.
fn link_figures() -> &'static [Figure] {
    static FIGS: std::sync::OnceLock<Vec<Figure>> = std::sync::OnceLock::new();
    FIGS.get_or_init(|| {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let links = std::iter::once(("lo", "loopback")).chain(
            crate::link::SHAPES
                .iter()
                .map(|(name, shape)| (*name, leak(shape.to_string()))),
        );
        let hosts = [
            ("plain", "hand-written page (fetch the replay pages, render)"),
            ("shared", "shared host (the default: `SharedClient`, the SDK in a SharedWorker)"),
            ("page", "on-page client (`ReplayClient`)"),
        ];
        let mut figs = Vec::new();
        for (link, link_what) in links {
            let distant = link == "100ms";
            for (host, host_what) in hosts {
                let key = |suffix: &str| leak(format!("browser_link_{link}_{host}_{suffix}"));
                let what = |text: &str| leak(format!("{link_what}, {host_what}: {text}"));
                let ms = |suffix: &str, text: &str, target| Figure {
                    name: key(suffix),
                    unit: "ms",
                    what: what(text),
                    target,
                };
                let x = |suffix: &str, text: &str, target| Figure {
                    name: key(suffix),
                    unit: "x",
                    what: what(text),
                    target,
                };
                figs.push(ms("first_ms", "first visit (a fresh browser context), navigation start to the frame showing a session's 40 messages; median of 7", None));
                figs.push(ms("reload_ms", "that tab reloaded (files from the HTTP cache, state from IndexedDB)", None));
                let sdk = host != "plain";
                figs.push(ms(
                    "reload_after_html_ms",
                    "the reload's paint after its HTML arrived (the navigation's `responseEnd`): what the page costs past its own HTML's revalidation",
                    (distant && host == "shared").then_some((Goal::AtMost, 40.0)),
                ));
                figs.push(ms(
                    "reload_after_module_ms",
                    "the reload's paint after the page's own module (tab.js) started running: what the page's code and the client cost, without the browser's start of the page",
                    None,
                ));
                figs.push(ms("second_ms", "a second tab of that context on the same session", None));
                figs.push(ms("long_ms", "first visit to a 10 000-event session, navigation start to the frame showing its newest message (at its head, live or not)", None));
                figs.push(x(
                    "long_vs_first",
                    "the 10 000-event first visit / the 40-message first visit, per round",
                    (distant && sdk).then_some((Goal::AtMost, 1.5)),
                ));
                if sdk {
                    figs.push(x(
                        "first_vs_plain",
                        "first visit / the hand-written page's, each round's pair, median",
                        (distant && host == "shared").then_some((Goal::AtMost, 1.3)),
                    ));
                    figs.push(x("reload_vs_plain", "reload / the hand-written page's", None));
                    figs.push(x(
                        "long_vs_plain",
                        "10 000-event first visit / the hand-written page's (which reads it forward)",
                        (distant && sdk).then_some((Goal::AtMost, 0.67)),
                    ));
                }
            }
        }
        figs
    })
}

fn parse_line(line: &str) -> Option<(String, f64)> {
    let mut parts = line.split_whitespace();
    let name = parts.next()?;
    let value = parts.next()?.parse().ok()?;
    parts.next().is_none().then(|| (name.to_owned(), value))
}

/// Hand-written analysis below this line is kept when the report is
/// rewritten (the profile breakdown; see docs/benchmarks.md).
const NOTES_MARKER: &str = "## Analysis (hand-written; kept by `cargo xtask bench`)";

/// The figures and the notes of the report already written: a run of one
/// half (`--native`, `--browser`) keeps the other half's figures.
fn previous_report() -> (BTreeMap<String, f64>, String) {
    let text = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap_or_default();
    // Only the figures table: the notes' own tables name figures too (earlier
    // runs' values), and read as figures they overwrote the measured ones.
    let (table, notes) = text.split_at(text.find(NOTES_MARKER).unwrap_or(text.len()));
    let mut values = BTreeMap::new();
    for line in table.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells
            .get(1)
            .and_then(|c| c.rsplit_once("(`"))
            .map(|(_, n)| n);
        let name = name.and_then(|n| n.strip_suffix("`)"));
        let value = cells.get(2).and_then(|v| v.parse::<f64>().ok());
        if let (Some(name), Some(value)) = (name, value) {
            values.insert(name.to_owned(), value);
        }
    }
    (values, notes.to_owned())
}

fn write_report(measured: &BTreeMap<String, f64>, sources: &[String]) -> Result {
    let (mut values, notes) = previous_report();
    let carried: Vec<String> = all_figures()
        .filter(|f| !measured.contains_key(f.name) && values.contains_key(f.name))
        .map(|f| format!("`{}`", f.name))
        .collect();
    values.extend(measured.iter().map(|(k, v)| (k.clone(), *v)));
    let values = &values;
    let date = cmd::output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut doc = String::new();
    doc.push_str(
        "# Benchmarks\n\nWritten by `cargo xtask bench` (do not edit by hand: rerun it). ",
    );
    doc.push_str("Speed goals live here, not in timed tests.\n\n");
    doc.push_str(&format!(
        "- measured: {date}\n- machine: {cpu}, {cores} cores\n- commands:\n"
    ));
    for s in sources {
        doc.push_str(&format!("  - `{s}`\n"));
    }
    doc.push_str("\n| figure | value | unit | target | met |\n|---|---:|---|---|---|\n");
    for f in all_figures() {
        let Some(&value) = values.get(f.name) else {
            continue;
        };
        let (target, met) = match f.target {
            Some((Goal::AtLeast, t)) => (format!("≥ {t}"), if value >= t { "yes" } else { "no" }),
            Some((Goal::AtMost, t)) => (format!("≤ {t}"), if value <= t { "yes" } else { "no" }),
            None => (String::new(), ""),
        };
        doc.push_str(&format!(
            "| {} (`{}`) | {} | {} | {target} | {met} |\n",
            f.what,
            f.name,
            fmt_value(value),
            f.unit
        ));
    }
    doc.push_str(
        "\nNative figures: release profile with `opt-level = 3` (the `bench` profile), one core. ",
    );
    doc.push_str("Browser figures: the optimised npm package (`cargo xtask pkg`) in Debian's headless Chromium, ");
    doc.push_str("against a live `replay-server` on loopback, measured in one page run. ");
    doc.push_str(
        "The `browser_link_*` figures load their pages through the bench's link emulator ",
    );
    doc.push_str(
        "(`xtask/src/link.rs`: a TCP proxy delaying each byte by half the round trip each way, ",
    );
    doc.push_str(
        "pacing each direction to the bandwidth, a new connection's handshake one round trip; ",
    );
    doc.push_str("no loss, no slow start), `lo` straight on loopback; reproduce them alone with ");
    doc.push_str("`cargo xtask bench --link`.\n");
    if !carried.is_empty() {
        doc.push_str(&format!(
            "\nCarried over from the previous report (not measured by this run): {}.\n",
            carried.join(", ")
        ));
    }
    if !notes.is_empty() {
        doc.push('\n');
        doc.push_str(&notes);
    }
    let path = root().join("docs/benchmarks.md");
    std::fs::write(&path, doc).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn fmt_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.0}", v)
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}
