// The client run in a dedicated worker (`replay-client/worker` and
// `replay-client/worker-client`), in headless Chromium against a live
// replay-server: the page, which loads no wasm, ends with the server's
// transcript. `cargo xtask test` serves tests/js/worker-page/ at
// /worker-page/ and passes E2E_URL.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { SCHEMA } from "../../pkg/web/messages.js";
import { api as call, launchChromium, openPage, until } from "./support.mjs";

const url = process.env.E2E_URL;
const api = (method, path, body) => call(url, method, path, body);
// Streams open at the server: the worker's side of a client, seen from outside.
const streams = async () => (await api("GET", "/v1/diagnostics")).streams;
const streamsBecome = (n) =>
  until(`${n} streams open at the server`, async () => (await streams()) === n, {
    timeoutMs: 10_000,
    describe: async () => `: ${await streams()} open`,
  });

let browser;
let page;
const pageErrors = [];

before(async () => {
  assert.ok(url, "E2E_URL is set by cargo xtask test");
  browser = await launchChromium();
  page = await openPage(browser, url + "/worker-page/", pageErrors);
  await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
});

after(async () => {
  await browser?.close();
});

test("a client in a worker follows a session: the page's view ends equal to the server's transcript", async () => {
  await streamsBecome(0);
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "worker" });
  const storage = await page.evaluate((s) => window.t.connect({ sessionId: s }), sessionId);
  assert.equal(storage, "indexeddb", "a worker has no localStorage: IndexedDB by default");
  await until("live", () => page.evaluate(() => window.t.client.status().state === "live"));

  const { turnId } = await page.evaluate(() => window.t.client.send("/tool /long 3000 from a worker"));
  assert.ok(turnId, "send resolves with the turn's id");
  const server = await until("the page to converge", async () => {
    const s = await api("GET", `/v1/sessions/${sessionId}/transcript`);
    const v = await page.evaluate(() => {
      const view = window.t.client.view();
      return { cursor: view.cursor, items: view.items, live: view.live };
    });
    const ended = s.items.some((i) => i.kind === "turn_end");
    return ended && v.live === null && v.cursor === s.cursor && JSON.stringify(v.items) === JSON.stringify(s.items)
      ? s
      : null;
  });
  // The worker's own transcript, asked through the page, is the server's too.
  const asked = await page.evaluate(() => window.t.client.transcript());
  assert.equal(JSON.stringify(asked.items), JSON.stringify(server.items));
  assert.equal(asked.cursor, server.cursor);

  // While the answer streamed, only `live` crossed: the items kept their object.
  const identity = await page.evaluate(() => window.t.itemsKeptWhileLiveChanged());
  assert.ok(identity.kept > 10, `items kept their object across live changes: ${JSON.stringify(identity)}`);
  assert.equal(identity.needlesslyNew, 0, "items got a new object only when an item changed");

  const diagnostics = await page.evaluate(() => window.t.client.diagnostics());
  assert.equal(diagnostics.cursor, server.cursor);
  assert.ok(diagnostics.counters.events > 0);
  assert.equal(await page.evaluate(() => window.t.wasmLoadedHere()), false, "the page loads no wasm");

  assert.equal(await streams(), 1);
  await page.evaluate(() => window.t.client.close());
  const closed = await page.evaluate(() => window.t.rejects(() => window.t.client.send("after close")));
  assert.deepEqual({ ...closed, message: undefined }, { isReplayError: true, code: "closed", message: undefined });
  // The worker's client closed too: its stream ended at the server.
  await streamsBecome(0);
  assert.deepEqual(pageErrors, []);
});

