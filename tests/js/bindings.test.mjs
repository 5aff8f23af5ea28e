// The framework bindings and the README quickstarts, as an app uses them:
// React 19 (StrictMode), Vue 3 and Svelte 5 apps built by Vite from the
// packed package (tests/js/apps, built by the package layer), the README's
// npm snippet and examples/rust-quickstart.rs, in headless Chromium against
// a live replay-server. `cargo xtask test` serves them at /apps/ and
// /rust-quickstart/ and passes E2E_URL and BINDINGS_APPS (the built apps'
// folder, for the server-side render).
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";
import { api as call, launchChromium, openPage, until } from "./support.mjs";

const url = process.env.E2E_URL;
const api = (method, path, body) => call(url, method, path, body);
const openStreams = async () => (await api("GET", "/v1/diagnostics")).streams;

let browser;

before(async () => {
  assert.ok(url, "E2E_URL is set by cargo xtask test");
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

/** What an app shows for the server's transcript items. */
const shown = (items) => items.map((item) => (item.kind === "message" ? `${item.role}: ${item.text}` : item.kind));

/** The session's transcript once its turn ended. */
async function endedTranscript(sessionId) {
  return until("the turn to end on the server", async () => {
    const s = await api("GET", `/v1/sessions/${sessionId}/transcript`);
    return s.items.some((i) => i.kind === "turn_end") ? s : null;
  });
}

for (const [framework, mode] of [
  ["react", ""],
  ["vue", ""],
  ["svelte", ""],
  ["react", "worker"],
  ["react", "shared"],
]) {
  const what = mode ? `${framework} with a ${mode === "worker" ? "WorkerClient" : "SharedClient"}` : framework;
  test(`${what}: one stream per tab, the live transcript, a reply to a message sent from the app, unmount closes`, async () => {
    await until("no stream open before the app", async () => (await openStreams()) === 0);
    const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: what });
    const errors = [];
    const query = `session=${sessionId}${mode ? `&${mode}` : ""}`;
    const page = await openPage(browser, `${url}/apps/${framework}.html?${query}`, errors);
    try {
      await followsAndCloses(framework, mode, sessionId, page, errors);
    } finally {
      await page.close();
    }
  });
}

async function followsAndCloses(framework, mode, sessionId, page, errors) {
  const status = () => page.evaluate(() => document.getElementById("status")?.textContent);
  await until(`${framework}: live`, async () => (await status()) === "live", { describe: status });

  assert.equal(await page.evaluate(() => window.t.connects()), 1, "connected once");
  if (framework === "react") {
    // StrictMode (a development build) mounted the component's effects twice.
    assert.equal(await page.evaluate(() => window.t.mounts()), 2, "StrictMode double mount");
  }
  assert.equal(await openStreams(), 1, "one stream for the tab");
  // A WorkerClient's or SharedClient's transcript() is a Promise; the
  // on-page client's is not.
  const inWorker = await page.evaluate(() => window.t.client.transcript() instanceof Promise);
  assert.equal(inWorker, mode !== "", "the client runs where the app asked");
  if (mode === "shared") {
    const role = await page.evaluate(() => window.t.client.diagnostics().host?.role);
    assert.equal(role, "shared", "the SharedWorker hosts it, not the page fallback");
  }

  await page.evaluate(() => window.t.resetRenders());
  assert.equal(await page.evaluate(() => window.t.send("/long 400 hello from the app")), true);
  const server = await endedTranscript(sessionId);
  const want = shown(server.items);
  await until(`${framework}: the app to show the server's transcript`, async () => {
    const got = await page.evaluate(() => [...document.querySelectorAll("#items li")].map((li) => li.textContent));
    const live = await page.evaluate(() => document.getElementById("live"));
    return JSON.stringify(got) === JSON.stringify(want) && live === null;
  });
  assert.ok(
    want.some((line) => line.startsWith("assistant: ")),
    `the reply is shown: ${JSON.stringify(want)}`,
  );
  const renders = await page.evaluate(() => window.t.renders());
  assert.ok(renders.total > 2, `the reply streamed in several renders: ${JSON.stringify(renders)}`);
  // A worker's client posts on the worker's own frames, which need not line
  // up with the page's: the one-render-per-frame promise is the page client's.
  if (mode === "") {
    assert.equal(renders.maxPerFrame, 1, `at most one render per frame: ${JSON.stringify(renders)}`);
  }
  assert.equal(await openStreams(), 1, "still one stream after the reply");
  // One subscribe per client (StrictMode: its effect's mount, cleanup, mount).
  const subscribes = await page.evaluate(() => window.t.subscribes());
  assert.ok(subscribes >= 1 && subscribes <= 2, `subscribe calls for the whole reply: ${subscribes}`);

  if (framework === "react" && mode === "") {
    // Another session: the old client is closed, the new one is the tab's only stream.
    const { session_id: next } = await api("POST", "/v1/sessions", { title: "next" });
    await page.evaluate((s) => {
      window.t.previous = window.t.client;
      window.t.setSession(s);
    }, next);
    await until("the new session's client", () =>
      page.evaluate(() => window.t.client !== window.t.previous && window.t.client?.view().status.state === "live"),
    );
    assert.equal(await page.evaluate(() => window.t.previous.view().status.state), "stopped", "the old client closed");
    assert.equal(await page.evaluate(() => window.t.connects()), 2, "connected once more");
    await until("one stream after the switch", async () => (await openStreams()) === 1);
    assert.equal(await page.evaluate(() => document.querySelectorAll("#items li").length), 0, "the new session's view");
  }

  await page.evaluate(() => window.t.unmount());
  await until(`${framework}: unmount to close the stream`, async () => (await openStreams()) === 0);
  assert.deepEqual(errors, []);
}

