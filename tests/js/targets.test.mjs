// The one target rule of the JS halves (no browser, no server): for every
// case of tests/fixtures/targets.json, `connectOptions` (what
// `ReplayClient.connect` hands the wasm, browser.js) normalises to the
// fixture's scope and id, and `logKey` / `targetKey` (messages.js: the
// shared host's clients, the bindings through connection.js; as built in
// pkg/web by `cargo xtask pkg`) name the fixture's key, which
// tests/targets.rs pins to the core's `Target::key`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { connectOptions } from "../../src/wasm/browser.js";
import { logKey, targetKey } from "../../pkg/web/messages.js";
import * as connection from "../../pkg/web/connection.js";

const cases = JSON.parse(readFileSync(new URL("../fixtures/targets.json", import.meta.url), "utf8"));

test("every half reads a target as the core does", () => {
  for (const { options, scope, scopeId, key } of cases) {
    const o = connectOptions(options);
    assert.deepEqual([o.scope, o.scopeId ?? null], [scope, scopeId], JSON.stringify(options));
    assert.equal(o.scope === "global" ? "global" : `${o.scope}:${o.scopeId}`, key);
    assert.equal(logKey(options), key, JSON.stringify(options));
    assert.equal(targetKey(options), JSON.stringify([options.baseUrl, key]));
    assert.equal(connection.targetKey, targetKey, "the bindings use the same rule");
  }
});

test("two tabs on the same scopeId but different sessions are two targets", () => {
  const a = { baseUrl: "http://rt", sessionId: "a", scopeId: "x" };
  const b = { baseUrl: "http://rt", sessionId: "b", scopeId: "x" };
  assert.notEqual(targetKey(a), targetKey(b));
  assert.equal(targetKey(a), targetKey({ baseUrl: "http://rt", sessionId: "a" }));
});
