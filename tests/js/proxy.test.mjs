// The shared host (the default mode), and last the client on the page,
// behind a proxy that mutes event streams: Debian's nginx compressing
// `text/event-stream` and ignoring the runtime's `X-Accel-Buffering: no`,
// in front of a replay-server this file starts (and stops, and starts
// again) itself. The page, the package and
// the runtime all come through the proxy (one origin). nginx's access log
// (`$msec $status $request_uri`, written when a request ends) counts the
// requests the browser made: a SharedWorker's requests are not seen by
// `page.route`.
// `cargo xtask test` sets E2E_PROXY_URL (nginx), E2E_PROXY_DIR (its prefix:
// access.log, and the flag file that turns compression off), E2E_PROXY_UPSTREAM (the address nginx
// forwards to), E2E_SERVER (the replay-server binary) and E2E_SITE.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { api as call, launchChromium, openPage, sleep, until } from "./support.mjs";

const PROXY = process.env.E2E_PROXY_URL;
const DIR = process.env.E2E_PROXY_DIR;
const UPSTREAM = process.env.E2E_PROXY_UPSTREAM;
const SERVER = process.env.E2E_SERVER;
const SITE = process.env.E2E_SITE;
const direct = `http://${UPSTREAM}`;
const api = (method, p, body) => call(direct, method, p, body);
const DB = path.join(os.tmpdir(), `replay-proxy-${process.pid}.sqlite`);

let server;
let browser;
let context;
const pageErrors = [];
const tabs = [];
let sessionId;

/** The replay-server nginx forwards to, on its file database; resolves once it listens. */
function startServer() {
  const child = spawn(
    SERVER,
    [
      ...["--listen", UPSTREAM, "--db", DB, "--static", SITE],
      ...["--heartbeat-ms", "500", "--delta-ms", "5"],
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      if (line.includes("listening on ")) resolve(child);
    });
    child.on("exit", (code) => reject(new Error(`replay-server exited (${code}) before it listened`)));
  });
}

async function stopServer() {
  const exited = new Promise((resolve) => server.once("exit", resolve));
  server.kill("SIGKILL");
  await exited;
}

/** The access log's requests: `{ at (ms), status, uri }`. */
function requests() {
  const text = fs.readFileSync(path.join(DIR, "access.log"), "utf8");
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [msec, status, uri] = line.split(" ");
      return { at: Number(msec) * 1000, status: Number(status), uri };
    });
}

const isRuntime = (r) => r.uri.startsWith("/v1/");
const isReplay = (r) => /^\/v1\/sessions\/[^/]+\/replay/.test(r.uri);
const between = (from, to, keep) => requests().filter((r) => r.at >= from && r.at < to && keep(r));

/** Whether the proxy compresses: it reads the flag file (xtask/src/nginx.rs) on every request. */
function compressing(on) {
  const flag = path.join(DIR, "uncompressed");
  if (on) fs.rmSync(flag, { force: true });
  else fs.writeFileSync(flag, "");
}

const state = (tab) => tab.evaluate(() => window.t.state());
const transport = (tab) => tab.evaluate(() => window.t.client.diagnostics().transport);

before(async () => {
  assert.ok(PROXY && DIR && UPSTREAM && SERVER && SITE, "E2E_PROXY_* are set by cargo xtask test");
  server = await startServer();
  browser = await launchChromium();
  context = await browser.newContext();
});

after(async () => {
  await browser?.close();
  if (server && server.exitCode === null) await stopServer();
  for (const f of [DB, `${DB}-wal`, `${DB}-shm`]) fs.rmSync(f, { force: true });
});

async function openTab() {
  const tab = await openPage(context, PROXY + "/shared-page/", pageErrors);
  await tab.waitForFunction(() => document.getElementById("out").textContent === "ready");
  await tab.evaluate((o) => window.t.connect(o), { sessionId });
  tabs.push(tab);
  return tab;
}

/** The tab's view equal to the server's transcript, its `ends` turns ended. */
const converged = (tab, ends) =>
  until(
    "the tab to show the server's transcript",
    async () => {
      const server = await api("GET", `/v1/sessions/${sessionId}/transcript`);
      const v = await state(tab);
      const ended = server.items.filter((x) => x.kind === "turn_end").length;
      if (ended < ends || v.state !== "live" || v.live !== null || v.cursor !== server.cursor) return false;
      return JSON.stringify(v.items) === JSON.stringify(server.items) ? server : false;
    },
    { timeoutMs: 60_000, describe: async () => `: ${JSON.stringify((await state(tab)).state)}` },
  );

