// The view's parts in the one order the halves share (no browser, no
// server): a worker host (host.js) names the parts of a page update by the
// keys of the client's view in order (`Object.keys(view)`: bit `i`, the
// `i`th key), so the view object the package builds must have the keys of
// tests/fixtures/view_parts.json in its order, which tests/view_parts.rs
// pins to the core's bits (`PAGE_PARTS`). A part renamed, added or moved
// in `viewObject` (browser.js) fails here instead of pages being posted
// the wrong parts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { viewObject } from "../../src/wasm/browser.js";
import { initSync, ReplayClient } from "../../pkg/web/replay_client.js";

const parts = JSON.parse(readFileSync(new URL("../fixtures/view_parts.json", import.meta.url), "utf8"));

test("viewObject takes and keeps the parts in the core's bit order", () => {
  const view = viewObject(...parts);
  assert.deepEqual(Object.keys(view), parts);
  // Each argument is the part of its position (the wasm passes them so).
  for (const part of parts) assert.equal(view[part], part);
});

test("a client of the package has the view the host maps the core's bits to", () => {
  initSync({ module: readFileSync(new URL("../../pkg/web/replay_client_bg.wasm", import.meta.url)) });
  // Nothing answers: the view is the client's first, connecting.
  const client = ReplayClient.connect({ baseUrl: "http://rt", sessionId: "a", storage: "memory", fetch: () => new Promise(() => {}) });
  try {
    const view = client.view();
    assert.deepEqual(Object.keys(view), parts);
    assert.deepEqual([view.scope, view.scopeId, view.cursor, view.hasOlder, view.live], ["session", "a", 0, false, null]);
    // The first update's parts as the host names them (host.js, `#post`):
    // the status moved, and the position goes with any part.
    const u = client.pageUpdate();
    const named = Object.keys(view).filter((_, i) => (u >> i) & 1);
    assert.deepEqual(named, ["epoch", "cursor", "status", "hasOlder"]);
  } finally {
    client.close();
  }
});
