//! Property tests of the machine (native only): random session logs and
//! random fault schedules against the fake server, checked against the
//! oracle fold.
#![cfg(not(target_arch = "wasm32"))]

mod machine_support;

use machine_support::events::*;
use machine_support::rig::{Rig, BOOT, EPOCH};
use machine_support::server::{Server, Step};
use machine_support::sim::{script, Chooser, FaultMix, Sim};
use proptest::prelude::*;
use replay_client::core::machine::{Config, Machine, SplitMix64};
use replay_client::core::transcript::{fold, transcript_eq};

/// A server log built from a generated script (no faults).
fn server_log(seed: u64, turns: u32) -> Server {
    let mut c = Chooser {
        schedule: Default::default(),
        rng: SplitMix64::new(seed),
    };
    let mut server = Server::new();
    for step in script(&mut c, turns, false) {
        server.step(step);
    }
    server
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random logs (turns, deltas, tools, questions, tasks, worker restarts,
    /// epoch changes) under random faults (cuts at any byte, overlapping and
    /// duplicated backlogs, dropped durable frames, heartbeat-only gaps,
    /// 5xx/429/400/409/401, reloads, offline, pagehide): the final transcript
    /// equals the oracle; the cursor never decreases, never moves on a
    /// partial frame; every persisted state restores to the oracle at its cursor.
    #[test]
    fn random_logs_and_faults_converge_to_the_oracle(
        seed in any::<u64>(),
        turns in 1u32..7,
        schedule in proptest::collection::vec(any::<u32>(), 0..300),
    ) {
        let mut sim = Sim::new(seed, schedule, turns, FaultMix::all());
        sim.run(4_000);
    }

    /// Closing at any point (including mid-restore) dispatches nothing more
    /// than aborts and one final, consistent persist.
    #[test]
    fn close_at_any_point_dispatches_nothing_more(
        seed in any::<u64>(),
        steps in 0u32..200,
    ) {
        let mut sim = Sim::new(seed, Vec::new(), 3, FaultMix::all());
        for _ in 0..steps {
            sim.random_step();
        }
        sim.close_now();
    }

    /// The state persisted at any cut point restores to exactly the view
    /// built live (items, prompts, overlay, tasks, interruptions).
    #[test]
    fn state_restored_at_any_cut_point_equals_the_live_built_one(
        seed in any::<u64>(),
        turns in 1u32..6,
        cut_permille in 0u64..=1000,
        chunk in 1usize..200,
    ) {
        let server = server_log(seed, turns);
        let log = server.log().clone();
        let cut = (log.len() as u64 * cut_permille / 1000) as usize;
        let mut r = Rig::new();
        r.open_ok();
        r.send(&[hello(EPOCH, 0, BOOT)]);
        r.answer(&replay_page(EPOCH, BOOT, 0, &[], 0, false, None, None));
        let bytes = frames(&log[..cut]).into_bytes();
        for piece in bytes.chunks(chunk) {
            r.send_raw(piece);
        }
        prop_assert_eq!(r.c.cursor(), cut as u64);
        let restored = Machine::new(Config::session(SES), Some(&r.c.persisted_value()), 0);
        prop_assert_eq!(restored.view(), r.c.view());
        prop_assert_eq!(restored.position(), r.c.position());
        let want = fold(EPOCH, &log[..cut]);
        prop_assert!(transcript_eq(&restored.transcript().unwrap(), &want));
    }

    /// A stream cut at any byte: the cursor is at the last complete durable
    /// frame, the reconnect asks from there, and every event is applied once.
    #[test]
    fn stream_cut_at_any_byte_resumes_exactly_once(
        seed in any::<u64>(),
        turns in 1u32..5,
        cut_permille in 0u64..=1000,
    ) {
        let server = server_log(seed, turns);
        let log = server.log().clone();
        let bytes = frames(&log).into_bytes();
        let cut = (bytes.len() as u64 * cut_permille / 1000) as usize;
        let mut r = Rig::new();
        r.open_ok();
        r.send(&[hello(EPOCH, 0, BOOT)]);
        r.answer(&replay_page(EPOCH, BOOT, 0, &[], 0, false, None, None));
        r.send_raw(&bytes[..cut]);
        // Complete frames in the prefix: count blank-line terminators.
        let complete = String::from_utf8_lossy(&bytes[..cut]).matches("\n\n").count() as u64;
        prop_assert_eq!(r.c.cursor(), complete);
        let id = r.stream_id();
        r.c.handle_network_error(id, "cut", r.now);
        r.pump();
        let path = r.until_reconnect();
        prop_assert_eq!(path, format!("/v1/sessions/ses_1/events?after_seq={complete}"));
        r.open_ok();
        let mut rest = vec![hello(EPOCH, log.len() as u64, BOOT)];
        // Overlap: the server re-sends one event the client has.
        rest.extend(log[complete.saturating_sub(1) as usize..].iter().cloned());
        r.send(&rest);
        prop_assert_eq!(r.c.cursor(), log.len() as u64);
        prop_assert!(transcript_eq(&r.c.transcript().unwrap(), &fold(EPOCH, &log)));
    }
}

#[test]
fn generated_scripts_cover_restarts_questions_tools_extras_and_ends() {
    // Guards the generator itself: over a few seeds every feature shows up.
    let (mut restarts, mut questions, mut tools, mut epochs) = (0, 0, 0, 0);
    let (mut extras, mut closed, mut failed) = (0, 0, 0);
    for seed in 0..200 {
        let mut c = Chooser {
            schedule: Default::default(),
            rng: SplitMix64::new(seed),
        };
        for s in script(&mut c, 4, true) {
            match s {
                Step::RestartWorker => restarts += 1,
                Step::AskLive(_) => questions += 1,
                Step::NewEpoch => epochs += 1,
                Step::Durable(e) if e.type_name() == "tool.started" => tools += 1,
                Step::Durable(e) if e.type_name() == "plan.updated" => extras += 1,
                Step::Durable(e) if e.type_name() == "session.closed" => closed += 1,
                Step::Durable(e) if e.type_name() == "session.failed" => failed += 1,
                _ => {}
            }
        }
    }
    assert!(restarts > 10 && questions > 10 && tools > 10 && epochs > 5);
    assert!(extras > 10 && closed > 10 && failed > 10);
}