test("a fresh page behind the proxy: the answer grows and ends on time, whole; three tabs make one poll", async () => {
  sessionId = (await api("POST", "/v1/sessions", { title: "behind a compressing proxy" })).session_id;
  const tab = await openTab();
  await sleep(1500);
  await tab.evaluate(() => window.t.client.send("/long 5000 the proxy holds the stream"));
  // When the server committed the answer, as near as a 25 ms poll sees it.
  const { committedAt, answer } = await until(
    "the server to commit the answer",
    async () => {
      const items = (await api("GET", `/v1/sessions/${sessionId}/transcript`)).items;
      const answer = items.find((x) => x.kind === "message" && x.role === "assistant");
      return answer ? { committedAt: Date.now(), answer } : null;
    },
    { timeoutMs: 60_000 },
  );
  const transcript = await converged(tab, 1);
  const { views, times } = await tab.evaluate(() => ({ views: window.t.views, times: window.t.viewTimes }));
  const tail = answer.text.slice(-40);
  const shown = views.findIndex(
    (v) =>
      v.items.some((x) => x.kind === "message" && x.role === "assistant" && x.text === answer.text) ||
      (v.live?.text.endsWith(tail) ?? false),
  );
  assert.ok(shown >= 0, "the answer's last words showed");
  const late = times[shown] - committedAt;
  console.log(`last words shown ${late} ms after the server committed them`);
  assert.ok(late <= 3000, `the last words showed ${late} ms after the commit`);
  const lengths = views.flatMap((v) => (v.live ? [v.live.text_offset + v.live.text.length] : []));
  const grew = lengths.filter((n, i) => i > 0 && n > lengths[i - 1]).length;
  console.log(`the live text grew ${grew} times (${lengths.join(" ")})`);
  assert.ok(grew >= 3, `the live text grew ${grew} times`);
  // Nothing lost or duplicated: the view is the transcript (converged), and
  // the answer is in it once.
  const answers = transcript.items.filter((x) => x.kind === "message" && x.role === "assistant");
  assert.equal(answers.length, 1, "one answer");
  await until("the tab to follow by polling", async () => (await transport(tab)) === "polling", {
    timeoutMs: 60_000,
    describe: async () => `: ${await transport(tab)}`,
  });

  await openTab();
  await openTab();
  await until("three tabs live", async () => {
    for (const t of tabs) if ((await state(t)).state !== "live") return false;
    return true;
  });
  // The idle pace reaches its 10 s; then one poll of the session per 10 s
  // for the whole browser (three tabs polling would be three).
  await sleep(15_000);
  const from = Date.now();
  await sleep(20_000);
  const polls = between(from, Date.now(), isReplay);
  console.log(`idle, 3 tabs: ${polls.length} replay requests in 20 s (${(polls.length / 20).toFixed(2)}/s)`);
  assert.ok(polls.length >= 1 && polls.length <= 3, `${polls.length} replay requests in 20 s: ${JSON.stringify(polls)}`);
  for (const t of tabs) assert.equal(await transport(t), "polling");
  assert.deepEqual(pageErrors, []);
});

/** The tab hidden or shown, as the browser says it (the page reads `visibilityState`). */
const setHidden = (tab, hidden) =>
  tab.evaluate((hidden) => {
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => (hidden ? "hidden" : "visible") });
    document.dispatchEvent(new Event("visibilitychange"));
  }, hidden);

test("the shared host polls slowly only while every tab is hidden, and at once when one shows", async () => {
  for (const t of tabs.slice(1)) await setHidden(t, true);
  // One tab visible: the idle pace stays one poll per 10 s.
  await sleep(11_000);
  let from = Date.now();
  await sleep(21_000);
  const oneVisible = between(from, Date.now(), isReplay).length;
  // Every tab hidden: five times slower (the poll already due goes first).
  await setHidden(tabs[0], true);
  await sleep(11_000);
  from = Date.now();
  await sleep(21_000);
  const allHidden = between(from, Date.now(), isReplay).length;
  console.log(`idle polls in 21 s: ${oneVisible} with a tab visible, ${allHidden} with every tab hidden`);
  assert.ok(oneVisible >= 2, `${oneVisible} polls with a tab visible`);
  assert.equal(allHidden, 0, `${allHidden} polls with every tab hidden`);
  // A tab shows: what came meanwhile is read at once.
  const shownAt = Date.now();
  await setHidden(tabs[1], false);
  await until("a poll after the tab showed", async () => between(shownAt, Date.now() + 1, isReplay).length > 0, { timeoutMs: 3_000 });
  for (const t of tabs) await setHidden(t, false);
  assert.deepEqual(pageErrors, []);
});

