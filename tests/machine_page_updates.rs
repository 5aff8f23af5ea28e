//! The updates a worker host posts to the pages that show a machine's
//! view (`Machine::page_update`): the parts changed since the last update,
//! the live text as what it gained, the diagnostics only when a page would
//! show a difference; a page that has none of them (attached, resumed)
//! gets the whole view once the others got what changed. A page is
//! modelled here by what it holds of each part; after every update it
//! applies it must hold the machine's view.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use std::collections::BTreeMap;

use machine_support::events::*;
use machine_support::rig::*;
use replay_client::core::machine::{Machine, PageUpdate, Write, COUNTERS_EVERY_MS, PAGE_PARTS};

/// Each part of the machine's view as a page would show it (the live
/// answer without its text, which [`Page::live_text`] checks).
fn parts(m: &Machine) -> BTreeMap<&'static str, String> {
    let s = m.view().as_session().expect("a session view");
    let live = s.overlay().map(|o| {
        let mut o = o.clone();
        o.text = String::new().into();
        o
    });
    let position = m.position();
    BTreeMap::from([
        ("items", format!("{:?}", s.items())),
        ("live", format!("{live:?}")),
        ("interrupted", format!("{:?}", s.interrupted())),
        // A prompt shows its answer while the outbox holds it.
        (
            "pendingPrompts",
            format!(
                "{:?}",
                (s.pending_prompts().iter())
                    .map(|p| (p, m.pending_answer(&p.question_id)))
                    .collect::<Vec<_>>()
            ),
        ),
        ("tasks", format!("{:?}", s.tasks())),
        ("session", format!("{:?}", s.session())),
        ("extras", format!("{:?}", s.extras())),
        ("pending", format!("{:?}", m.pending_messages())),
        ("status", format!("{:?}", m.status())),
        ("notices", format!("{:?}", m.recent_notices())),
        ("epoch", format!("{:?}", m.epoch())),
        ("cursor", format!("{}", m.cursor())),
        ("hasOlder", format!("{}", position.older > 0)),
    ])
}

/// A page: what it holds of each part, and of the live answer's text.
#[derive(Default)]
struct Page {
    held: BTreeMap<&'static str, String>,
    live_text: String,
    updates: Vec<(u64, PageUpdate)>,
}

impl Page {
    /// Applies `u` as the page half does; it must then hold the view.
    fn apply(&mut self, r: &Rig, u: &PageUpdate) {
        let now = parts(&r.c);
        for part in &u.names() {
            if let Some(value) = now.get(part) {
                self.held.insert(part, value.clone());
            }
        }
        let text =
            r.c.view()
                .as_session()
                .and_then(|s| s.overlay())
                .map(|o| o.text.to_string());
        if u.names().contains(&"live") {
            match (u.live_from.checked_sub(1), &text) {
                // Offsets in UTF-16 code units, as JS slices.
                (Some(from), Some(text)) => {
                    assert_eq!(
                        from,
                        self.live_text.encode_utf16().count(),
                        "the tail starts where the page's text ends"
                    );
                    let tail: Vec<u16> = text.encode_utf16().skip(from).collect();
                    self.live_text.push_str(&String::from_utf16(&tail).unwrap());
                }
                _ => self.live_text = text.clone().unwrap_or_default(),
            }
        }
        assert_eq!(self.held, now, "after an update the page holds the view");
        assert_eq!(self.live_text, text.unwrap_or_default());
        self.updates.push((r.now, u.clone()));
    }

    /// Takes the pages' next update and applies it to this page alone.
    fn update(&mut self, r: &mut Rig) -> Option<PageUpdate> {
        let u = take(r)?;
        self.apply(r, &u);
        Some(u)
    }
}

/// The pages' next update, as the host takes it after a notification.
fn take(r: &mut Rig) -> Option<PageUpdate> {
    r.changes();
    r.c.page_update(r.now)
}

/// A live session with a turn started, shown by a page (which got the
/// whole view).
fn watched() -> (Rig, Page) {
    let mut r = Rig::live_with(&[user_msg(1, "u1", "hi"), turn_started(2, "t1")]);
    r.c.handle_viewer(1, Some(false), r.now);
    r.pump();
    take(&mut r);
    let mut page = Page::default();
    page.apply(&r, &PageUpdate::WHOLE);
    (r, page)
}

#[test]
fn nothing_changed_nothing_to_post() {
    let (mut r, mut page) = watched();
    assert_eq!(page.update(&mut r), None);
    assert_eq!(PageUpdate::WHOLE.names(), PAGE_PARTS);
}

#[test]
fn an_update_carries_exactly_what_changed_since_the_last() {
    let (mut r, mut page) = watched();
    r.send(&[delta(2, "t1", "m1", 0, "Hel")]);
    let u = page.update(&mut r).expect("the live answer appeared");
    assert_eq!(u.names(), ["epoch", "cursor", "live", "hasOlder"]);
    assert_eq!(u.live_from, 0, "a new answer goes whole");
    r.send(&[delta(2, "t1", "m1", 3, "lo ")]);
    let u = page.update(&mut r).expect("the text grew");
    assert_eq!(u.live_from, 1 + 3, "the text goes as what it gained");
    // Changes between two updates are merged into the next.
    r.send(&[delta(2, "t1", "m1", 6, "world"), tasks(2, 1, 1)]);
    r.send(&[delta(2, "t1", "m1", 11, "!")]);
    let u = page.update(&mut r).expect("the rest");
    assert_eq!(u.names(), ["epoch", "cursor", "live", "tasks", "hasOlder"]);
    assert_eq!(u.live_from, 1 + 6);
    assert!(!u.diagnostics, "counters are not due within a second");
    // The answer is committed: the items and the live part, nothing else.
    r.send(&[assistant_msg(3, "t1", "m1", "Hello world!")]);
    let u = page.update(&mut r).unwrap();
    assert_eq!(
        u.names(),
        ["epoch", "cursor", "items", "events", "live", "hasOlder"]
    );
    assert!(
        u.diagnostics,
        "the cursor moved: the diagnostics show it at once"
    );
    assert_eq!(page.live_text, "");
}

