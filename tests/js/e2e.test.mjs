// End to end: headless Chromium (Debian's, driven by playwright-core) on the
// demo page with `?page` (the client on the page; shared.test.mjs drives the
// default, shared mode), which loads the optimised npm package, against a live
// replay-server with fault injection. `cargo xtask test` starts the server and
// passes E2E_URL; E2E_SEED replays a schedule.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { api as call, launchChromium, openPage, sleep, until as waitUntil } from "./support.mjs";

const url = process.env.E2E_URL;
const artifacts = process.env.E2E_ARTIFACTS ?? ".";
const seed = Number(process.env.E2E_SEED ?? 20261129);
const TURNS = Number(process.env.E2E_TURNS ?? 24);

// mulberry32: a small seeded PRNG so a failing schedule can be replayed.
function rng(state) {
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = rng(seed);
const pick = (list) => list[Math.floor(random() * list.length)];
// On a timeout: the page client's diagnostics and last notices.
const describeClient = async () => {
  const state = page
    ? await page
        .evaluate(() => ({
          diagnostics: window.__replay?.client.diagnostics(),
          notices: window.__replay?.client.view().notices.slice(-10),
        }))
        .catch((e) => String(e))
    : null;
  return ` (seed ${seed}); client: ${JSON.stringify(state)}`;
};
const until = (what, predicate, timeoutMs = 30_000) => waitUntil(what, predicate, { timeoutMs, describe: describeClient });
const api = (method, path, body) => call(url, method, path, body);

const FAULTS = [
  { kind: "close_streams" },
  { kind: "cut_after_bytes", bytes: 300, count: 1 },
  { kind: "cut_after_bytes", bytes: 1111, count: 1 },
  { kind: "stall", ms: 4000 },
  { kind: "skip_durable", count: 2 },
  { kind: "duplicate", count: 3 },
  { kind: "fail_requests", route: "stream", status: 503, count: 1, retry_after: 1 },
  { kind: "fail_requests", route: "replay", status: 500, count: 1 },
  { kind: "restart_worker" },
];
const DIRECTIVES = ["", "", "/tool", "/bg", "/ask", "/long 600", "/tool /long 300"];

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
const pageTranscript = () => page.evaluate(() => window.__replay.client.transcript());
const turnEnds = (t) => t.items.filter((i) => i.kind === "turn_end").length;

async function converged() {
  const [server, client] = await Promise.all([serverTranscript(), pageTranscript()]);
  return client.cursor === server.cursor && JSON.stringify(client.items) === JSON.stringify(server.items)
    ? { server, client }
    : null;
}

test("a seeded fault schedule over many turns ends equal to the server's transcript", async () => {
  const faultsInjected = [];
  const answered = new Set();
  for (let turn = 0; turn < TURNS; turn++) {
    const directive = pick(DIRECTIVES);
    const before = turnEnds(await serverTranscript());
    console.log(`turn ${turn}: "${directive}"`);
    await page.fill("#message", `turn ${turn} ${directive}`.trim());
    await page.click("#composer button[type=submit]");
    if (random() < 0.7) {
      await sleep(Math.floor(random() * 200));
      const fault = pick(FAULTS);
      await api("POST", "/v1/admin/faults", fault);
      faultsInjected.push(fault.kind);
      console.log(`turn ${turn}: fault ${JSON.stringify(fault)}`);
    }
    if (directive.includes("/ask")) {
      // Answer through the page once the question shows (live or persisted);
      // a worker restart may decline it first, which ends the turn anyway.
      await until("the question or the turn's end", async () => {
        const open = await page.evaluate(() => window.__replay.client.view().pendingPrompts.map((p) => p.question_id));
        const fresh = open.find((id) => !answered.has(id));
        // Click inside the page, atomically with finding the button.
        const clicked =
          fresh &&
          (await page.evaluate((id) => {
            const button = document.querySelector(`.prompt[data-question-id="${id}"] button`);
            button?.click();
            return Boolean(button);
          }, fresh));
        if (clicked) {
          answered.add(fresh);
          return true;
        }
        return turnEnds(await serverTranscript()) > before;
      });
    }
    await until(`turn ${turn} to end on the server`, async () => turnEnds(await serverTranscript()) > before).catch(
      async (err) => {
        const t = await serverTranscript();
        console.log("server tail:", JSON.stringify(t.items.slice(-4)), "prompts:", JSON.stringify(t.pending_prompts));
        console.log("server cursor:", t.cursor, "comms:", JSON.stringify(await api("GET", "/v1/diagnostics/comms")));
        console.log("faults:", JSON.stringify(await api("GET", "/v1/admin/faults")));
        throw err;
      },
    );
  }
  await api("POST", "/v1/admin/faults", { kind: "clear" });
  const { server, client } = await until("the page to converge on the server's transcript", converged, 60_000);
  assert.deepEqual(client.items, server.items);
  assert.equal(client.cursor, server.cursor);
  assert.ok(server.items.length >= TURNS * 2, "every turn left at least its messages");
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
