// The outbox on one engine (`ENGINE`, through driver.mjs): the demo page in
// its default mode (the shared host), served by a front of this test
// (../front.mjs: the engine site's files, and `/v1/` forwarded to a
// replay-server it starts and kills on one SQLite file), so the page still
// loads and reloads while the runtime is down. `cargo xtask test` passes
// E2E_SERVER (the replay-server binary) and E2E_SITE (the engine site).
import { test, after, afterEach, before } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { closeFront, commits, committedOrder, startFront, startRuntime, stopRuntime } from "../front.mjs";
import { until as waitUntil } from "../support.mjs";
import { launch } from "./driver.mjs";

const engine = process.env.ENGINE;
const SERVER = process.env.E2E_SERVER;
const SITE = process.env.E2E_SITE;

let dir;
let front;
let browser;
let opened = [];

const start = () => startRuntime(front, SERVER, path.join(dir, "outbox.sqlite"));

before(async () => {
  assert.ok(engine && SERVER && SITE, "ENGINE, E2E_SERVER and E2E_SITE are set by cargo xtask test");
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "replay-engine-outbox-"));
  front = await startFront(SITE);
  await start();
  browser = await launch(engine);
});

after(async () => {
  await browser?.close();
  await closeFront(front);
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

afterEach(async () => {
  for (const tab of opened) await tab.close().catch(() => {});
  opened = [];
  await browser.errors();
  // A check that failed with the runtime stopped leaves it stopped.
  if (!front.runtime) await start();
});

/** What the tab's client shows: its pending messages and its user items. */
const shown = (tab) =>
  tab.evaluate(() => {
    const view = window.__replay?.client.view();
    if (!view) return null;
    return {
      status: view.status.state,
      pending: view.pending.map((p) => ({ id: p.message_id, state: p.state })),
      items: view.items.filter((i) => i.kind === "message" && i.role === "user").map((i) => i.message_id),
    };
  });

const until = (what, predicate, tab, timeoutMs = 30_000) =>
  waitUntil(what, predicate, {
    timeoutMs,
    describe: async () => ` on ${engine}; the page shows ${JSON.stringify(await shown(tab).catch(String))}`,
  });

const newSession = async () => {
  const res = await fetch(`${front.url}/v1/sessions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ title: `${engine} outbox` }),
  });
  return (await res.json()).session_id;
};

/** A tab of the demo on `sessionId`, once its client shows the session. */
async function openDemo(sessionId) {
  const tab = await browser.open(`${front.url}/#${sessionId}`);
  opened.push(tab);
  await until("the demo's client", async () => (await shown(tab)) !== null, tab);
  return tab;
}

/** Sends `text` from the composer; its `message_id`, read from the view's pending list. */
async function send(tab, text) {
  const before = (await shown(tab)).pending.map((p) => p.id);
  await tab.fill("#message", text);
  await tab.click("#composer button[type=submit]");
  const now = await until(
    `"${text}" pending`,
    async () => {
      const s = await shown(tab);
      return s.pending.length > before.length ? s : null;
    },
    tab,
  );
  return now.pending.find((p) => !before.includes(p.id)).id;
}

/** The runtime stopped, the tab's client sees it gone. */
async function stop(tab) {
  await stopRuntime(front);
  await until("the client to see the runtime gone", async () => (await shown(tab)).status !== "live", tab);
}

test("a message sent with the runtime stopped survives a reload and is committed once", async () => {
  const sessionId = await newSession();
  const tab = await openDemo(sessionId);
  await until("live", async () => (await shown(tab)).status === "live", tab);
  await stop(tab);
  const id = await send(tab, "sent while the runtime is down");
  const before = (await shown(tab)).pending;
  assert.deepEqual(before.map((p) => p.id), [id]);
  assert.ok(["queued", "sending"].includes(before[0].state), `shown ${before[0].state}`);
  await tab.reload();
  const restored = await until("still pending after the reload", async () => {
    const s = await shown(tab);
    return s?.pending.some((p) => p.id === id) ? s : null;
  }, tab);
  assert.notEqual(restored.pending[0].state, "failed");
  await start();
  await until("committed, the pending list empty", async () => {
    const s = await shown(tab);
    return s.pending.length === 0 && s.items.filter((m) => m === id).length === 1;
  }, tab);
  assert.equal((await commits(front, sessionId))[id], 1, "one message.committed at the runtime");
  assert.equal(front.accepted[id], 1, "the runtime accepted one send of it");
  assert.deepEqual(await browser.errors(), [], `errors recorded on ${engine}`);
});

test("three messages sent with the runtime stopped are committed in order", async () => {
  const sessionId = await newSession();
  const tab = await openDemo(sessionId);
  await until("live", async () => (await shown(tab)).status === "live", tab);
  await stop(tab);
  const ids = [];
  for (const text of ["first", "second", "third"]) ids.push(await send(tab, text));
  assert.deepEqual((await shown(tab)).pending.map((p) => p.id), ids, "shown in send order");
  await start();
  await until("all three committed", async () => (await shown(tab)).pending.length === 0, tab);
  assert.deepEqual(await committedOrder(front, sessionId), ids, "committed in send order");
  for (const id of ids) assert.equal(front.accepted[id], 1, `${id} accepted once`);
  assert.deepEqual(await browser.errors(), [], `errors recorded on ${engine}`);
});
