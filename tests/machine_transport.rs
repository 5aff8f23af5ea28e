//! The transport rule (docs/protocol.md §6, rule 12): a stream that a proxy
//! mutes is followed by polling, paced by the core, re-probed, and left
//! when a stream shows its `hello` again; a runtime that is down is backoff,
//! never polling. Driven by hand over the simulated clock.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use std::collections::HashSet;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{
    Action, ClientNotice, Config, FetchKind, Lifecycle, Notice, Pace, RequestId, State, Target,
    MUTED_TRIES, POLL_IDLE_MAX_MS, REPROBE_MS,
};
use replay_client::core::protocol::*;
use replay_client::core::transcript::fold;

/// A runtime behind a proxy: its streams' heads come, their events only
/// when `muted` is off; its JSON answers unless `down`.
struct Net {
    r: Rig,
    events: Vec<Envelope>,
    live: Option<LiveTurn>,
    muted: bool,
    down: bool,
    /// The next poll is answered 503 with this `Retry-After`.
    busy_for: Option<&'static str>,
    /// Streams whose head was sent.
    opened: HashSet<RequestId>,
    /// The stream that shows events (unmuted, `hello` sent).
    showing: Option<RequestId>,
    /// When each page request went out, after the restore's first one.
    polls: Vec<u64>,
    streams: Vec<u64>,
    /// Overlay texts seen after each input, in order, without repeats.
    texts: Vec<String>,
    seen: usize,
}

fn after_of(path: &str) -> u64 {
    let v = path
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("after_cursor="))
        .expect("a replay page path");
    v.parse().unwrap()
}

impl Net {
    fn new(muted: bool) -> Self {
        let mut n = Net {
            r: Rig::new(),
            events: simple_log(2),
            live: None,
            muted,
            down: false,
            busy_for: None,
            opened: HashSet::new(),
            showing: None,
            polls: Vec::new(),
            streams: Vec::new(),
            texts: Vec::new(),
            seen: 0,
        };
        n.serve();
        n
    }

    fn head(&self) -> u64 {
        self.events.len() as u64
    }

    /// Commits an event: the showing stream carries it at once.
    fn commit(&mut self, env: Envelope) {
        self.events.push(env.clone());
        if let Some(id) = self.showing.filter(|id| Some(*id) == self.r.stream) {
            let now = self.r.now;
            self.r
                .c
                .handle_stream_bytes(id, frame(&env).as_bytes(), now);
        }
        self.serve();
    }

    /// Answers what the machine asked for, until it asks nothing new.
    fn serve(&mut self) {
        loop {
            self.r.pump();
            let mut acted = false;
            let log = self.r.log[self.seen..].to_vec();
            self.seen = self.r.log.len();
            for a in &log {
                match a {
                    Action::Fetch { .. } => self.polls.push(self.r.now),
                    Action::OpenStream { .. } => self.streams.push(self.r.now),
                    _ => {}
                }
            }
            if let Some(id) = self.r.stream.filter(|id| !self.opened.contains(id)) {
                self.opened.insert(id);
                self.r.open_ok();
                if !self.muted {
                    self.showing = Some(id);
                    let now = self.r.now;
                    let hello = frames(&[hello(EPOCH, self.head(), BOOT)]);
                    self.r.c.handle_stream_bytes(id, hello.as_bytes(), now);
                }
                acted = true;
            }
            while let Some((id, kind, path)) = self.r.fetch.clone() {
                assert_eq!(kind, FetchKind::Replay);
                self.r.forget_fetch(id);
                let now = self.r.now;
                if self.down {
                    self.r.c.handle_network_error(id, "connection refused", now);
                } else if let Some(hint) = self.busy_for.take() {
                    self.r.c.handle_http_error(id, 503, Some(hint), b"", now);
                } else {
                    let after = after_of(&path) as usize;
                    let page = replay_page(
                        EPOCH,
                        BOOT,
                        after as u64,
                        &self.events[after.min(self.events.len())..],
                        self.head(),
                        false,
                        self.live.as_ref(),
                        None,
                    );
                    self.r.c.handle_replay_page(id, &page, now);
                }
                self.r.pump_waiting_pages();
                acted = true;
            }
            self.note_text();
            if !acted {
                return;
            }
        }
    }

