// A newcomer's first mistakes, as the packaged client meets them in
// Chromium: each gives a ReplayError whose code is stable and
// whose message names the fix. `cargo xtask test` serves the package on the
// demo site (E2E_URL).
import { test } from "node:test";
import assert from "node:assert/strict";
import { api, openPage, withChromium } from "./support.mjs";

const site = process.env.E2E_URL;

const chromium = withChromium();
const errors = chromium.errors;

/**
 * What `ReplayClient.connect(options)` throws in a fresh page, after `init()`
 * when `init`, or after the glue's own init when `init` is `"glue"` (as a
 * host script loads the wasm, with the entry imported too).
 */
async function connectError(options, { init }) {
  const page = await openPage(chromium.browser, `${site}/pkg/package.json`, errors);
  try {
    return await page.evaluate(
      async ({ options, init }) => {
        const pkg = await import("/pkg/web/index.js");
        if (init === "glue") await (await import("/pkg/web/replay_client.js")).default();
        else if (init) await pkg.default();
        try {
          pkg.ReplayClient.connect(options).close();
          return null;
        } catch (err) {
          return { replay: err instanceof pkg.ReplayError, code: err.code, message: err.message };
        }
      },
      { options, init },
    );
  } finally {
    await page.close();
  }
}

test("connecting before `await init()` says to call it", async () => {
  const { session_id: sessionId } = await api(site, "POST", "/v1/sessions", { title: "newcomer" });
  const err = await connectError({ baseUrl: site, sessionId, storage: "memory" }, { init: false });
  assert.ok(err, "connect before init must throw");
  assert.equal(err.replay, true, `a ReplayError: ${JSON.stringify(err)}`);
  assert.equal(err.code, "not_initialized");
  assert.match(err.message, /await init\(\)/);
  // And after init the same call connects; also when the wasm was loaded
  // through the glue, as the hosts (`shared.js`, `worker.js`) load it, in
  // a worker script that imports the entry too.
  assert.equal(await connectError({ baseUrl: site, sessionId, storage: "memory" }, { init: true }), null);
  assert.equal(await connectError({ baseUrl: site, sessionId, storage: "memory" }, { init: "glue" }), null);
});

test("a baseUrl without a scheme is refused at connect, naming the value", async () => {
  for (const baseUrl of ["127.0.0.1:8787", "localhost:8787/"]) {
    const err = await connectError({ baseUrl, sessionId: "ses_x", storage: "memory" }, { init: true });
    assert.ok(err, `${baseUrl} must be refused`);
    assert.equal(err.code, "invalid_options");
    assert.ok(err.message.includes(JSON.stringify(baseUrl)), err.message);
    assert.match(err.message, /absolute http:\/\/ or https:\/\/ URL/);
  }
  assert.deepEqual(errors, []);
});

test("a second client of one target warns once in the console, a closed one does not count", async () => {
  const { session_id: sessionId } = await api(site, "POST", "/v1/sessions", { title: "newcomer-twice" });
  const page = await openPage(chromium.browser, `${site}/pkg/package.json`, errors);
  const warnings = [];
  page.on("console", (m) => m.type() === "warning" && warnings.push(m.text()));
  try {
    await page.evaluate(async ({ site, sessionId }) => {
      const pkg = await import("/pkg/web/index.js");
      await pkg.default();
      const options = { baseUrl: site, sessionId, storage: "memory" };
      // Connected, closed, connected again (React's StrictMode): no warning.
      pkg.ReplayClient.connect(options).close();
      const first = pkg.ReplayClient.connect(options);
      // Two at once, then a third: one warning.
      const second = pkg.ReplayClient.connect(options);
      const third = pkg.ReplayClient.connect(options);
      // Another target: its own count.
      const other = pkg.ReplayClient.connect({ ...options, sessionId: `${sessionId}-other` });
      for (const c of [first, second, third, other]) c.close();
    }, { site, sessionId });
    // Console events arrive asynchronously.
    await new Promise((r) => setTimeout(r, 200));
    const ours = warnings.filter((w) => w.includes("replay-client: a second client"));
    assert.equal(ours.length, 1, JSON.stringify(warnings));
    assert.ok(ours[0].includes(sessionId) && ours[0].includes("close() the first"), ours[0]);
  } finally {
    await page.close();
  }
  assert.deepEqual(errors, []);
});

/**
 * The first `lastError` of a client on the page following `baseUrl` (a
 * session that need not exist: no answer is ever read).
 */
async function firstError(baseUrl) {
  const page = await openPage(chromium.browser, `${site}/pkg/package.json`, errors);
  try {
    return await page.evaluate(async (baseUrl) => {
      const pkg = await import("/pkg/web/index.js");
      await pkg.default();
      const client = pkg.ReplayClient.connect({ baseUrl, sessionId: "ses_newcomer", storage: "memory" });
      try {
        const deadline = Date.now() + 10_000;
        while (Date.now() < deadline) {
          const error = client.view().status.lastError;
          if (error) return { ...error, origin: location.origin };
          await new Promise((r) => setTimeout(r, 50));
        }
        return null;
      } finally {
        client.close();
      }
    }, baseUrl);
  } finally {
    await page.close();
  }
}

test("a server that does not allow the page's origin says cors and names the flag; no server says network", async () => {
  const noCors = process.env.E2E_NO_CORS_URL;
  assert.ok(noCors, "E2E_NO_CORS_URL is set by cargo xtask test");
  const hidden = await firstError(noCors);
  assert.ok(hidden, "an error within 10 s");
  assert.equal(hidden.code, "cors", JSON.stringify(hidden));
  assert.ok(hidden.message.includes(hidden.origin), hidden.message);
  assert.ok(hidden.message.includes(`--allow-origin ${hidden.origin}`), hidden.message);
  // Nothing listens on port 9 of loopback: no answer at all.
  const down = await firstError("http://127.0.0.1:9");
  assert.ok(down, "an error within 10 s");
  assert.equal(down.code, "network", JSON.stringify(down));
  assert.doesNotMatch(down.message, /allow-origin/);
  assert.deepEqual(errors, []);
});