test("a session that does not exist: failed, with the server's code not_found and status 404", async () => {
  const errors = [];
  const page = await openPage(browser, `${url}/apps/react.html?session=ses_does_not_exist`, errors);
  try {
    const status = () => page.evaluate(() => document.getElementById("status")?.textContent);
    await until("failed", async () => (await status()) === "failed", { describe: status });
    const lastError = await page.evaluate(() => window.t.client.view().status.lastError);
    assert.deepEqual([lastError.code, lastError.status], ["not_found", 404], lastError.message);
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test("react: rendered by react-dom/server in Node without throwing", async () => {
  assert.ok(process.env.BINDINGS_APPS, "BINDINGS_APPS is set by cargo xtask test");
  const { render } = await import(pathToFileURL(`${process.env.BINDINGS_APPS}/ssr.mjs`).href);
  assert.equal(typeof globalThis.window, "undefined", "Node has no window");
  const html = render();
  assert.match(html, /connecting/);
});

test("the README's npm quickstart runs: it creates a session, sends hello and logs the reply", async () => {
  const errors = [];
  const logs = [];
  const page = await browser.newPage();
  page.on("pageerror", (err) => errors.push(String(err)));
  page.on("console", (msg) => logs.push(msg.text()));
  await page.goto(`${url}/apps/quickstart.html`);
  const reply = await until("the quickstart to log an assistant message", async () =>
    logs.find((line) => line.startsWith("assistant ")),
  );
  assert.ok(reply.length > "assistant ".length, reply);
  assert.ok(logs.includes("user hello"), JSON.stringify(logs.slice(0, 5)));
  assert.ok(
    logs.some((line) => line.startsWith("status: live")),
    "the status was logged",
  );
  assert.deepEqual(errors, []);
  await page.close();
});

test("the README's Rust quickstart (examples/rust-quickstart.rs) runs: it follows a session and sends hello", async () => {
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "rust quickstart" });
  const errors = [];
  const logs = [];
  const page = await browser.newPage();
  page.on("pageerror", (err) => errors.push(String(err)));
  page.on("console", (msg) => logs.push(msg.text()));
  await page.goto(`${url}/rust-quickstart/index.html?server=${encodeURIComponent(url)}&session=${sessionId}`);
  const server = await endedTranscript(sessionId);
  const assistant = server.items.find((i) => i.kind === "message" && i.role === "assistant");
  assert.ok(assistant, "the server answered hello");
  await until("the example to log the whole reply", async () =>
    logs.some((line) => line === `Assistant: ${assistant.text}`),
  );
  assert.ok(logs.some((line) => line.startsWith("turn ")), "send resolved with the turn id");
  assert.ok(logs.includes("User: hello"), JSON.stringify(logs.slice(0, 5)));
  assert.deepEqual(errors, []);
  await page.close();
});