#[test]
fn an_answer_given_is_shown_on_its_prompt_by_the_next_update() {
    let (mut r, mut page) = watched();
    r.send(&[question_asked(3, "t1", "q1")]);
    page.update(&mut r).expect("the question is asked");
    let answer = Write::Answer {
        question_id: "q1".into(),
        answer: "yes".into(),
    };
    r.c.handle_write(answer, r.now);
    r.pump();
    let u = page.update(&mut r).expect("the answer is shown at once");
    assert!(u.names().contains(&"pendingPrompts"), "{:?}", u.names());
    assert!(r.c.pending_answer("q1").is_some());
}

#[test]
fn a_page_that_missed_updates_gets_a_correct_whole() {
    let (mut r, mut shown) = watched();
    let mut frozen = Page::default();
    frozen.apply(&r, &PageUpdate::WHOLE);
    // `frozen` misses what is posted meanwhile.
    let mut text = String::new();
    for i in 0..200u64 {
        let chunk = format!("wé{i}😀 ");
        r.send(&[delta(2, "t1", "m1", text.chars().count() as u64, &chunk)]);
        text.push_str(&chunk);
        if i % 50 == 0 {
            r.send(&[tasks(2, i + 1, (i % 3) as usize)]);
        }
        r.advance(10);
        if i % 7 == 0 {
            shown.update(&mut r).expect("the text grew");
        }
    }
    r.send(&[assistant_msg(3, "t1", "m1", &text), turn_started(4, "t2")]);
    r.send(&[delta(4, "t2", "m2", 0, "next")]);
    // Resumed: the others get what changed, then it gets the whole view
    // (`Page::apply` checks that each holds the view).
    let u = shown.update(&mut r).expect("the rest");
    assert!(u.names().contains(&"items"), "{:?}", u.names());
    frozen.apply(&r, &PageUpdate::WHOLE);
    // Both go on from the same update.
    r.send(&[delta(4, "t2", "m2", 4, " one")]);
    let u = take(&mut r).expect("the text grew");
    assert_eq!(u.live_from, 1 + 4);
    shown.apply(&r, &u);
    frozen.apply(&r, &u);
}

#[test]
fn pages_paused_and_resumed_at_random_always_hold_the_view() {
    let (mut r, first) = watched();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut seq, mut turn, mut text) = (2u64, 1u64, String::new());
    // Each page and whether it is paused (it misses the updates).
    let mut pages = vec![(first, false), (Page::default(), true)];
    let mut updates = 0;
    for _ in 0..2_000 {
        let t = format!("t{turn}");
        let m = format!("m{turn}");
        match next(10) {
            0..=5 => {
                let chunk = format!("x{}é😀 ", next(1000));
                r.send(&[delta(seq, &t, &m, text.chars().count() as u64, &chunk)]);
                text.push_str(&chunk);
            }
            6 => r.send(&[tasks(seq, next(1 << 20), next(3) as usize)]),
            7 => {
                r.send(&[
                    assistant_msg(seq + 1, &t, &m, &text),
                    turn_started(seq + 2, &format!("t{}", turn + 1)),
                ]);
                (seq, turn, text) = (seq + 2, turn + 1, String::new());
            }
            8 => r.send(&[heartbeat(seq)]),
            _ => r.advance(next(300)),
        }
        let flush = |r: &mut Rig, pages: &mut Vec<(Page, bool)>| {
            let u = take(r)?;
            for (page, _) in pages.iter_mut().filter(|p| !p.1) {
                page.apply(r, &u);
            }
            Some(())
        };
        match next(8) {
            0..=2 => updates += usize::from(flush(&mut r, &mut pages).is_some()),
            3 => {
                let i = next(2) as usize;
                if pages[i].1 {
                    // Resumed: the others first, then the whole to it.
                    flush(&mut r, &mut pages);
                    pages[i].0.apply(&r, &PageUpdate::WHOLE);
                }
                pages[i].1 = !pages[i].1;
            }
            _ => {}
        }
    }
    assert!(updates > 100, "{updates}");
}

#[test]
fn counters_go_at_most_once_a_second_and_the_last_ones_with_the_commit() {
    let (mut r, mut page) = watched();
    let mut text = String::new();
    for i in 0..300u64 {
        let chunk = format!("w{i} ");
        r.send(&[delta(2, "t1", "m1", text.chars().count() as u64, &chunk)]);
        text.push_str(&chunk);
        r.advance(16);
        page.update(&mut r);
    }
    // The stream goes quiet.
    while page.update(&mut r).is_some() {}
    let with: Vec<u64> = page
        .updates
        .iter()
        .filter(|u| u.1.diagnostics)
        .map(|u| u.0)
        .collect();
    assert!(with.len() >= 4, "{with:?}");
    for w in with.windows(2) {
        assert!(w[1] - w[0] >= COUNTERS_EVERY_MS, "{with:?}");
    }
    // The last ones go with the next update (an answer's commit moves
    // the position).
    let last = *with.last().unwrap();
    assert!(
        page.updates.last().unwrap().0 - last < COUNTERS_EVERY_MS,
        "{with:?}"
    );
    r.send(&[assistant_msg(3, "t1", "m1", &text)]);
    let u = page.update(&mut r).expect("the commit");
    assert!(u.diagnostics);
}
