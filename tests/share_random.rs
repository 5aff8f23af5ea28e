//! Seeded random schedules: tabs open, crash and give up the lock, machines
//! come and go and drop offline, the logs grow, connections are cut. Every
//! surviving machine ends equal to the server, over at most one connection.

mod share_support;

use replay_client::core::machine::{Lifecycle, SplitMix64};
use share_support::World;

const SESSIONS: [&str; 4] = ["a", "b", "c", "d"];

struct Lock {
    holder: Option<usize>,
}

impl Lock {
    /// The browser grants the lock to the first live tab waiting for it.
    fn grant(&mut self, w: &mut World) {
        if self.holder.is_some_and(|h| w.ctxs[h].alive) {
            return;
        }
        self.holder = (0..w.ctxs.len()).find(|&i| w.ctxs[i].alive);
        if let Some(h) = self.holder {
            let now = w.now;
            w.ctxs[h].share.handle_became_leader(now);
        }
    }
}

fn run(seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut pick = |n: u64| rng.up_to(n.saturating_sub(1));
    let mut w = World::new(&[("a", 3), ("b", 0), ("c", 10), ("d", 1)]);
    for _ in 0..3 {
        w.add_ctx(true);
    }
    let mut lock = Lock { holder: None };
    lock.grant(&mut w);
    for (t, sid) in SESSIONS.iter().take(3).enumerate() {
        w.follow(t, sid, None);
    }
    let mut offline: Vec<(usize, u64)> = vec![];
    for _ in 0..150 {
        match pick(12) {
            0..=3 => w.server.append(SESSIONS[pick(4) as usize]),
            4 => w.advance(pick(3_000)),
            5 => {
                let t = pick(w.ctxs.len() as u64) as usize;
                if w.ctxs[t].alive && w.ctxs[t].machines.len() < 4 {
                    w.follow(t, SESSIONS[pick(4) as usize], None);
                }
            }
            6 => {
                let t = pick(w.ctxs.len() as u64) as usize;
                let n = w.ctxs[t].machines.len() as u64;
                if w.ctxs[t].alive && n > 1 {
                    let key = w.ctxs[t].machines[pick(n) as usize].0;
                    offline.retain(|o| *o != (t, key));
                    w.unfollow(t, key);
                }
            }
            7 => {
                let t = pick(w.ctxs.len() as u64) as usize;
                let n = w.ctxs[t].machines.len() as u64;
                if w.ctxs[t].alive && n > 0 {
                    let key = w.ctxs[t].machines[pick(n) as usize].0;
                    let now = w.now;
                    if let Some(i) = offline.iter().position(|o| *o == (t, key)) {
                        offline.remove(i);
                        w.machine_mut(t, key)
                            .handle_lifecycle(Lifecycle::Online, now);
                    } else {
                        offline.push((t, key));
                        w.machine_mut(t, key)
                            .handle_lifecycle(Lifecycle::Offline, now);
                    }
                }
            }
            8 => {
                // The leader crashes, or is frozen and gives the lock up.
                if let Some(h) = lock.holder {
                    if pick(2) == 0 && w.ctxs.iter().filter(|c| c.alive).count() > 1 {
                        w.crash(h);
                        offline.retain(|o| o.0 != h);
                    } else {
                        let now = w.now;
                        w.ctxs[h].share.handle_lost_leadership(now);
                        w.settle();
                    }
                    lock.holder = None;
                    // Another waiting tab gets it a little later.
                    w.advance(pick(200));
                    lock.grant(&mut w);
                }
            }
            9 => {
                if w.ctxs.len() < 8 {
                    let t = w.add_ctx(true);
                    w.follow(t, SESSIONS[pick(4) as usize], None);
                    lock.grant(&mut w);
                }
            }
            10 => {
                // The server cuts the connection.
                if let Some(c) = w.server.conns.first() {
                    let (ci, id) = (c.ctx, c.id);
                    w.server.close(ci, id);
                    let now = w.now;
                    w.ctxs[ci].share.handle_mux_end(id, now);
                }
            }
            _ => w.settle(),
        }
    }
    let now = w.now;
    for (t, key) in offline.drain(..) {
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
    for i in (0..w.ctxs.len()).filter(|&i| w.ctxs[i].alive) {
        if Some(i) != lock.holder {
            assert_eq!(
                w.conns_of(i),
                0,
                "seed {seed}: follower {i} holds a connection"
            );
        }
    }
}

#[test]
fn seeded_schedules_converge_on_one_connection() {
    for seed in 0..40 {
        run(seed);
    }
}
