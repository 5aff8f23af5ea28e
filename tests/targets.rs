//! The one target rule: what `ReplayClient.connect` builds from the
//! normalised options (`scope`, `scopeId` of `connectOptions`, browser.js)
//! has the core's key (`Target::key`) that `tests/fixtures/targets.json`
//! names, which the shared host's router and multiplexed stream use too; `tests/js/targets.test.mjs` checks the JS halves against the same
//! file, so the three agree.

#![cfg(not(target_arch = "wasm32"))]

use replay_client::core::machine::Target;
use replay_client::core::protocol::Scope;
use replay_client::core::share::mux_path;

#[test]
fn every_fixture_target_has_the_key_the_js_halves_use() {
    let cases: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/targets.json")).unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 9);
    for case in cases {
        let scope = case["scope"].as_str().unwrap();
        let target = if scope == "global" {
            Target::Global
        } else {
            let scope: Scope = serde_json::from_value(case["scope"].clone()).unwrap();
            Target::Scoped {
                scope,
                scope_id: case["scopeId"].as_str().unwrap().to_owned(),
            }
        };
        let key = case["key"].as_str().unwrap();
        assert_eq!(target.key(), key, "{case}");
        if let Target::Scoped { scope, scope_id } = &target {
            // The shared host routes a scope's events by the same key and
            // names it in the multiplexed stream's request.
            assert_eq!(Target::scoped_key(*scope, scope_id), key, "{case}");
            let sub = key.replace(' ', "%20");
            assert_eq!(
                mux_path([(key, Some(3))]),
                format!("/v1/stream?sub={sub}:3")
            );
        }
    }
}