test("each thing shows in one place: a tool call never in items and live.tools at once, an answered question stays, across a reload", async () => {
  const { session_id: sessionId } = await api(site, "POST", "/v1/sessions", { title: "newcomer-one-place" });
  const page = await openPage(chromium.browser, `${site}/pkg/package.json`, errors);
  try {
    const seen = await page.evaluate(async ({ site, sessionId }) => {
      const pkg = await import("/pkg/web/index.js");
      await pkg.default();
      const client = pkg.ReplayClient.connect({ baseUrl: site, sessionId, storage: "local", notify: "sync" });
      // Every view the app is given: the calls shown twice in it (the
      // runtime's live snapshots list every call of the turn, durable ones
      // too: a view that lists both draws such a call twice).
      const twice = [];
      client.subscribe((v) => {
        const durable = new Set(v.items.filter((i) => i.kind === "tool").map((i) => i.call_id));
        for (const t of v.live?.tools ?? []) if (durable.has(t.call_id)) twice.push(t.call_id);
      });
      const until = async (what, ok) => {
        for (let i = 0; i < 300 && !ok(client.view()); i++) await new Promise((r) => setTimeout(r, 100));
        if (!ok(client.view())) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(client.view().items)}`);
      };
      const ended = (n) => (v) => v.items.filter((i) => i.kind === "turn_end").length >= n;
      await client.send("/tool run the tests");
      await until("the tool turn's end", ended(1));
      await client.send("/ask shall I deploy?");
      await until("the question", (v) => v.pendingPrompts.some((p) => p.persisted));
      const asked = client.view().pendingPrompts.find((p) => p.persisted);
      await client.answer(asked.question_id, asked.options[0]);
      await until("the ask turn's end", ended(2));
      const items = client.view().items;
      const notices = client.view().notices.map((n) => `${n.code}: ${n.message}`);
      client.close();
      return { twice, items, asked, notices };
    }, { site, sessionId });
    assert.deepEqual(seen.twice, [], "a call shown in items and live.tools at once");
    // Notices in words: no cursor numbers.
    assert.ok(seen.notices.every((n) => !/cursor/.test(n)), JSON.stringify(seen.notices));
    const tools = seen.items.filter((i) => i.kind === "tool");
    assert.equal(tools.length, 1);
    assert.equal(tools[0].status, "ok");
    const question = seen.items.find((i) => i.kind === "question");
    assert.ok(question, `no question item in ${JSON.stringify(seen.items)}`);
    assert.equal(question.question_id, seen.asked.question_id);
    assert.equal(question.prompt, seen.asked.prompt);
    assert.equal(question.outcome, "answered");
    assert.equal(question.answer, seen.asked.options[0]);
    // A reload: the stored state and the server's transcript say the same.
    const reloaded = await page.evaluate(async ({ site, sessionId }) => {
      const pkg = await import("/pkg/web/index.js");
      const client = pkg.ReplayClient.connect({ baseUrl: site, sessionId, storage: "local" });
      for (let i = 0; i < 300 && client.view().status.state !== "live"; i++) await new Promise((r) => setTimeout(r, 100));
      const items = client.view().items;
      client.close();
      return items;
    }, { site, sessionId });
    assert.deepEqual(reloaded, seen.items);
    const server = await api(site, "GET", `/v1/sessions/${sessionId}/transcript`);
    assert.deepEqual(server.items, seen.items);
  } finally {
    await page.close();
  }
  assert.deepEqual(errors, []);
});

test("a baseUrl ending in /v1 fails with the server's hint to give the root", async () => {
  const { session_id: sessionId } = await api(site, "POST", "/v1/sessions", { title: "newcomer-v1" });
  const page = await openPage(chromium.browser, `${site}/pkg/package.json`, errors);
  try {
    const error = await page.evaluate(async ({ baseUrl, sessionId }) => {
      const pkg = await import("/pkg/web/index.js");
      await pkg.default();
      const client = pkg.ReplayClient.connect({ baseUrl, sessionId, storage: "memory" });
      for (let i = 0; i < 100 && client.view().status.state !== "failed"; i++) await new Promise((r) => setTimeout(r, 100));
      const { state, lastError } = client.view().status;
      client.close();
      return { state, ...lastError };
    }, { baseUrl: `${site}/v1`, sessionId });
    assert.equal(error.state, "failed", JSON.stringify(error));
    assert.equal(error.status, 404, JSON.stringify(error));
    assert.match(error.message, /\/v1 twice; give the client the server's root as its baseUrl/, JSON.stringify(error));
  } finally {
    await page.close();
  }
  assert.deepEqual(errors, []);
});

test("the demo fits a 360 px wide phone: nothing past the viewport", async () => {
  const page = await openPage(chromium.browser, `${site}/?page`, errors, { viewport: { width: 360, height: 800 } });
  try {
    await page.waitForSelector("#status[data-state=live]", { timeout: 30_000 });
    const wide = await page.evaluate(() => ({
      page: document.documentElement.scrollWidth,
      past: [...document.querySelectorAll("body *")]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5)
        .map((e) => e.id || e.className || e.tagName),
    }));
    assert.equal(wide.page, 360, JSON.stringify(wide));
    assert.deepEqual(wide.past, []);
  } finally {
    await page.close();
  }
  assert.deepEqual(errors, []);
});
