// A first visit's first page asked for before the wasm (`prefetch`): in
// Chromium against replay-server (E2E_URL, the package on the demo site),
// the client takes the answer in flight, so the runtime sees one replay
// request; a prefetch of another page is aborted and the client's own page
// is applied once. The shared host's page half asks for it itself, and its
// worker takes that answer.
import { test } from "node:test";
import assert from "node:assert/strict";
import { api as call, openPage, until, withChromium } from "./support.mjs";

const site = process.env.E2E_URL;
const api = (method, path, body) => call(site, method, path, body);

const chromium = withChromium();
const errors = chromium.errors;

/** A session of `turns` turns, each a user message and a reply. */
async function session(turns) {
  const { session_id: id } = await api("POST", "/v1/sessions", { title: "start" });
  const put = (type, data) => api("POST", "/v1/admin/events", { scope: "session", scope_id: id, type, data });
  for (let k = 0; k < turns; k++) {
    await put("message.committed", { message_id: `u${k}`, turn_id: `t${k}`, role: "user", text: `question ${k}` });
    await put("message.committed", { message_id: `a${k}`, turn_id: `t${k}`, role: "assistant", text: `answer ${k}` });
    await put("turn.completed", { turn_id: `t${k}` });
  }
  return id;
}

/**
 * A fresh page that calls `prefetch(early)`, waits until that request left
 * (none when `early` is null), then loads the wasm and connects with
 * `options`; returns the replay requests the page sent (in order, with
 * whether each failed) and the client's items and counters once live.
 */
async function firstVisit(id, options, early) {
  const context = await chromium.browser.newContext();
  try {
    // A context has `newPage` as a browser does: a fresh profile each.
    const page = await openPage(context, `${site}/pkg/package.json`, errors);
    const replays = [];
    page.on("request", (r) => r.url().includes(`/v1/sessions/${id}/replay`) && replays.push({ url: r.url(), failed: false }));
    page.on("requestfailed", (r) => {
      const seen = replays.find((x) => x.url === r.url() && !x.failed);
      if (seen) seen.failed = true;
    });
    await page.evaluate(async () => {
      window.pkg = await import("/pkg/web/index.js");
    });
    if (early) {
      await page.evaluate((o) => window.pkg.prefetch(o), early);
      await until("the prefetch to be sent", () => replays.length === 1);
    }
    const view = await page.evaluate(async (o) => {
      await window.pkg.default();
      const client = window.pkg.ReplayClient.connect(o);
      await new Promise((resolve) => {
        const check = () => client.view().status.state === "live" && resolve();
        client.subscribe(check);
        check();
      });
      return { items: client.view().items, counters: client.diagnostics().counters };
    }, options);
    return { replays, ...view };
  } finally {
    await context.close();
  }
}

test("a first visit's prefetched page is the client's: one replay request", async () => {
  const id = await session(5);
  const { items } = await api("GET", `/v1/sessions/${id}/transcript`);
  // The default (the newest page, which holds this short session whole),
  // the history read forward, and a shorter newest page.
  for (const extra of [{}, { tail: 0 }, { tail: 3 }]) {
    const options = { baseUrl: site, sessionId: id, storage: "indexeddb", ...extra };
    const visit = await firstVisit(id, options, options);
    assert.equal(visit.replays.length, 1, `one replay request (${JSON.stringify(extra)}): ${JSON.stringify(visit.replays)}`);
    assert.equal(visit.replays[0].failed, false);
    assert.deepEqual(visit.items, extra.tail ? items.slice(-visit.items.length) : items);
    assert.ok(visit.items.length >= (extra.tail ?? items.length));
  }
});

test("a prefetch of another page is aborted; the client's own page applies once", async () => {
  const id = await session(5);
  const { items } = await api("GET", `/v1/sessions/${id}/transcript`);
  const options = { baseUrl: site, sessionId: id, storage: "memory", tail: 0 };
  // The newest page prefetched; the client reads the history forward.
  const visit = await firstVisit(id, options, { ...options, tail: 3 });
  assert.equal(visit.replays.length, 2, JSON.stringify(visit.replays));
  assert.match(visit.replays[0].url, /tail=3/);
  assert.match(visit.replays[1].url, /after_cursor=0/);
  // The client's own page, whole and once: the newest page handed to its
  // forward read would lack the older turns.
  assert.deepEqual(visit.items, items);
  assert.equal(visit.counters.duplicates_dropped, 0);
  assert.deepEqual(errors, []);
});

/**
 * A first visit of the shared host (tests/js/shared-page/, a fresh
 * profile; `query` chooses its worker) to a new 5-turn session, `before`
 * run first: the replay requests that the page and the shared worker each
 * sent. Whatever the requests, the page asked once and the view applied
 * the session once.
 */
async function sharedFirstVisit(query = "", before = async () => {}) {
  const id = await session(5);
  const { items } = await api("GET", `/v1/sessions/${id}/transcript`);
  await before();
  const context = await chromium.browser.newContext();
  let visit;
  try {
    const page = await openPage(context, `${site}/shared-page/${query}`, errors);
    await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
    await page.evaluate((sessionId) => window.t.connect({ sessionId }), id);
    await until("the shared host's view to be live", async () => (await page.evaluate(() => window.t.state())).state === "live");
    const replays = (urls) => urls.filter((u) => u.includes(`/v1/sessions/${id}/replay`));
    visit = {
      page: replays(await page.evaluate(() => window.t.pageRequests())),
      worker: replays(await page.evaluate(() => window.t.workerRequests())),
      items: (await page.evaluate(() => window.t.state())).items,
      counters: await page.evaluate(() => window.t.client.diagnostics().counters),
    };
  } finally {
    await context.close();
  }
  assert.equal(visit.page.length, 1, JSON.stringify(visit));
  assert.deepEqual(visit.items, items);
  assert.equal(visit.counters.duplicates_dropped, 0);
  assert.deepEqual(errors, []);
  return visit;
}

// The worker's script comes one handshake behind the page's on a real
// link: the page half asks for the first page itself, and the worker's
// client takes that answer.
test("a shared host's first visit takes the page's first page: one replay request, the page's", async () => {
  const visit = await sharedFirstVisit();
  assert.match(visit.page[0], /replay\?tail=40&limit=500$/);
  assert.deepEqual(visit.worker, [], "the worker sent no replay request of its own");
});

test("a worker whose requests differ from the page's sends its own first page; it applies once", async () => {
  const visit = await sharedFirstVisit("?headers");
  assert.deepEqual(visit.worker, visit.page, "the worker asked for the same page itself");
});

test("a page's first page that the runtime refused: the worker's client asks again itself, and applies once", async () => {
  const visit = await sharedFirstVisit("", () =>
    api("POST", "/v1/admin/faults", { kind: "fail_requests", route: "replay", status: 503, count: 1, retry_after: 1 }),
  );
  assert.deepEqual(visit.worker, visit.page, "the client asked again for the page the runtime refused");
});