    fn note_text(&mut self) {
        let text = self
            .r
            .c
            .view()
            .as_session()
            .and_then(|s| s.overlay())
            .map(|o| o.text.to_string());
        if let Some(t) = text {
            if self.texts.last() != Some(&t) {
                self.texts.push(t);
            }
        }
    }

    /// Runs the timers up to `until`, answering everything on the way.
    fn run_until(&mut self, until: u64) {
        while let Some(t) = self.r.c.poll_timeout() {
            if t > until {
                break;
            }
            self.r.now = self.r.now.max(t);
            let now = self.r.now;
            self.r.c.handle_timeout(now);
            self.serve();
        }
        self.r.now = self.r.now.max(until);
        self.serve();
    }

    fn lifecycle(&mut self, e: Lifecycle) {
        let now = self.r.now;
        self.r.c.handle_lifecycle(e, now);
        self.serve();
    }

    fn muted_notices(&self) -> usize {
        self.r
            .notices
            .iter()
            .filter(|n| matches!(n, Notice::StreamMuted { .. }))
            .count()
    }

    /// Polls sent in `[from, to)`.
    fn polls_between(&self, from: u64, to: u64) -> Vec<u64> {
        self.polls
            .iter()
            .copied()
            .filter(|t| (from..to).contains(t))
            .collect()
    }
}

/// Until the fallback: the connect deadline on each try, plus backoff.
fn switched(n: &Net) -> bool {
    n.r.c.polling()
}

#[test]
fn a_muted_stream_is_followed_by_polling_with_one_notice() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n), "polling after {MUTED_TRIES} muted tries");
    assert_eq!(n.muted_notices(), 1, "{:?}", n.r.notices);
    assert_eq!(n.r.c.status().state, State::Live);
    // The tries: the first and its retries until the switch, then none
    // until the re-probe.
    assert_eq!(n.streams.len(), MUTED_TRIES as usize, "{:?}", n.streams);
    let notice =
        n.r.notices
            .iter()
            .find_map(|x| ClientNotice::from_notice(x, 0).filter(|c| c.code == "stream_muted"))
            .expect("a stream_muted notice");
    assert!(
        notice.message.contains("X-Accel-Buffering: no"),
        "{}",
        notice.message
    );
    assert!(notice.message.contains("compression"), "{}", notice.message);
}

#[test]
fn a_turn_started_just_after_load_shows_before_the_stream_is_given_up() {
    let mut n = Net::new(true);
    n.run_until(1_500);
    assert!(!switched(&n), "the stream is still being tried");
    n.commit(turn_started(3, "t1"));
    n.live = Some(live_turn(1, "Hello"));
    n.run_until(3_000);
    assert_eq!(
        n.r.c.cursor(),
        3,
        "the turn's start is read by a poll: {:?}",
        n.polls
    );
    assert_eq!(n.texts.last().map(String::as_str), Some("Hello"));
}

#[test]
fn a_runtime_down_is_backoff_never_polling() {
    let mut n = Net::new(true);
    n.run_until(500);
    n.down = true;
    n.run_until(120_000);
    assert!(!switched(&n));
    assert_eq!(n.muted_notices(), 0);
    assert_eq!(n.r.c.status().state, State::Backoff);
    // The failing checks back off: no storm.
    assert!(n.polls_between(60_000, 120_000).len() <= 6, "{:?}", n.polls);
}

#[test]
fn a_stream_that_fails_otherwise_is_not_muted() {
    // Streams refused (a 502 of the proxy, a restarting runtime) while
    // JSON answers: retried with backoff, as before.
    let mut n = Net::new(false);
    n.run_until(2_000);
    assert!(!n.r.c.polling());
    for _ in 0..4 {
        let id = n.r.stream_id();
        let now = n.r.now;
        n.r.c.handle_http_error(id, 502, None, b"", now);
        n.muted = true;
        n.serve();
        let _ = n.r.until_reconnect();
        n.muted = false;
        n.opened.insert(n.r.stream_id());
        n.r.open_ok();
    }
    assert!(!n.r.c.polling());
    assert_eq!(n.muted_notices(), 0);
}

