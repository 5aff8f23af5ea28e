//! The server's hardening probes at full scale (slow readers, one address's connections, streams aimed at one log) and
//! the multiplexed stream's (one address's stream slots, unread streams'
//! live frames), against the real binary with its default limits on loopback; the
//! attackers and victims are distinct loopback addresses (127.0.0.2, …).
//! Prints `hardening_* N` lines for `cargo xtask bench`, and on stderr
//! what each shape saw and the machine's load average beside it.
//!
//! Bounded: fixed counts, every wait has a deadline, each shape runs its
//! own server, killed at its end. About a minute.
//!
//! Run: `cargo bench -p replay-server --bench hardening [-- slow|conns|log|mux]`
//! (one argument: those shapes only). `REPLAY_BENCH_SERVER=path` measures
//! another build.

mod hardening_probes;
#[allow(dead_code)] // the other benches' ways to start it
mod spawn;

use std::time::Instant;

use hardening_probes::gauges::load_average;
use hardening_probes::net::Tally;
use hardening_probes::{mux, per_log, slow, starve};

/// Raises the soft file descriptor limit to the hard one: the shapes hold
/// over 2 000 sockets, and the server (a child) inherits the limit.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if let Err(e) = setrlimit(Resource::Nofile, raised) {
        eprintln!("could not raise RLIMIT_NOFILE: {e}");
    }
}

/// Prints one figure.
fn figure(name: &str, value: f64) {
    println!("hardening_{name} {value:.1}");
}

/// Prints the attacker's tally.
fn attacker(name: &str, t: &Tally) {
    eprintln!("  attacker: {t:?}");
    figure(&format!("{name}_attacker_refused"), t.refused as f64);
}

fn slow_readers(loads: &mut Vec<f64>) {
    for (name, addresses, per) in [
        ("slow_250", &["127.0.0.2"][..], 250),
        ("slow_500", &["127.0.0.2", "127.0.0.3"][..], 250),
    ] {
        loads.push(load_average());
        let started = Instant::now();
        let f = runtime().block_on(slow::run(addresses, per));
        eprintln!(
            "{name}: {} streams opened of {}; TCP memory before {:.0} MB; {:.1} s, load {:.2}",
            f.opened,
            addresses.len() * per,
            f.tcp_before_mb,
            started.elapsed().as_secs_f64(),
            load_average()
        );
        figure(&format!("{name}_rss_mb"), f.rss_mb);
        figure(&format!("{name}_tcp_mb"), f.tcp_mb);
        figure(&format!("{name}_hello_p50_ms"), f.hello_p50_ms);
        figure(&format!("{name}_hello_max_ms"), f.hello_max_ms);
        // Not ended within the wait: the wait, marked by the stderr line.
        let ended = f.ended_s.unwrap_or(slow::END_WITHIN.as_secs_f64());
        figure(&format!("{name}_ended_s"), ended);
        if f.ended_s.is_none() {
            eprintln!("{name}: streams still open after the wait");
        }
    }
}

fn connections(loads: &mut Vec<f64>) {
    type Shape = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = starve::Starved>>>;
    let shapes: [(&str, Shape); 3] = [
        ("conns_keepalive", || Box::pin(starve::keep_alive())),
        ("conns_reading", || Box::pin(starve::reading())),
        ("conns_slow", || Box::pin(starve::slow_sockets())),
    ];
    for (name, shape) in shapes {
        loads.push(load_average());
        let started = Instant::now();
        let s = runtime().block_on(shape());
        eprintln!(
            "{name}: victim {} of 5 answered 200; attacker holds {}; {:.1} s, load {:.2}",
            s.victim_ok,
            s.held,
            started.elapsed().as_secs_f64(),
            load_average()
        );
        figure(&format!("{name}_victim_max_ms"), s.victim_max_ms);
        figure(&format!("{name}_victim_ok"), s.victim_ok as f64);
        figure(&format!("{name}_attacker_held"), s.held as f64);
        attacker(name, &s.attacker);
    }
}

fn aimed_at_logs(loads: &mut Vec<f64>) {
    type Shape = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = per_log::Aimed>>>;
    let shapes: [(&str, Shape); 2] = [
        ("log_session", || Box::pin(per_log::one_session())),
        ("log_mux", || Box::pin(per_log::multiplexed())),
    ];
    for (name, shape) in shapes {
        loads.push(load_average());
        let started = Instant::now();
        let a = runtime().block_on(shape());
        eprintln!(
            "{name}: victim {} of 5 served; attacker holds {} subs; {:.1} s, load {:.2}",
            a.victim_ok,
            a.held_subs,
            started.elapsed().as_secs_f64(),
            load_average()
        );
        figure(&format!("{name}_victim_max_ms"), a.victim_max_ms);
        figure(&format!("{name}_victim_ok"), a.victim_ok as f64);
        figure(&format!("{name}_attacker_subs"), a.held_subs as f64);
        attacker(name, &a.attacker);
    }
}

fn multiplexed(loads: &mut Vec<f64>) {
    loads.push(load_average());
    let started = Instant::now();
    let s = runtime().block_on(mux::slots());
    eprintln!(
        "mux_slots: attacker {} of 32 streams answered 200, its new one {}; victim {} of 5; {:.1} s, load {:.2}",
        s.attacker_ok,
        if s.attacker_new_ok { "opened" } else { "refused" },
        s.victim_ok,
        started.elapsed().as_secs_f64(),
        load_average()
    );
    figure("mux_slots_victim_max_ms", s.victim_max_ms);
    figure("mux_slots_victim_ok", s.victim_ok as f64);
    figure(
        "mux_slots_attacker_new_ok",
        f64::from(u8::from(s.attacker_new_ok)),
    );
    figure("mux_slots_held_streams", s.held_streams as f64);
    loads.push(load_average());
    let started = Instant::now();
    let u = runtime().block_on(mux::unread());
    eprintln!(
        "mux_unread: {} events appended; victim {} of 5; {:.1} s, load {:.2}",
        u.appended,
        u.victim_ok,
        started.elapsed().as_secs_f64(),
        load_average()
    );
    figure("mux_unread_rss_mb", u.rss_mb);
    figure("mux_unread_victim_max_ms", u.victim_max_ms);
    figure("mux_unread_victim_ok", u.victim_ok as f64);
    figure("mux_unread_events", u.appended as f64);
}

/// A fresh runtime per shape: nothing of one shape's tasks outlives it.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn main() {
    raise_nofile();
    // `cargo bench` passes `--bench`; a word picks shapes.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    let started = Instant::now();
    let mut loads = Vec::new();
    if runs("slow") {
        slow_readers(&mut loads);
    }
    if runs("conns") {
        connections(&mut loads);
    }
    if runs("log") {
        aimed_at_logs(&mut loads);
    }
    if runs("mux") {
        multiplexed(&mut loads);
    }
    loads.push(load_average());
    let max_load = loads.iter().copied().fold(0.0, f64::max);
    figure("load_avg_max", max_load);
    eprintln!(
        "hardening: {:.1} s, load average (1 min) at each shape's start and the end: {loads:?}",
        started.elapsed().as_secs_f64()
    );
}