test("errors cross as ReplayError with their code", async () => {
  // No session id: the worker's connect throws; the page's connect rejects.
  const bad = await page.evaluate(() => window.t.rejects(() => window.t.connect({})));
  assert.equal(bad.isReplayError, true);
  assert.equal(bad.code, "invalid_options", bad.message);

  const withFunction = await page.evaluate(() => window.t.connectWithFunction());
  assert.deepEqual([withFunction.isReplayError, withFunction.code], [true, "invalid_options"], withFunction.message);
  const missing = await page.evaluate(() => window.t.connectTo("./no-such-worker.js", { sessionId: "ses_x" }));
  assert.deepEqual([missing.isReplayError, missing.code], [true, "network"], missing.message);
  const idle = await page.evaluate(() =>
    window.t.connectTo("./idle-worker.js", { sessionId: "ses_x", connectTimeoutMs: 300 }),
  );
  assert.deepEqual([idle.isReplayError, idle.code], [true, "timeout"], idle.message);
  // Page and worker of different releases: refused, both ways, with one clear code.
  const old = await page.evaluate(() => window.t.connectTo("./old-worker.js", { sessionId: "ses_x" }));
  assert.deepEqual([old.isReplayError, old.code], [true, "schema_mismatch"], old.message);
  const refused = await page.evaluate(() => window.t.askWorker({ type: "replay-client.connect", options: {} }));
  assert.deepEqual([refused.v, refused.type, refused.error.code], [SCHEMA, "failed", "schema_mismatch"]);

  // A write the server refuses: an answer to a question that does not exist.
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "worker errors" });
  await page.evaluate((s) => window.t.connect({ sessionId: s, storage: "memory" }), sessionId);
  await until("live", () => page.evaluate(() => window.t.client.status().state === "live"));
  const answered = await page.evaluate(() => window.t.rejects(() => window.t.client.answer("q_missing", "yes")));
  assert.equal(answered.isReplayError, true);
  assert.deepEqual([answered.code, answered.status], ["not_found", 404], answered.message);
  await page.evaluate(() => window.t.client.close());
  assert.deepEqual(pageErrors, []);
});

test("send, retry and discard cross to the worker, and the page's view shows the outbox", async () => {
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "worker outbox" });
  await page.evaluate((s) => window.t.connect({ sessionId: s, storage: "memory" }), sessionId);
  await until("live", () => page.evaluate(() => window.t.client.status().state === "live"));
  await api("POST", "/v1/admin/faults", { kind: "fail_requests", route: "messages", status: 400, error: "refused_here" });
  const failed = await page.evaluate(() => window.t.rejects(() => window.t.client.send("hello", "wk_1")));
  assert.deepEqual([failed.isReplayError, failed.code, failed.status], [true, "refused_here", 400], failed.message);
  await until("shown failed", () =>
    page.evaluate(() => window.t.client.view().pending.some((p) => p.message_id === "wk_1" && p.state === "failed")),
  );
  assert.equal(await page.evaluate(() => window.t.client.discard("wk_none")), false);
  const turn = await page.evaluate(() => window.t.client.retry("wk_1"));
  assert.equal(typeof turn.turnId, "string");
  await until("committed once, pending empty", () =>
    page.evaluate(() => {
      const v = window.t.client.view();
      return v.pending.length === 0 && v.items.filter((i) => i.message_id === "wk_1").length === 1;
    }),
  );
  await page.evaluate(() => window.t.client.close());
  assert.deepEqual(pageErrors, []);
});

test("one worker serves several clients, each on its own port; closing one leaves the others following", async () => {
  const sessions = [];
  for (const title of ["worker a", "worker b"]) sessions.push((await api("POST", "/v1/sessions", { title })).session_id);
  for (const [i, s] of sessions.entries()) {
    await page.evaluate(([name, s]) => window.t.connectOther(name, { sessionId: s, storage: "memory" }), [`c${i}`, s]);
  }
  await until("both live", () =>
    page.evaluate(() => Object.values(window.t.others).every((c) => c.status().state === "live")),
  );
  await streamsBecome(2);
  const converged = (i) =>
    until(`client ${i} to converge`, async () => {
      const server = await api("GET", `/v1/sessions/${sessions[i]}/transcript`);
      const items = await page.evaluate((n) => window.t.others[n].view().items, `c${i}`);
      return server.items.some((x) => x.kind === "turn_end") && JSON.stringify(items) === JSON.stringify(server.items);
    });
  await page.evaluate(() => window.t.others.c0.send("first"));
  await converged(0);
  // c0 closed: its calls reject at once; c1, on the same worker, still follows.
  await page.evaluate(() => window.t.others.c0.close());
  const closed = await page.evaluate(() => window.t.rejects(() => window.t.others.c0.send("late")));
  assert.equal(closed.code, "closed");
  // c0's client in the worker closed too: one stream left, c1's.
  await streamsBecome(1);
  await api("POST", `/v1/sessions/${sessions[1]}/messages`, { message_id: "m_b", text: "/tool second" });
  await converged(1);
  await page.evaluate(() => window.t.others.c1.close());
  await streamsBecome(0);
  assert.deepEqual(pageErrors, []);
});

