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
import { connectOptions, prefetch } from "../../src/wasm/browser.js";
import { logKey, targetKey } from "../../pkg/web/messages.js";
import * as connection from "../../pkg/web/connection.js";
import { firstPageUrl } from "../../pkg-template/first-page-url.js";

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

// `prefetch` builds, before the wasm, the first page's URL and the stored
// value's key the client will use: for every case of
// tests/fixtures/first_page.json it looks up the fixture's key and asks for
// the fixture's URL, which tests/first_page.rs pins to the machine's first
// page and the core's `Target::storage_key`.
test("prefetch asks for the machine's first page under the core's storage key", async () => {
  const firstPages = JSON.parse(readFileSync(new URL("../fixtures/first_page.json", import.meta.url), "utf8"));
  const looked = [];
  const asked = [];
  const stub = { getItem: (key) => (looked.push(key), null) };
  const had = Object.getOwnPropertyDescriptor(globalThis, "localStorage");
  Object.defineProperty(globalThis, "localStorage", { value: stub, configurable: true });
  // Its own timer (what no client claims is dropped after EARLY_MS) run
  // at the end, not waited for.
  const setTimer = globalThis.setTimeout;
  const timers = [];
  globalThis.setTimeout = (f) => timers.push(f);
  try {
    for (const { options, key, url } of firstPages) {
      looked.length = 0;
      asked.length = 0;
      prefetch({ ...options, storage: "local", fetch: (u) => (asked.push(u), new Promise(() => {})) });
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(looked, [key], JSON.stringify(options));
      assert.deepEqual(asked, [url], JSON.stringify(options));
    }
  } finally {
    globalThis.setTimeout = setTimer;
    timers.forEach((f) => f());
    if (had) Object.defineProperty(globalThis, "localStorage", had);
    else delete globalThis.localStorage;
  }
});

// The shared host's page half asks for a first visit's first page itself
// (`SharedClient`): the same URL as `prefetch` and the machine, for every
// case of the fixture; none for another scope.
test("the page half asks for the machine's first page", () => {
  const firstPages = JSON.parse(readFileSync(new URL("../fixtures/first_page.json", import.meta.url), "utf8"));
  for (const { options, url } of firstPages) assert.equal(firstPageUrl(options), url, JSON.stringify(options));
  assert.equal(firstPageUrl({ baseUrl: "http://rt", scope: "team", scopeId: "t" }), null);
});
