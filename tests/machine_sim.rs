//! Deterministic seeded simulations of the machine against the fake server,
//! with random faults; runs natively and in the browser.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::sim::{FaultMix, Sim};

#[test]
fn seeded_simulations_converge_to_the_oracle() {
    let mut pipelined = 0;
    for seed in 0..300u64 {
        let turns = 1 + (seed % 6) as u32;
        let mut sim = Sim::new(seed, Vec::new(), turns, FaultMix::all());
        sim.run(3_000);
        pipelined += usize::from(sim.max_fetches_in_flight > 1);
    }
    // Prefetched pages (answered in random order) are part of the mix.
    assert!(pipelined > 100, "only {pipelined} runs pipelined pages");
}

#[test]
fn seeded_simulations_with_sends_commit_each_message_once() {
    // The same schedules with the user sending: each message in the
    // runtime's log once, nothing pending at the end, whatever the faults.
    let mut sent = 0;
    for seed in 0..300u64 {
        let turns = 1 + (seed % 6) as u32;
        let mut sim = Sim::new(seed, Vec::new(), turns, FaultMix::with_sends());
        sim.run(3_000);
        sent += sim.sent.len();
    }
    assert!(sent > 500, "only {sent} messages sent");
}

#[test]
fn seeded_simulations_without_faults_converge() {
    let quiet = FaultMix {
        cuts: false,
        http_errors: false,
        lag_drops: false,
        reloads: false,
        lifecycle: false,
        close: false,
        sends: false,
    };
    for seed in 0..50u64 {
        let mut sim = Sim::new(seed, Vec::new(), 4, quiet);
        sim.run(3_000);
    }
}

#[test]
fn close_during_restore_dispatches_nothing_more() {
    let mut closed_restoring = 0;
    for seed in 0..50u64 {
        let mut sim = Sim::new(seed, Vec::new(), 3, FaultMix::all());
        // A few random steps in, at a moment a restore is pending: every
        // client starts restoring, and faults (epoch changes, rejected
        // cursors, reloads) start new restores later.
        for step in 0.. {
            if step >= seed * 7 % 60 && sim.is_restoring() {
                break;
            }
            if step > 5_000 {
                break;
            }
            sim.random_step();
        }
        if sim.is_restoring() {
            closed_restoring += 1;
        }
        sim.close_now();
    }
    assert!(
        closed_restoring >= 40,
        "closed during a restore in {closed_restoring} of 50 runs"
    );
}
