// The engine layer behind a proxy that mutes event streams: the demo page
// (the engine site, as engines.test.mjs loads it) on one engine (`ENGINE`,
// through driver.mjs), loaded through nginx compressing `text/event-stream`
// and ignoring the runtime's `X-Accel-Buffering: no` (xtask/src/nginx.rs) in
// front of the engine's replay-server. `cargo xtask test` sets
// E2E_PROXY_URL (nginx) and E2E_URL (the runtime itself, for the test's own
// calls).
// In the default (shared) mode and on the page, from a fresh load with a
// `/long` turn sent at once: the live text grows while the turn runs, the
// page ends equal to the server's transcript, and the client says it follows
// by polling.
import { test, after, afterEach, before } from "node:test";
import assert from "node:assert/strict";
import { api as call, until as waitUntil } from "../support.mjs";
import { clientState, converged, turnEnds } from "../schedule.mjs";
import { launch, maxTabs } from "./driver.mjs";

const engine = process.env.ENGINE;
const url = process.env.E2E_URL;
const proxy = process.env.E2E_PROXY_URL;
const api = (method, path, body) => call(url, method, path, body);
const MODES = { shared: "", page: "?page" };

let browser;
let opened = [];

before(async () => {
  assert.ok(url && proxy && engine, "E2E_URL, E2E_PROXY_URL and ENGINE are set by cargo xtask test");
  browser = await launch(engine);
});

after(async () => {
  await browser?.close();
});

afterEach(async () => {
  for (const tab of opened) await tab.close().catch(() => {});
  opened = [];
  await browser.errors();
});

const until = (what, predicate, tab, timeoutMs = 60_000) =>
  waitUntil(what, predicate, { timeoutMs, describe: async () => ` on ${engine}; client: ${await clientState(tab)}` });

/**
 * The demo in `mode` through the proxy on a new session, a `/long` answer
 * sent as soon as its client exists: checks the live text grew while the
 * page was in front and that the page ended equal to the server's
 * transcript; returns a check that its client follows by polling (the muted
 * tries take their connect deadlines; the page may be behind another by
 * then), which closes the tab.
 */
async function followThroughProxy(mode) {
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: `${engine} ${mode} behind a proxy` });
  // In front: a page behind another is hidden and polls five times slower.
  const tab = await browser.open(`${proxy}/${MODES[mode]}#${sessionId}`, { ownWindow: true });
  opened.push(tab);
  await until(
    "the demo's client",
    () =>
      tab.evaluate((id) => {
        const replay = window.__replay;
        if (replay?.sessionId !== id) return false;
        // Every live text end the page is told, from now on.
        window.__liveEnds = [];
        replay.client.subscribe(() => {
          const live = replay.client.view().live;
          if (live) window.__liveEnds.push(live.text_offset + live.text.length);
        });
        return true;
      }, sessionId),
    tab,
  );
  await tab.fill("#message", "/long 4000");
  await tab.click("#composer button[type=submit]");
  const transcript = () => api("GET", `/v1/sessions/${sessionId}/transcript`);
  await until(
    "the page to end equal to the server's transcript",
    async () => {
      const both = await converged(tab, transcript);
      return both && turnEnds(both.server) >= 1;
    },
    tab,
  );
  const ends = await tab.evaluate(() => window.__liveEnds);
  const grew = ends.filter((n, i) => i > 0 && n > ends[i - 1]).length;
  console.log(`${engine} ${mode}: the live text grew ${grew} times (${ends.join(" ")})`);
  assert.ok(grew >= 3, `${mode}: the live text grew ${grew} times behind the proxy`);
  return async () => {
    await until(
      "the client to follow by polling",
      async () => (await tab.evaluate(() => window.__replay.client.diagnostics().transport)) === "polling",
      tab,
    );
    await tab.close();
    opened = opened.filter((t) => t !== tab);
  };
}

test("shared and on the page behind a compressing proxy: the answer grows, ends equal, by polling", async () => {
  const modes = Object.keys(MODES);
  // One page after the other (in Firefox the tab opened last is in front:
  // a page behind another is hidden and polls five times slower); the second
  // opens while the first waits out its muted tries, where the engine holds
  // two tabs (WPE holds one).
  if (maxTabs(engine) >= modes.length) {
    const polling = [];
    for (const mode of modes) polling.push(await followThroughProxy(mode));
    for (const check of polling) await check();
  } else {
    for (const mode of modes) await (await followThroughProxy(mode))();
  }
  assert.deepEqual(await browser.errors(), [], `errors recorded on ${engine}`);
});
