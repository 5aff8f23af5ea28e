// The demo's outbox with the runtime really stopped: headless Chromium on the
// demo page, served by a front of this test (front.mjs: the site's files,
// and `/v1/` forwarded to a replay-server it starts and kills on one SQLite
// file), so the page still loads and reloads while the runtime is down. The
// runtime takes `--faults` for its `/v1/admin/events` (a session's failure,
// written as a runtime would). `cargo xtask test` passes
// E2E_SERVER (the replay-server binary) and E2E_SITE (the demo site).
import { test, after, before, beforeEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import {
  closeFront,
  commits as commitsOf,
  startFront,
  startRuntime as startRuntimeOf,
  stopRuntime as stopRuntimeOf,
} from "./front.mjs";
import { launchChromium, until as waitUntil } from "./support.mjs";

const SERVER = process.env.E2E_SERVER;
const SITE = process.env.E2E_SITE;

let dir;
let front;
let browser;
const pageErrors = [];

// The page a test watches: a timeout says what it shows.
let watched = null;
const describe = async () => {
  if (!watched || watched.isClosed()) return "";
  const shown = await watched
    .evaluate(() => {
      const view = window.__replay?.client.view();
      return view && { pending: view.pending, status: view.status.state, items: view.items.length };
    })
    .catch((err) => String(err));
  return `; the page shows ${JSON.stringify(shown)}; the front's accepted sends ${JSON.stringify(front.accepted)}`;
};
const until = (what, predicate, timeoutMs = 30_000) => waitUntil(what, predicate, { timeoutMs, describe });

/** Starts the runtime on the test's SQLite file, behind the front. */
const startRuntime = () => startRuntimeOf(front, SERVER, path.join(dir, "outbox.sqlite"));
const stopRuntime = () => stopRuntimeOf(front);
const commits = (sessionId) => commitsOf(front, sessionId);

/** A new page of `context` at the demo's `query` (and `#sessionId`), its client live or not. */
async function openDemo(context, query = "", sessionId = "") {
  const page = await context.newPage();
  page.on("pageerror", (err) => pageErrors.push(String(err)));
  await page.goto(`${front.url}/${query}${sessionId ? "#" + sessionId : ""}`);
  watched = page;
  await until("the demo's client", () => page.evaluate(() => !!window.__replay));
  return page;
}

/** The demo's stored values of `page`'s origin (the session's state), joined. */
const storedValue = (page) =>
  page.evaluate(() =>
    Object.keys(localStorage)
      .filter((k) => k !== "replay-demo:sessions")
      .map((k) => localStorage.getItem(k))
      .join(""),
  );

const live = (page) => page.evaluate(() => window.__replay.client.status().state === "live");

/** What the page shows in its outbox list: `[{ id, state, text }]`. */
const shownPending = (page) =>
  page.$$eval("#pending li", (lis) =>
    lis.map((li) => ({ id: li.dataset.messageId, state: li.dataset.state, text: li.querySelector(".bubble").textContent })),
  );

/** Types `text` into the demo's composer and sends it; returns its `message_id`, read from the pending list. */
async function sendFromComposer(page, text) {
  await page.fill("#message", text);
  await page.click("#composer button[type=submit]");
  const shown = await until(`"${text}" in the pending list`, async () =>
    (await shownPending(page)).find((m) => m.text === text),
  );
  return shown.id;
}

/** How often the page's view holds an item with `messageId`. */
const shownItems = (page, messageId) =>
  page.evaluate((id) => window.__replay.client.view().items.filter((i) => i.message_id === id).length, messageId);

before(async () => {
  assert.ok(SERVER && SITE, "E2E_SERVER and E2E_SITE are set by cargo xtask test");
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "replay-outbox-"));
  front = await startFront(SITE);
  await startRuntime();
  browser = await launchChromium();
});

// A test that failed with the runtime stopped leaves it stopped: the next
// one starts from a running runtime all the same.
beforeEach(async () => {
  if (!front.runtime) await startRuntime();
  front.holdSends = false;
  front.holdAnswers = false;
  front.rejectSends = null;
});