test("the runtime stopped under the polling client: backoff without a storm, then live again", async () => {
  const tab = tabs[0];
  assert.equal(await transport(tab), "polling");
  const stoppedAt = Date.now();
  await stopServer();
  try {
    await until("the tab to back off", async () => (await state(tab)).state === "backoff", { timeoutMs: 30_000 });
    await sleep(Math.max(0, stoppedAt + 2000 - Date.now()));
    const from = Date.now();
    await sleep(5000);
    const tried = between(from, Date.now(), isRuntime);
    console.log(`runtime down: ${tried.length} requests in 5 s (${tried.map((r) => r.status).join(" ")})`);
    assert.ok(tried.length <= 6, `${tried.length} requests in 5 s while the runtime was down`);
  } finally {
    // Up again whatever happened: the next test needs it.
    server = await startServer();
  }
  await until("the tab live again", async () => (await state(tab)).state === "live", { timeoutMs: 60_000 });
  const back = await transport(tab);
  console.log(`back: ${back}`);
  assert.ok(["polling", "multiplexed", "stream"].includes(back), back);
  await tab.evaluate(() => window.t.client.send("/tool after the restart"));
  for (const t of tabs) await converged(t, 2);
  // The polls ask from the cursor the client shows.
  const { cursor } = await state(tab);
  const from = Date.now();
  await until("a poll after the turn", async () => between(from, Date.now(), isReplay).length >= 2, { timeoutMs: 30_000 });
  const asked = between(from, Date.now(), isReplay).map((r) => Number(new URL(r.uri, direct).searchParams.get("after_cursor")));
  console.log(`cursor ${cursor}; the polls asked after ${asked.join(" ")}`);
  assert.ok(asked.every((a) => a === cursor), `cursor ${cursor}, polls after ${asked}`);
  assert.deepEqual(pageErrors, []);
});

test("the proxy stops compressing: the network back in the worker brings the stream back", async () => {
  const tab = tabs[0];
  await until("the tab to follow by polling", async () => (await transport(tab)) === "polling", {
    timeoutMs: 60_000,
    describe: async () => `: ${await transport(tab)}`,
  });
  // A probe opened through the proxy while it still compresses, and still
  // in flight (its connect deadline is 10 s) when the network comes back:
  // a tab shown after every tab was hidden probes at once (unless a probe
  // of the re-probe period is in flight already).
  const reconnects = () => tab.evaluate(() => window.t.client.diagnostics().counters.reconnects);
  const before = await reconnects();
  for (const t of tabs) await setHidden(t, true);
  await setHidden(tab, false);
  for (const t of tabs) await setHidden(t, false);
  const probed = await until("a probe", async () => (await reconnects()) > before, { timeoutMs: 2_000 }).then(
    () => "a probe opened",
    () => "a probe was in flight already",
  );
  console.log(`the tab shown: ${probed} through the compressing proxy`);
  await sleep(500);
  compressing(false);
  try {
    const at = Date.now();
    // Told once, as a browser does. The probe in flight, and the shared
    // connection it rides, have shown no hello: both are closed and tried
    // again at once, well within the re-probe period (minutes).
    await tab.evaluate(() => window.t.online());
    await until("the stream back", async () => (await transport(tab)) !== "polling", {
      timeoutMs: 15_000,
      describe: async () => {
        const streams = between(at, Date.now() + 1, (r) => r.uri.startsWith("/v1/stream"));
        const diagnostics = await tab.evaluate(() => window.t.client.diagnostics());
        return `: ${JSON.stringify(diagnostics)}; streams ended since online: ${JSON.stringify(streams)}`;
      },
    });
    console.log(`streaming (${await transport(tab)}) ${Date.now() - at} ms after online`);
    await tab.evaluate(() => window.t.client.send("/tool streamed again"));
    for (const t of tabs) await converged(t, 3);
  } finally {
    compressing(true);
  }
  assert.deepEqual(pageErrors, []);
});

test("on the page: the client polls behind the proxy, and streams again after `online` once the proxy stops compressing", async () => {
  const id = (await api("POST", "/v1/sessions", { title: "on the page behind a compressing proxy" })).session_id;
  // The demo with its client on this page (`?page`).
  const tab = await openPage(context, `${PROXY}/?page#${id}`, pageErrors);
  const onPage = () => tab.evaluate(() => window.__replay.client.diagnostics().transport);
  const describe = async () => `: ${JSON.stringify(await tab.evaluate(() => window.__replay?.client.diagnostics()))}`;
  await until("the demo's client", () => tab.evaluate((id) => window.__replay?.sessionId === id, id));
  await until("the page to follow by polling", async () => (await onPage()) === "polling", { timeoutMs: 60_000, describe });
  compressing(false);
  try {
    const at = Date.now();
    // The network lost and back, as the browser says it to a page.
    await tab.evaluate(() => {
      dispatchEvent(new Event("offline"));
      dispatchEvent(new Event("online"));
    });
    // Well within the re-probe period (minutes): `online` probes at once.
    await until("the stream back on the page", async () => (await onPage()) === "scoped", { timeoutMs: 15_000, describe });
    console.log(`on the page: streaming ${Date.now() - at} ms after online`);
    await api("POST", `/v1/sessions/${id}/messages`, { message_id: "onpage1", text: "/tool streamed on the page" });
    await until(
      "the page to end equal to the server's transcript",
      async () => {
        const server = await api("GET", `/v1/sessions/${id}/transcript`);
        const client = await tab.evaluate(() => window.__replay.client.transcript());
        const ended = server.items.some((x) => x.kind === "turn_end");
        return ended && client.cursor === server.cursor && JSON.stringify(client.items) === JSON.stringify(server.items);
      },
      { timeoutMs: 30_000, describe },
    );
    assert.equal(await onPage(), "scoped", "still streaming after the turn");
  } finally {
    compressing(true);
    await tab.close();
  }
  assert.deepEqual(pageErrors, []);
});
