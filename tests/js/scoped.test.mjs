// The demo against a runtime without the multiplexed stream (PROTOCOL §4.6):
// `replay-server --no-multiplex` answers `GET /v1/stream` with 404, as a
// runtime with only the scoped streams does. `cargo xtask test` starts it
// with the demo site and passes E2E_NO_MUX_URL. The default (shared) mode
// must still go live with one stream per followed scope for the whole
// browser; `?worker` (a dedicated worker per tab) one per tab.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { api as call, launchChromium, openPage, until } from "./support.mjs";

const url = process.env.E2E_NO_MUX_URL;
const api = (method, path, body) => call(url, method, path, body);
const comms = () => api("GET", "/v1/diagnostics/comms");
const newSession = async () => (await api("POST", "/v1/sessions", { title: "scoped" })).session_id;

let browser;
const pageErrors = [];

before(async () => {
  assert.ok(url, "E2E_NO_MUX_URL is set by cargo xtask test");
  assert.equal((await fetch(url + "/v1/stream?sub=system::")).status, 404, "the server has no §4.6");
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

const noStreams = () =>
  until("no stream open at the server", async () => {
    const c = await comms();
    return c.streams_open === 0 && c.streams === 0;
  });

/** The demo at `query`, one tab per session of `sessions`, all in one browser context. */
async function openDemo(context, query, sessions) {
  const tabs = [];
  for (const sid of sessions) {
    const tab = await openPage(context, `${url}/${query}#${sid}`, pageErrors);
    tabs.push(tab);
  }
  await until(
    "every tab live",
    async () => {
      for (const tab of tabs) {
        const state = await tab.evaluate(() => window.__replay?.client.status().state);
        if (state !== "live") return false;
      }
      return true;
    },
    { timeoutMs: 30_000, describe: async () => `: ${JSON.stringify(await tabs[0].evaluate(() => window.__replay?.client.diagnostics()))}` },
  );
  return tabs;
}

/** Sends from the first tab; every tab of `sid` ends equal to the server, turn ended. */
async function replyReachesAll(tabs, sid) {
  await tabs[0].fill("#message", "/tool hello without a multiplexed stream");
  await tabs[0].click("#composer button[type=submit]");
  await until(
    "every tab of the session to show the server's transcript",
    async () => {
      const server = await api("GET", `/v1/sessions/${sid}/transcript`);
      if (!server.items.some((i) => i.kind === "turn_end")) return false;
      for (const tab of tabs) {
        const client = await tab.evaluate(() => window.__replay.client.transcript());
        if (client.cursor !== server.cursor || JSON.stringify(client.items) !== JSON.stringify(server.items)) return false;
      }
      return true;
    },
    { timeoutMs: 30_000 },
  );
}

test("shared mode without §4.6: 3 tabs go live, the reply reaches all, one stream per followed scope", async () => {
  await noStreams();
  const [a, b] = [await newSession(), await newSession()];
  const context = await browser.newContext();
  const tabs = await openDemo(context, "", [a, a, b]);
  const d = await tabs[0].evaluate(() => window.__replay.client.diagnostics());
  assert.equal(d.host?.role, "shared", "the shared host runs the clients");
  assert.equal(d.transport, "scoped", "the host follows each scope on its own stream");
  await replyReachesAll(tabs.slice(0, 2), a);
  // Two scopes followed by three tabs: two streams at the server, each
  // carrying one scope (not one per tab, and no /v1/stream retried).
  const c = await until("two streams", async () => {
    const c = await comms();
    return c.streams_open === 2 && c.streams === 2 && c;
  });
  assert.equal(c.streams_open, 2);
  await context.close();
  assert.deepEqual(pageErrors, []);
});

test("?worker without §4.6: 3 tabs go live and the reply reaches all (one stream per tab's worker)", async () => {
  await noStreams();
  const sid = await newSession();
  const context = await browser.newContext();
  const tabs = await openDemo(context, "?worker", [sid, sid, sid]);
  await replyReachesAll(tabs, sid);
  // A dedicated worker belongs to its tab: each follows on its own stream.
  const c = await comms();
  assert.equal(c.streams_open, 3);
  await context.close();
  assert.deepEqual(pageErrors, []);
});
