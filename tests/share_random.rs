//! Seeded random schedules: machines come and go (closed, or their client
//! gone) and drop offline, the logs grow, connections are cut. Every
//! surviving machine ends equal to the server, over at most one connection.

mod share_support;

use replay_client::core::machine::{Lifecycle, SplitMix64};
use share_support::World;

const SESSIONS: [&str; 4] = ["a", "b", "c", "d"];

fn run(seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut pick = |n: u64| rng.up_to(n.saturating_sub(1));
    let mut w = World::new(&[("a", 3), ("b", 0), ("c", 10), ("d", 1)]);
    let t = w.add_ctx();
    for sid in SESSIONS.iter().take(3) {
        w.follow(t, sid, None);
    }
    let mut offline: Vec<u64> = vec![];
    for _ in 0..150 {
        let n = w.ctxs[t].machines.len() as u64;
        match pick(12) {
            0..=3 => w.server.append(SESSIONS[pick(4) as usize]),
            4 => w.advance(pick(3_000)),
            5 | 6 => {
                if n < 8 {
                    w.follow(t, SESSIONS[pick(4) as usize], None);
                }
            }
            7 => {
                if n > 1 {
                    let key = w.ctxs[t].machines[pick(n) as usize].0;
                    offline.retain(|o| *o != key);
                    w.unfollow(t, key);
                }
            }
            8 => {
                // Its client closed: the machine is dropped, not aborted.
                if n > 1 {
                    let key = w.ctxs[t].machines[pick(n) as usize].0;
                    offline.retain(|o| *o != key);
                    w.ctxs[t].machines.retain(|(k, _)| *k != key);
                    let now = w.now;
                    w.ctxs[t].share.handle_machine_gone(key, now);
                }
            }
            9 => {
                if n > 0 {
                    let key = w.ctxs[t].machines[pick(n) as usize].0;
                    let now = w.now;
                    if let Some(i) = offline.iter().position(|o| *o == key) {
                        offline.remove(i);
                        w.machine_mut(t, key)
                            .handle_lifecycle(Lifecycle::Online, now);
                    } else {
                        offline.push(key);
                        w.machine_mut(t, key)
                            .handle_lifecycle(Lifecycle::Offline, now);
                    }
                }
            }
            10 => {
                // The server cuts the connection.
                if let Some(c) = w.server.conns.first() {
                    let id = c.id;
                    w.server.close(t, id);
                    let now = w.now;
                    w.ctxs[t].share.handle_mux_end(id, now);
                }
            }
            _ => w.settle(),
        }
    }
    let now = w.now;
    for key in offline.drain(..) {
        w.machine_mut(t, key)
            .handle_lifecycle(Lifecycle::Online, now);
    }
    w.advance(60_000);
    for s in SESSIONS {
        w.server.append(s);
    }
    w.advance(100);
    w.assert_converged();
    assert!(
        w.server.conns.len() <= 1,
        "seed {seed}: {} connections",
        w.server.conns.len()
    );
}

#[test]
fn seeded_schedules_converge_on_one_connection() {
    for seed in 0..40 {
        run(seed);
    }
}