#[test]
fn polls_are_paced_by_what_is_open_and_by_visibility() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    // Idle: the interval doubles up to its cap.
    n.run_until(120_000);
    let idle = n.polls_between(60_000, 120_000);
    let gaps: Vec<u64> = idle.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| *g == POLL_IDLE_MAX_MS), "{gaps:?}");
    // A turn open: every second.
    n.commit(turn_started(3, "t1"));
    n.live = Some(live_turn(1, "a"));
    n.run_until(130_000);
    n.run_until(140_000);
    let busy = n.polls_between(130_000, 140_000);
    assert!(busy.len() >= 9, "{busy:?}");
    // Hidden, with the turn still open: slower.
    n.lifecycle(Lifecycle::Hidden);
    n.run_until(150_000);
    n.run_until(200_000);
    let hidden = n.polls_between(150_000, 200_000);
    assert!((9..=11).contains(&hidden.len()), "{hidden:?}");
    // Done and idle: back off to the cap again.
    n.commit(turn_completed(4, "t1"));
    n.live = None;
    n.lifecycle(Lifecycle::Visible);
    n.run_until(300_000);
    let late: Vec<u64> = n.polls_between(260_000, 300_000);
    assert!((4..=5).contains(&late.len()), "{late:?}");
}

#[test]
fn an_idle_polling_client_asks_at_most_six_times_a_minute_probes_included() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    // Settled at the idle pace. A lone `online` probes at once, between two
    // polls: from then on the probes do not fall on the polls' times (in
    // a browser they seldom do: each poll waits for its answer).
    n.run_until(150_000);
    let last = *n.polls.last().unwrap();
    n.run_until(last + 4_000);
    n.lifecycle(Lifecycle::Online);
    // The probe stands in for the poll due 6 s later: the poll after it
    // comes one interval after that one, whatever the probe's time.
    n.run_until(last + 2 * POLL_IDLE_MAX_MS + 1_000);
    let next = n.polls.iter().copied().find(|t| *t > last);
    assert_eq!(next, Some(last + 2 * POLL_IDLE_MAX_MS), "{:?}", n.polls);
    // Whole re-probe cycles (a muted probe waits out the connect deadline,
    // then the re-probe period).
    let cycle = n.r.c.config().connect_timeout_ms + REPROBE_MS;
    let from = last + 4_000;
    let to = from + 4 * cycle;
    n.run_until(to);
    let polls = n.polls_between(from, to).len();
    let probes = n.streams.iter().filter(|t| (from..to).contains(*t)).count();
    assert!(probes >= 2, "{:?}", n.streams);
    let per_minute = (polls + probes) as f64 * 60_000.0 / (to - from) as f64;
    assert!(
        per_minute <= 6.0,
        "{polls} polls and {probes} probes: {per_minute:.2}/min"
    );
}

#[test]
fn a_retry_after_on_a_poll_is_honoured() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    n.commit(turn_started(3, "t1"));
    n.live = Some(live_turn(1, "a"));
    n.run_until(70_000);
    n.busy_for = Some("7");
    let t0 = n.r.now;
    n.run_until(t0 + 2_000);
    let refused = *n.polls.last().unwrap();
    n.run_until(t0 + 20_000);
    let next = n
        .polls
        .iter()
        .copied()
        .find(|t| *t > refused)
        .expect("polled again");
    assert!(next - refused >= 7_000, "{refused} then {next}");
    assert_eq!(n.r.c.status().state, State::Live);
}

#[test]
fn a_polling_client_returns_to_the_stream_when_a_probe_shows_hello() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    let streams = n.streams.len();
    let since = *n.streams.last().unwrap();
    // The proxy is fixed; the next probe is within the re-probe period.
    n.muted = false;
    while n.streams.len() == streams && n.r.now < 60_000 + REPROBE_MS {
        let t = n.r.now + 1_000;
        n.run_until(t);
    }
    assert_eq!(n.streams.len(), streams + 1, "{:?}", n.streams);
    assert!(n.r.now <= since + n.r.c.config().connect_timeout_ms + REPROBE_MS + 1_000);
    assert!(!n.r.c.polling());
    assert_eq!(n.r.c.status().state, State::Live);
    let back = *n.streams.last().unwrap();
    n.run_until(back + 30_000);
    assert!(
        n.polls_between(back + 1, back + 30_000).is_empty(),
        "{:?}",
        n.polls
    );
    // The stream carries what comes now.
    n.commit(user_msg(3, "u3", "three"));
    assert_eq!(n.r.c.cursor(), 3);
}

