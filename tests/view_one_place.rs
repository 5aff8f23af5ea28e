//! One place for each thing on screen: a tool call is in the
//! committed items once its `tool.started` is durable and in the live
//! section only until then; an answered or declined question stays in the
//! transcript as an item with its outcome instead of vanishing.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod machine_support;

use machine_support::events::*;
use replay_client::core::fold::{SessionView, ViewChange};
use replay_client::core::protocol::{Envelope, LiveTurn, TranscriptItem};
use replay_client::core::transcript::fold;
use serde_json::json;

fn live_with_tools(calls: &[&str]) -> LiveTurn {
    let tools: Vec<_> = calls
        .iter()
        .map(|c| json!({"call_id": c, "name": "shell", "state": "ok", "progress": "5/5"}))
        .collect();
    serde_json::from_value(json!({
        "turn_id": "t1", "message_id": "m2", "rev": 3, "state": "sampling",
        "text": "done", "text_offset": 0, "tools": tools, "pending_question": null
    }))
    .expect("a live_turn")
}

fn apply(view: &mut SessionView, mut env: Envelope) -> ViewChange {
    let mut ch = ViewChange::default();
    if env.seq.is_some() {
        view.apply_durable(&mut env, &mut ch);
    } else {
        view.apply_transient(&env, &mut ch);
    }
    ch
}

fn live_calls(view: &SessionView) -> Vec<String> {
    view.overlay().map_or_else(Vec::new, |o| {
        o.tools.iter().map(|t| t.call_id.clone()).collect()
    })
}

#[test]
fn a_durable_tool_leaves_the_live_section() {
    let mut view = SessionView::default();
    apply(&mut view, user_msg(1, "m1", "/tool"));
    apply(&mut view, turn_started(2, "t1"));
    let live = live_with_tools(&["c1", "c2"]);
    apply(&mut view, live_snapshot(2, Some(&live)));
    assert_eq!(
        live_calls(&view),
        ["c1", "c2"],
        "none durable yet: both live"
    );
    let ch = apply(&mut view, tool_started(3, "t1", "c1"));
    assert!(ch.overlay, "the live section must be redrawn without c1");
    assert_eq!(live_calls(&view), ["c2"]);
    apply(&mut view, tool_completed(4, "t1", "c1", "ok"));
    // A later snapshot still lists c1 (the server's live turn has every call):
    // it stays out of the live section.
    apply(&mut view, live_snapshot(4, Some(&live)));
    assert_eq!(live_calls(&view), ["c2"]);
    let cards = view
        .items()
        .iter()
        .filter(|i| matches!(i, TranscriptItem::Tool { .. }))
        .count();
    assert_eq!(cards, 1);
}

#[test]
fn an_answered_question_stays_as_an_item_with_its_answer() {
    let log = [
        user_msg(1, "m1", "/ask"),
        turn_started(2, "t1"),
        question_asked(3, "t1", "q1"),
        question_answered(4, "q1"),
        turn_completed(5, "t1"),
    ];
    let t = fold("e1", &log);
    assert!(t.pending_prompts.is_empty());
    let want = TranscriptItem::Question {
        question_id: "q1".into(),
        turn_id: "t1".into(),
        prompt: "Proceed?".into(),
        outcome: "answered".into(),
        answer: Some("yes".into()),
        reason: None,
    };
    assert_eq!(t.items.get(1), Some(&want), "{:?}", t.items);
    assert_eq!(
        serde_json::to_value(&want).unwrap(),
        json!({"kind": "question", "question_id": "q1", "turn_id": "t1",
               "prompt": "Proceed?", "outcome": "answered", "answer": "yes"})
    );
}

#[test]
fn a_declined_question_says_why_and_a_second_end_adds_nothing() {
    let declined = durable(
        4,
        ev(
            "question.declined",
            json!({"question_id": "q1", "reason": "cancelled"}),
        ),
    );
    let log = [
        user_msg(1, "m1", "/ask"),
        turn_started(2, "t1"),
        question_asked(3, "t1", "q1"),
        declined,
        question_answered(5, "q1"),
    ];
    let t = fold("e1", &log);
    let questions: Vec<_> = t
        .items
        .iter()
        .filter(|i| matches!(i, TranscriptItem::Question { .. }))
        .collect();
    assert_eq!(questions.len(), 1, "{:?}", t.items);
    assert!(matches!(
        questions[0],
        TranscriptItem::Question { outcome, reason: Some(r), answer: None, .. }
            if outcome == "declined" && r == "cancelled"
    ));
}

#[test]
fn a_stored_view_keeps_the_question_turn_across_a_reload() {
    let mut view = SessionView::default();
    for env in [
        user_msg(1, "m1", "/ask"),
        turn_started(2, "t1"),
        question_asked(3, "t1", "q1"),
    ] {
        apply(&mut view, env);
    }
    // Written and read as the client persists it (core::json, not serde_json).
    let stored = replay_client::core::json::to_string(&view).unwrap();
    let mut loaded: SessionView = replay_client::core::json::from_str(&stored).unwrap();
    apply(&mut loaded, question_answered(4, "q1"));
    assert!(matches!(
        loaded.items().last(),
        Some(TranscriptItem::Question { turn_id, .. }) if turn_id == "t1"
    ));
}