test("serve() takes a fetch and credentials: every request of the worker's client goes through that fetch", async () => {
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "worker fetch" });
  await page.evaluate((s) => window.t.connectThroughFetch({ sessionId: s, storage: "memory" }), sessionId);
  await until("live", () => page.evaluate(() => window.t.others.fetch.status().state === "live"));
  await page.evaluate(() => window.t.others.fetch.send("/tool through the worker's fetch"));
  await until("the turn's end", () =>
    page.evaluate(() => window.t.others.fetch.view().items.some((i) => i.kind === "turn_end")),
  );
  const fetched = await page.evaluate(() => window.t.fetched);
  const kinds = new Set(fetched.map((f) => (f.accept.includes("event-stream") ? "stream" : f.method)));
  assert.deepEqual([...kinds].sort(), ["GET", "POST", "stream"], JSON.stringify(fetched));
  assert.ok(fetched.every((f) => f.credentials === "omit"), `serve()'s credentials: ${JSON.stringify(fetched)}`);
  await page.evaluate(() => window.t.others.fetch.close());
  // The page's `credentials` cross (data), over serve()'s.
  const before = await page.evaluate(() => window.t.fetched.length);
  await page.evaluate((s) => window.t.connectThroughFetch({ sessionId: s, storage: "memory", credentials: "include" }), sessionId);
  await until("live", () => page.evaluate(() => window.t.others.fetch.status().state === "live"));
  const later = (await page.evaluate(() => window.t.fetched)).slice(before);
  assert.ok(later.length > 0 && later.every((f) => f.credentials === "include"), JSON.stringify(later));
  // A `fetch` from the page cannot cross: refused with the place to give it.
  const refused = await page.evaluate(() => window.t.connectTo("./worker.js", { sessionId: "ses_x", fetch: () => null }));
  assert.deepEqual([refused.code, /serve\(\)/.test(refused.message)], ["invalid_options", true], refused.message);
  await page.evaluate(() => window.t.others.fetch.close());
  assert.deepEqual(pageErrors, []);
});

test("the demo page with ?worker: the client runs in a worker and the page ends equal to the server", async () => {
  const demo = await openPage(browser, url + "/?worker", pageErrors);
  await until("the demo's client to go live", () =>
    demo.evaluate(() => window.__replay?.client.status().state === "live"),
  );
  assert.equal(await demo.textContent("#mode"), "client in a worker");
  const sessionId = await demo.evaluate(() => window.__replay.sessionId);
  await demo.fill("#message", "/tool hello from the demo");
  await demo.click("#composer button[type=submit]");
  await until("the demo page to converge", async () => {
    const server = await api("GET", `/v1/sessions/${sessionId}/transcript`);
    const client = await demo.evaluate(() => window.__replay.client.transcript());
    return server.items.some((i) => i.kind === "turn_end") &&
      client.cursor === server.cursor &&
      JSON.stringify(client.items) === JSON.stringify(server.items);
  });
  const wasmOnPage = await demo.evaluate(() =>
    performance.getEntriesByType("resource").some((e) => e.name.endsWith(".wasm")),
  );
  assert.equal(wasmOnPage, false, "the page loads no wasm");
  await demo.close();
  assert.deepEqual(pageErrors, []);
});