#[test]
fn a_probe_that_is_muted_again_keeps_polling_and_visible_probes_at_once() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    n.run_until(60_000 + REPROBE_MS + 30_000);
    assert!(n.r.c.polling(), "a muted probe keeps polling");
    assert_eq!(n.muted_notices(), 1, "said once");
    let streams = n.streams.len();
    n.muted = false;
    n.lifecycle(Lifecycle::Hidden);
    n.lifecycle(Lifecycle::Visible);
    assert_eq!(n.streams.len(), streams + 1, "probed when visible");
    assert!(!n.r.c.polling());
}

#[test]
fn nothing_is_lost_or_doubled_across_the_switches_and_the_overlay_grows() {
    let mut n = Net::new(true);
    let mut seq = 2;
    let mut text = String::new();
    let mut t = 0;
    // Events and a growing answer, through muting, polling, a probe that
    // works, and streaming again.
    while t < 60_000 + REPROBE_MS + 20_000 {
        t += 700;
        if t == 700 * 80 {
            n.muted = false;
        }
        if t % 2_100 == 0 {
            seq += 1;
            n.commit(user_msg(seq, &format!("u{seq}"), "x"));
        }
        text.push_str("word ");
        n.live = Some(live_turn(t, &text));
        n.run_until(t);
    }
    assert!(!n.r.c.polling(), "streaming again");
    assert_eq!(n.r.c.cursor(), seq);
    assert_eq!(
        n.r.c.transcript().unwrap().items,
        fold(EPOCH, &n.events).items,
        "the transcript is the server's"
    );
    assert_eq!(n.r.c.counters().gaps_repaired, 0);
    assert!(
        n.texts.len() >= 50,
        "the overlay grew from polls: {}",
        n.texts.len()
    );
}

#[test]
fn other_scopes_poll_event_pages_after_the_cursor() {
    let target = Target::Scoped {
        scope: Scope::Team,
        scope_id: "tm1".into(),
    };
    let mut r = Rig::with(Config::new(target), None);
    let page = |from: u64, to: u64| {
        let evs: Vec<Envelope> = (from + 1..=to)
            .map(|s| durable(s, ev("team.custom_note", serde_json::json!({"n": s}))))
            .collect();
        event_page(EPOCH, &evs, to, false)
    };
    r.open_ok();
    r.answer(&page(0, 2));
    let mut head = 2;
    for _ in 0..30 {
        let t = r.c.poll_timeout().unwrap();
        r.now = r.now.max(t);
        r.c.handle_timeout(r.now);
        r.pump();
        if let Some((_, kind, path)) = r.fetch.clone() {
            assert_eq!(kind, FetchKind::Events);
            assert!(path.contains(&format!("after_seq={head}")), "{path}");
            r.answer(&page(head, head + 1));
            head += 1;
        }
        if r.c.polling() {
            break;
        }
    }
    assert!(r.c.polling(), "{:?}", r.log);
    assert_eq!(r.c.cursor(), head);
}

#[test]
fn a_runtime_that_stops_under_a_polling_client_is_backoff_and_polled_again_when_back() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    n.down = true;
    n.run_until(70_000);
    assert_eq!(n.r.c.status().state, State::Backoff);
    // A probe now fails as the polls do: it waits the re-probe period.
    let streams = n.streams.len();
    n.lifecycle(Lifecycle::Online);
    assert_eq!(n.streams.len(), streams + 1);
    let id = n.r.stream_id();
    let now = n.r.now;
    n.r.c.handle_network_error(id, "connection refused", now);
    n.serve();
    n.run_until(190_000);
    assert_eq!(n.streams.len(), streams + 1, "{:?}", n.streams);
    // Failed polls back off (full jitter up to 30 s): no storm.
    let late = n.polls_between(130_000, 190_000);
    assert!(late.len() <= 8, "{late:?}");
    n.down = false;
    n.commit(user_msg(3, "u3", "three"));
    n.run_until(230_000);
    assert_eq!(n.r.c.status().state, State::Live);
    assert!(n.r.c.polling());
    assert_eq!(n.r.c.cursor(), 3);
}

/// The `probe` of every stream try the machine asked for, in order.
fn probes(n: &Net) -> Vec<bool> {
    n.r.log
        .iter()
        .filter_map(|a| match a {
            Action::OpenStream { probe, .. } => Some(*probe),
            _ => None,
        })
        .collect()
}

