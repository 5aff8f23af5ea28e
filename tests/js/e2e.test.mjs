// End to end: headless Chromium (Debian's, driven by playwright-core) on the
// demo page with `?page` (the client on the page; shared.test.mjs drives the
// default, shared mode), which loads the optimised npm package, against a live
// replay-server with fault injection. `cargo xtask test` starts the server and
// passes E2E_URL; E2E_SEED replays a schedule.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { api as call, launchChromium, openPage, until as waitUntil } from "./support.mjs";
import {
  clientState,
  converged as pageConverged,
  pageTranscript as transcriptOf,
  rng,
  runSchedule,
  userTexts,
} from "./schedule.mjs";

const url = process.env.E2E_URL;
const artifacts = process.env.E2E_ARTIFACTS ?? ".";
const seed = Number(process.env.E2E_SEED ?? 20261129);
const TURNS = Number(process.env.E2E_TURNS ?? 24);

const random = rng(seed);
const describeClient = async () => ` (seed ${seed}); client: ${await clientState(page)}`;
const until = (what, predicate, timeoutMs = 30_000) => waitUntil(what, predicate, { timeoutMs, describe: describeClient });
const api = (method, path, body) => call(url, method, path, body);

let browser;
let page;
let sessionId;
const consoleErrors = [];

before(async () => {
  assert.ok(url, "E2E_URL is set by cargo xtask test");
  browser = await launchChromium();
  page = await openPage(browser, url + "/?page", consoleErrors, { viewport: { width: 1280, height: 900 } });
  await until("the client to go live", () =>
    page.evaluate(() => window.__replay?.client.status().state === "live"),
  );
  sessionId = await page.evaluate(() => window.__replay.sessionId);
  console.log(`session ${sessionId}, seed ${seed}, ${TURNS} turns`);
});

after(async () => {
  await browser?.close();
});

const serverTranscript = () => api("GET", `/v1/sessions/${sessionId}/transcript`);
const pageTranscript = () => transcriptOf(page);
const converged = () => pageConverged(page, serverTranscript);

test("a seeded fault schedule over many turns ends equal to the server's transcript", async () => {
  const { faultsInjected, typed } = await runSchedule({
    page,
    turns: TURNS,
    random,
    serverTranscript,
    injectFault: async (fault) => {
      await api("POST", "/v1/admin/faults", fault);
    },
    until,
    refuseSends: true,
  }).catch(async (err) => {
    console.log("comms:", JSON.stringify(await api("GET", "/v1/diagnostics/comms")));
    console.log("faults:", JSON.stringify(await api("GET", "/v1/admin/faults")));
    throw err;
  });
  await api("POST", "/v1/admin/faults", { kind: "clear" });
  const { server, client } = await until("the page to converge on the server's transcript", converged, 60_000);
  assert.deepEqual(client.items, server.items);
  assert.equal(client.cursor, server.cursor);
  assert.ok(server.items.length >= TURNS * 2, "every turn left at least its messages");
  // Nothing typed was lost or committed twice, and nothing still waits.
  assert.deepEqual(userTexts(server), typed);
  assert.deepEqual(await page.evaluate(() => window.__replay.client.view().pending), []);
  const diagnostics = await page.evaluate(() => window.__replay.client.diagnostics());
  console.log("faults:", faultsInjected.join(", "));
  console.log("counters:", JSON.stringify(diagnostics.counters));
  assert.ok(diagnostics.counters.reconnects > 0, "the schedule forced reconnects");
  await page.screenshot({ path: `${artifacts}/e2e-demo.png`, fullPage: true });
  assert.deepEqual(consoleErrors, []);
});

test("a reload restores from storage and repaints once", async () => {
  const stored = await pageTranscript();
  const shown = await page.evaluate(() => {
    const view = window.__replay.client.view();
    return view.items.length;
  });
  // Count transcript paints from the first script run on the new page.
  await page.addInitScript(() => {
    window.__itemPaints = [];
    const observe = () => {
      const list = document.getElementById("transcript");
      if (!list) return requestAnimationFrame(observe);
      new MutationObserver(() => window.__itemPaints.push(list.children.length)).observe(list, { childList: true });
    };
    observe();
  });
  await page.reload();
  await until("the reloaded client to go live", () =>
    page.evaluate(() => window.__replay?.client.status().state === "live"),
  );
  const result = await until("the reloaded page to converge", converged);
  assert.deepEqual(result.client.items, stored.items);
  const paints = await page.evaluate(() => window.__itemPaints);
  // The stored state paints the whole transcript at once, and nothing repaints
  // it when the restore finds nothing new.
  assert.ok(paints.length >= 1, "the transcript was painted");
  assert.equal(paints[0], shown, "the first paint already shows the stored transcript");
  assert.equal(new Set(paints).size, 1, `no repaint with other content: ${paints}`);
  const restores = await page.evaluate(() => window.__replay.client.diagnostics().counters.restores);
  assert.equal(restores, 1);
});

test("a long session opens on its newest page; the demo's control loads the older ones to the whole transcript", async () => {
  const { session_id: long } = await api("POST", "/v1/sessions", { title: "long" });
  const put = (type, data) => api("POST", "/v1/admin/events", { scope: "session", scope_id: long, type, data });
  for (let k = 0; k < 40; k++) {
    await put("message.committed", { message_id: `u${k}`, turn_id: `t${k}`, role: "user", text: `question ${k}` });
    await put("message.committed", { message_id: `a${k}`, turn_id: `t${k}`, role: "assistant", text: `answer ${k}` });
    await put("turn.completed", { turn_id: `t${k}` });
  }
  const server = await api("GET", `/v1/sessions/${long}/transcript`);
  const errors = [];
  const fresh = await openPage(browser, `${url}/?page#${long}`, errors);
  const shown = () => fresh.evaluate(() => document.getElementById("transcript").children.length);
  await waitUntil("the newest page", () =>
    fresh.evaluate(() => window.__replay?.client.status().state === "live" && window.__replay.client.view().items.length > 0),
  );
  const first = await shown();
  assert.ok(first > 0 && first < server.items.length, `the newest page alone: ${first} of ${server.items.length}`);
  const button = fresh.locator("#load-older");
  while (await button.isVisible()) {
    const before = await shown();
    await button.click();
    await waitUntil("an older page shown", async () => (await shown()) > before || !(await button.isVisible()));
  }
  const items = await fresh.evaluate(() => window.__replay.client.view().items);
  assert.deepEqual(items, server.items);
  assert.equal(await shown(), server.items.length);
  await fresh.close();
  assert.deepEqual(errors, []);
});
