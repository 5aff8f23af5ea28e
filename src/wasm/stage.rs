//! A restore's items converted to JS while its backlog is still arriving.
//!
//! A restore is painted once, at its end (rule 2); converting thousands of
//! items then took ~20 ms on the critical path. Between pages the page is
//! mostly waiting for the network, so the driver converts each page's new
//! items right after applying it, and the final paint reuses them.

use js_sys::Array;

use super::items::{item_to_js, items_to_js};
use crate::core::fold::{View, ViewChange};

/// Items `0..len` of the session view as JS objects, staged from the
/// machine's restore progress: each restore starts with `reset` and ends
/// with the input that completed it (`Client::poll_view_progress`).
#[derive(Default)]
pub struct Staged {
    items: Option<Array>,
}

impl Staged {
    /// Follows one batch of restore progress.
    pub fn track(&mut self, view: &View, p: ViewChange) {
        let View::Session(s) = view else {
            return;
        };
        if p.reset {
            self.items = Some(Array::new());
        }
        let Some(staged) = self.items.as_mut() else {
            return;
        };
        let items = s.items();
        let have = staged.length() as usize;
        if have > items.len() {
            // Only a reset shrinks the view, and it restages; be safe anyway.
            self.items = None;
            return;
        }
        for &i in p.items_updated.iter().filter(|&&i| i < have) {
            staged.set(i as u32, item_to_js(&items[i]));
        }
        if have < items.len() {
            let appended = items_to_js(&items[have..]);
            *staged = staged.concat(&appended);
        }
    }

    /// The staged items, if they are exactly the view's `len` items: called
    /// on the repaint that completes a restore. Staging then stops until the
    /// next restore starts.
    pub fn take(&mut self, len: usize) -> Option<Array> {
        let items = self.items.take()?;
        (items.length() as usize == len).then_some(items)
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::core::machine::{Action, Config, FetchKind, Machine, RequestId};

    fn event(seq: u64, ty: &str, data: &str) -> String {
        format!(
            r#"{{"id":{seq},"scope":"session","scope_id":"s","seq":{seq},"type":"{ty}","critical":true,"ts":"t","data":{data}}}"#
        )
    }

    fn page(events: &[String], head: u64, cursor: u64) -> Vec<u8> {
        format!(
            r#"{{"epoch":"e","boot_id":"b","cursor":{cursor},"head":{head},"has_more":{},"history":[{}],"live_turn":null,"tasks":null}}"#,
            cursor < head,
            events.join(",")
        )
        .into_bytes()
    }

    /// The replay fetches the machine asked for, by `after_cursor`.
    fn replay_fetches(m: &mut Machine) -> Vec<(RequestId, String)> {
        let mut out = Vec::new();
        while let Some(a) = m.poll_action() {
            if let Action::Fetch {
                id,
                kind: FetchKind::Replay,
                path_and_query,
            } = a
            {
                out.push((id, path_and_query));
            }
        }
        out
    }

    #[test]
    fn staged_items_follow_updates_across_pages() {
        // Pages read forward from 0, not the newest first.
        let mut cfg = Config::session("s");
        cfg.tail = 0;
        cfg.replay_page_limit = 3;
        let mut m = Machine::new(cfg, None, 0);
        let msg = |seq: u64| {
            let data = format!(r#"{{"message_id":"m{seq}","role":"user","text":"é {seq}"}}"#);
            event(seq, "message.committed", &data)
        };
        let log = [
            msg(1),
            msg(2),
            event(3, "tool.started", r#"{"call_id":"c","name":"sh"}"#),
            msg(4),
            event(
                5,
                "tool.completed",
                r#"{"call_id":"c","status":"ok","output":"done"}"#,
            ),
            msg(6),
            msg(7),
        ];
        let mut staged = Staged::default();
        let mut sent = 0;
        let mut asked = Vec::new();
        for (from, to) in [(0, 3), (3, 6), (6, 7)] {
            // Later pages may have been asked for ahead (pipelined paging).
            asked.extend(replay_fetches(&mut m));
            let id = asked
                .iter()
                .find(|(_, p)| p.contains(&format!("after_cursor={from}&")))
                .map(|(id, _)| *id);
            let id = id.expect("the page was asked for");
            m.handle_replay_page(id, &page(&log[from..to], 7, to as u64), 0);
            while m.has_waiting_page() {
                m.handle_waiting_page(0);
            }
            sent += 1;
            if let Some(p) = m.poll_view_progress() {
                staged.track(m.view(), p);
            }
        }
        assert_eq!(sent, 3);
        assert!(!m.is_restoring());
        let view = m.view().as_session().unwrap();
        let items = view.items();
        let staged = staged.take(items.len()).expect("staged for this restore");
        let json = |a: &Array| js_sys::JSON::stringify(a).unwrap().as_string().unwrap();
        let shown = json(&staged);
        // The tool card staged as running on page 1 was completed on page 2.
        assert!(
            shown.contains(r#""status":"ok","output":"done","input":null"#),
            "{shown}"
        );
        assert_eq!(shown, serde_json::to_string(items).unwrap());
    }
}