#[test]
fn a_probe_that_ends_otherwise_than_muted_is_tried_again_with_backoff() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    // The re-probe: its stream fails at once (the shared connection was
    // replaced, the proxy reloaded), which says nothing of muting.
    let streams = n.streams.len();
    while n.streams.len() == streams {
        let t = n.r.now + 1_000;
        n.run_until(t);
    }
    let probed = *n.streams.last().unwrap();
    let id = n.r.stream_id();
    n.muted = false;
    let now = n.r.now;
    n.r.c.handle_network_error(id, "connection reset", now);
    n.serve();
    n.run_until(probed + 5_000);
    assert_eq!(n.streams.len(), streams + 2, "{:?}", n.streams);
    assert!(!n.r.c.polling(), "the next try showed its hello");
    assert_eq!(n.r.c.status().state, State::Live);
}

#[test]
fn online_alone_probes_a_polling_machine_and_its_tries_are_probes() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    let streams = n.streams.len();
    n.lifecycle(Lifecycle::Online);
    assert_eq!(n.streams.len(), streams + 1, "probed on online");
    // Muted again: the next probe waits the re-probe period.
    n.run_until(n.r.now + REPROBE_MS - 1_000);
    assert_eq!(n.streams.len(), streams + 1, "{:?}", n.streams);
    assert!(n.r.c.polling());
    n.muted = false;
    n.run_until(n.r.now + 20_000);
    assert_eq!(n.streams.len(), streams + 2, "{:?}", n.streams);
    assert!(!n.r.c.polling());
    // The first tries wait out their backoff; every try while polling,
    // and the first after the network came back, does not.
    let p = probes(&n);
    assert_eq!(&p[..MUTED_TRIES as usize], &[false, false], "{p:?}");
    assert!(p[MUTED_TRIES as usize..].iter().all(|x| *x), "{p:?}");
    n.lifecycle(Lifecycle::Offline);
    n.lifecycle(Lifecycle::Online);
    assert_eq!(probes(&n).last(), Some(&true));
    assert!(!n.r.c.polling());
}

#[test]
fn a_machine_shown_by_other_pages_polls_slowly_only_while_every_page_is_hidden() {
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    let viewer = |n: &mut Net, page: u64, hidden: Option<bool>| {
        let now = n.r.now;
        n.r.c.handle_viewer(page, hidden, now);
        n.serve();
    };
    // Two tabs show it; one is hidden: the idle pace stays the visible one.
    viewer(&mut n, 1, Some(false));
    viewer(&mut n, 2, Some(false));
    viewer(&mut n, 1, Some(true));
    n.run_until(100_000);
    n.run_until(160_000);
    let one_hidden = n.polls_between(100_000, 160_000).len();
    assert!((5..=7).contains(&one_hidden), "{one_hidden}");
    // Both hidden: five times slower.
    viewer(&mut n, 2, Some(true));
    n.run_until(170_000);
    let from = n.r.now;
    n.run_until(from + 100_000);
    let all_hidden = n.polls_between(from, from + 100_000).len();
    assert!((1..=2).contains(&all_hidden), "{all_hidden}");
    // The visible tab went away earlier: still hidden. Then one shows: the
    // stream is probed at once, as on becoming visible.
    viewer(&mut n, 3, Some(true));
    viewer(&mut n, 3, None);
    assert_eq!(n.polls_between(n.r.now, u64::MAX).len(), 0);
    let streams = n.streams.len();
    n.muted = false;
    viewer(&mut n, 2, Some(false));
    assert_eq!(n.streams.len(), streams + 1, "probed when a tab shows");
    assert!(!n.r.c.polling());
}