after(async () => {
  await browser?.close();
  await closeFront(front);
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

test("shared mode: a message sent with the runtime stopped is shown pending, survives a reload and is committed once", async () => {
  const context = await browser.newContext();
  const page = await openDemo(context);
  await until("the client to go live", () => live(page));
  const sessionId = await page.evaluate(() => window.__replay.sessionId);
  await stopRuntime();
  await until("the client to see the runtime gone", async () => !(await live(page)));

  const id = await sendFromComposer(page, "/tool sent while the runtime is down");
  const before = (await shownPending(page)).find((m) => m.id === id);
  assert.ok(["queued", "sending"].includes(before.state), `shown as ${before.state}`);

  await page.reload();
  await until("the reloaded page's client", () => page.evaluate(() => !!window.__replay));
  const restored = await until("the message still pending after the reload", async () =>
    (await shownPending(page)).find((m) => m.id === id),
  );
  assert.notEqual(restored.state, "failed");
  assert.deepEqual(await commits(sessionId).catch(() => "down"), "down", "the runtime is still stopped");

  await startRuntime();
  await until("the message committed and the pending list empty", async () =>
    (await shownPending(page)).length === 0 && (await shownItems(page, id)) === 1,
  );
  assert.equal((await commits(sessionId))[id], 1, "one message.committed at the runtime");
  assert.equal(front.accepted[id], 1, "the runtime accepted one send of it");
  assert.equal(await shownItems(page, id), 1, "shown once");
  assert.equal(await page.textContent("#session-title"), "demo", "the session's title is shown");
  await context.close();
});

test("two tabs with on-page clients each send while the runtime is stopped: each message committed once", async () => {
  const context = await browser.newContext();
  const first = await openDemo(context, "?page");
  const sessionId = await first.evaluate(() => window.__replay.sessionId);
  const second = await openDemo(context, "?page", sessionId);
  await until("both clients live", async () => (await live(first)) && (await live(second)));
  await stopRuntime();
  await until("both clients to see the runtime gone", async () => !(await live(first)) && !(await live(second)));

  const a = await sendFromComposer(first, "/tool from the first tab");
  const b = await sendFromComposer(second, "/tool from the second tab");
  // One stored value per session for both tabs: each save merges its
  // outbox into the stored one, so the second tab's save keeps the first's.
  const stored = await storedValue(first);
  assert.ok(stored.includes(b), "the second tab's message is stored");
  assert.ok(stored.includes(a), "the first tab's message is still stored");

  await startRuntime();
  for (const [page, name] of [
    [first, "first"],
    [second, "second"],
  ]) {
    await until(`both messages committed and nothing pending in the ${name} tab`, async () =>
      (await shownPending(page)).length === 0 && (await shownItems(page, a)) === 1 && (await shownItems(page, b)) === 1,
    );
  }
  const counts = await commits(sessionId);
  assert.equal(counts[a], 1, "the first tab's message committed once");
  assert.equal(counts[b], 1, "the second tab's message committed once");
  assert.equal(front.accepted[a], 1, "the first tab's message accepted once");
  assert.equal(front.accepted[b], 1, "the second tab's message accepted once");
  await context.close();
});

test("two tabs with on-page clients: the first reloads before the runtime is back, its message is still sent, each once", async () => {
  const context = await browser.newContext();
  const first = await openDemo(context, "?page");
  const sessionId = await first.evaluate(() => window.__replay.sessionId);
  const second = await openDemo(context, "?page", sessionId);
  await until("both clients live", async () => (await live(first)) && (await live(second)));
  await stopRuntime();
  await until("both clients to see the runtime gone", async () => !(await live(first)) && !(await live(second)));
  const a = await sendFromComposer(first, "/tool from the first tab, reloaded");
  const b = await sendFromComposer(second, "/tool from the second tab, kept open");
  await first.reload();
  await until("the reloaded page's client", () => first.evaluate(() => !!window.__replay));
  // The reloaded tab restored both messages: its own, and the second tab's
  // (which it will not send while the second tab holds its claim).
  await until("both messages pending in the reloaded tab", async () => {
    const ids = (await shownPending(first)).map((m) => m.id);
    return ids.includes(a) && ids.includes(b);
  });
  await startRuntime();
  try {
    await until(
      "both messages committed, nothing pending in either tab",
      async () =>
        (await shownPending(first)).length === 0 &&
        (await shownPending(second)).length === 0 &&
        (await shownItems(first, a)) === 1 &&
        (await shownItems(first, b)) === 1 &&
        (await shownItems(second, a)) === 1 &&
        (await shownItems(second, b)) === 1,
    );
  } finally {
    // Nothing was sent twice: the tab that restored the other's message
    // waited for its claim.
    assert.ok((front.accepted[b] ?? 0) <= 1, `the second tab's message accepted ${front.accepted[b]} times`);
    assert.ok((front.accepted[a] ?? 0) <= 1, `the first tab's message accepted ${front.accepted[a]} times`);
    await context.close();
  }
  const counts = await commits(sessionId);
  assert.equal(counts[a], 1, "the reloaded tab's message committed once");
  assert.equal(counts[b], 1, "the other tab's message committed once");
  assert.equal(front.accepted[a], 1);
  assert.equal(front.accepted[b], 1);
});

test("two tabs with on-page clients: the first closes before the runtime is back; the next tab of the session sends its message once", async () => {
  const context = await browser.newContext();
  const first = await openDemo(context, "?page");
  const sessionId = await first.evaluate(() => window.__replay.sessionId);
  const second = await openDemo(context, "?page", sessionId);
  await until("both clients live", async () => (await live(first)) && (await live(second)));
  await stopRuntime();
  await until("both clients to see the runtime gone", async () => !(await live(first)) && !(await live(second)));
  const a = await sendFromComposer(first, "/tool from the first tab, closed");
  const b = await sendFromComposer(second, "/tool from the second tab, still open");
  await first.close();
  await startRuntime();
  await until("the open tab's message committed", async () =>
    (await shownPending(second)).length === 0 && (await shownItems(second, b)) === 1,
  );
  // The closed tab's message is stored (the second tab's saves kept it):
  // the next client of the session sends it.
  assert.ok((await storedValue(second)).includes(a), "the closed tab's message is stored");
  const third = await openDemo(context, "?page", sessionId);
  for (const [page, name] of [
    [second, "second"],
    [third, "third"],
  ]) {
    await until(`the closed tab's message committed, nothing pending in the ${name} tab`, async () =>
      (await shownPending(page)).length === 0 && (await shownItems(page, a)) === 1,
    );
  }
  const counts = await commits(sessionId);
  assert.equal(counts[a], 1);
  assert.equal(counts[b], 1);
  assert.equal(front.accepted[a], 1);
  assert.equal(front.accepted[b], 1);
  await context.close();
});

test("shared mode: the SharedWorker ends with a send in flight; a tab opened after sends it, committed once", async () => {
  const context = await browser.newContext();
  const page = await openDemo(context);
  await until("the client to go live", () => live(page));
  const sessionId = await page.evaluate(() => window.__replay.sessionId);

  front.holdSends = true;
  const id = await sendFromComposer(page, "/tool in flight when the host ends");
  const held = await until("the send in flight at the front", () => front.held.find((h) => h.messageId === id));
  assert.equal((await shownPending(page)).find((m) => m.id === id).state, "sending");
  // Closing every page of the origin ends its SharedWorker, and with it the request.
  await page.close();
  await until("the request in flight to end with the SharedWorker", () => held.aborted);
  front.holdSends = false;
  assert.equal((await commits(sessionId))[id], undefined, "the runtime never saw it");

  const next = await openDemo(context, "", sessionId);
  await until("the message committed by the new tab's host, nothing pending", async () =>
    (await shownPending(next)).length === 0 && (await shownItems(next, id)) === 1,
  );
  assert.equal((await commits(sessionId))[id], 1, "one message.committed at the runtime");
  assert.equal(front.accepted[id], 1, "the runtime accepted one send of it");
  await context.close();
  assert.deepEqual(pageErrors, []);
});

test("shared mode: the SharedWorker ends with an answer in flight; a tab opened after answers it, once", async () => {
  const context = await browser.newContext();
  const page = await openDemo(context);
  await until("the client to go live", () => live(page));
  const sessionId = await page.evaluate(() => window.__replay.sessionId);
  await page.fill("#message", "/ask may I");
  await page.click("#composer button[type=submit]");
  const question = await until("the question asked and stored", () =>
    page.evaluate(() => window.__replay.client.view().pendingPrompts.find((p) => p.persisted)?.question_id),
  );

  front.holdAnswers = true;
  await page.click(`.prompt[data-question-id="${question}"] button`);
  const held = await until("the answer in flight at the front", () => front.held.find((h) => h.questionId === question));
  // The tab shows what its SharedWorker's view holds with the host's next
  // post, not in the tick the request left.
  const shown = await until("the answer shown sending on its prompt", () =>
    page.evaluate(
      (q) => window.__replay.client.view().pendingPrompts.find((p) => p.question_id === q && p.answer?.state === "sending")?.answer,
      question,
    ),
  );
  // Closing every page of the origin ends its SharedWorker, and with it the request.
  await page.close();
  await until("the request in flight to end with the SharedWorker", () => held.aborted);
  front.holdAnswers = false;
  assert.equal(front.answered[question], undefined, "the runtime never saw it");

  const next = await openDemo(context, "", sessionId);
  await until("answered by the new tab's host, no open question", () =>
    next.evaluate(() => window.__replay.client.view().pendingPrompts.length === 0),
  );
  const { items } = await (await fetch(`${front.url}/v1/sessions/${sessionId}/transcript`)).json();
  const answered = items.filter((i) => i.kind === "question").map((i) => [i.question_id, i.outcome, i.answer]);
  assert.deepEqual(answered, [[question, "answered", shown.text]], "answered once, with the answer given");
  assert.equal(front.answered[question], 1, "the runtime accepted one answer");
  await context.close();
  assert.deepEqual(pageErrors, []);
});

test("shared mode: a send the runtime refuses is shown failed with its code; Discard removes it, Retry sends it once", async () => {
  const context = await browser.newContext();
  const page = await openDemo(context);
  await until("the client to go live", () => live(page));
  const sessionId = await page.evaluate(() => window.__replay.sessionId);
  front.rejectSends = { status: 400, error: "invalid_message" };
  const failedRow = (id) => `#pending li[data-message-id="${id}"][data-state="failed"]`;

  const dropped = await sendFromComposer(page, "/tool refused, then discarded");
  await page.waitForSelector(failedRow(dropped));
  assert.match(await page.textContent(`${failedRow(dropped)} .badge`), /invalid_message/);
  await page.click(`${failedRow(dropped)} button.discard`);
  await until("the discarded message gone from the list", async () => (await shownPending(page)).length === 0);

  const kept = await sendFromComposer(page, "/tool refused, then retried");
  await page.waitForSelector(failedRow(kept));
  front.rejectSends = null;
  await page.click(`${failedRow(kept)} button.retry`);
  await until("the retried message committed, nothing pending", async () =>
    (await shownPending(page)).length === 0 && (await shownItems(page, kept)) === 1,
  );
  const counts = await commits(sessionId);
  assert.equal(counts[kept], 1, "the retried message committed once");
  assert.equal(counts[dropped], undefined, "the discarded message never reached the runtime");
  assert.equal(front.accepted[kept], 1);
  assert.equal(front.accepted[dropped], undefined);
  await context.close();
});

test("the demo shows the session's title, and a failed session's reason", async () => {
  const context = await browser.newContext();
  const page = await openDemo(context);
  await until("the client to go live", () => live(page));
  const sessionId = await page.evaluate(() => window.__replay.sessionId);
  await until("the title shown", async () => (await page.textContent("#session-title")) === "demo");
  assert.equal(await page.textContent("#session-state"), "open");
  const res = await fetch(`${front.url}/v1/admin/events`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ scope: "session", scope_id: sessionId, type: "session.failed", data: { reason: "quota_exceeded" } }),
  });
  assert.ok(res.ok, `admin/events: ${res.status}`);
  await until("the failure shown", async () => (await page.textContent("#session-state")) === "failed");
  assert.equal(await page.textContent("#session-reason"), "reason: quota_exceeded");
  await context.close();
});