#[test]
fn leaving_polling_notifies_the_subscribers() {
    // Diagnostics show the transport; a worker host posts them to its pages
    // when the client notifies. (The rig drains no pacing: this test does,
    // and fires the pacer's timer itself.)
    let notified = |n: &mut Net| {
        let now = n.r.now;
        let mut steps: Vec<Pace> = std::iter::from_fn(|| n.r.c.poll_pace(now))
            .take(100)
            .collect();
        n.r.c.handle_timeout(now);
        steps.extend(std::iter::from_fn(|| n.r.c.poll_pace(now)).take(100));
        steps.contains(&Pace::Notify)
    };
    let mut n = Net::new(true);
    n.run_until(60_000);
    assert!(switched(&n));
    // The network goes and comes back: a probe opens, its head comes.
    n.lifecycle(Lifecycle::Offline);
    n.lifecycle(Lifecycle::Online);
    let _ = notified(&mut n);
    assert!(!notified(&mut n), "nothing more to tell");
    let revision = n.r.c.revision();
    // Its `hello` changes neither the view nor the status.
    let id = n.r.stream_id();
    let hello = frames(&[hello(EPOCH, n.head(), BOOT)]);
    let now = n.r.now;
    n.r.c.handle_stream_bytes(id, hello.as_bytes(), now);
    assert!(!n.r.c.polling());
    assert!(n.r.c.revision() > revision, "the revision moved");
    assert!(notified(&mut n), "the subscribers are told");
}

/// Polls until the re-probe opens a probe through the muting proxy: returns
/// the count of stream tries before it, and its id (its `hello` never comes).
fn probe_in_flight(n: &mut Net) -> (usize, RequestId) {
    n.run_until(60_000);
    assert!(switched(n));
    let streams = n.streams.len();
    while n.streams.len() == streams {
        let t = n.r.now + 1_000;
        n.run_until(t);
    }
    assert!(n.r.c.polling(), "its hello has not come");
    (n.streams.len(), n.r.stream_id())
}

#[test]
fn online_replaces_a_probe_in_flight_that_has_not_shown_its_hello() {
    let mut n = Net::new(true);
    let (streams, old) = probe_in_flight(&mut n);
    // The proxy stopped muting after the probe went through it, and the
    // network (another route) says so.
    n.muted = false;
    n.run_until(n.r.now + 1_000);
    let at = n.r.log.len();
    n.lifecycle(Lifecycle::Online);
    assert!(
        n.r.log[at..]
            .iter()
            .any(|a| matches!(a, Action::Abort { id } if *id == old)),
        "the probe in flight is closed: {:?}",
        &n.r.log[at..]
    );
    assert_eq!(n.streams.len(), streams + 1, "a new probe at once");
    assert_eq!(probes(&n).last(), Some(&true));
    assert!(!n.r.c.polling(), "the new probe showed its hello");
    assert_eq!(n.r.c.status().state, State::Live);
    // The closed probe's late end (the browser's abort) changes nothing.
    let now = n.r.now;
    let live = n.r.stream_id();
    n.r.c.handle_network_error(old, "aborted", now);
    n.r.c.handle_stream_end(old, now);
    n.serve();
    assert_eq!(n.r.stream_id(), live);
    assert_eq!(n.streams.len(), streams + 1);
    assert!(!n.r.c.polling());
    assert_eq!(n.r.c.status().state, State::Live);
    n.commit(user_msg(3, "u3", "three"));
    assert_eq!(n.r.c.cursor(), 3);
}

#[test]
fn a_probe_closed_by_online_is_no_muted_verdict_and_keeps_the_next_probe_due() {
    let mut n = Net::new(true);
    let (streams, old) = probe_in_flight(&mut n);
    // Still muted: the new probe is muted in turn, and only it sets when
    // the one after goes (its connect deadline, then the re-probe period).
    n.run_until(n.r.now + 1_000);
    n.lifecycle(Lifecycle::Online);
    let opened = n.r.now;
    assert_eq!(n.streams.len(), streams + 1, "a new probe at once");
    let now = n.r.now;
    let bytes = frames(&[hello(EPOCH, n.head(), BOOT)]);
    n.r.c.handle_stream_bytes(old, bytes.as_bytes(), now);
    n.r.c.handle_network_error(old, "aborted", now);
    n.serve();
    assert!(
        n.r.c.polling(),
        "the closed probe's late bytes are not read"
    );
    assert_eq!(n.streams.len(), streams + 1);
    let due = opened + n.r.c.config().connect_timeout_ms + REPROBE_MS;
    n.run_until(due - 1);
    assert_eq!(n.streams.len(), streams + 1, "{:?}", n.streams);
    assert_eq!(n.r.c.status().next_retry_at, Some(due));
    n.muted = false;
    n.run_until(due + 1_000);
    assert_eq!(n.streams.len(), streams + 2, "{:?}", n.streams);
    assert!(!n.r.c.polling());
}
