// Credentials from the page's point of view: an application's getToken that
// caches its token, as most do, against `replay-server --token`. The cached
// token is stale; the provider renews it only when the client asks with
// `{ refresh: true }` (after a 401). `cargo xtask test` starts the token
// server and passes E2E_TOKEN_URL and E2E_TOKEN; the page and the package
// come from the demo site (E2E_URL).
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { launchChromium, openPage, until } from "./support.mjs";

const site = process.env.E2E_URL;
const base = process.env.E2E_TOKEN_URL;
const token = process.env.E2E_TOKEN;

let browser;
let page;
const errors = [];

/** A JSON call to the token server, with the token. */
async function api(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

before(async () => {
  assert.ok(site && base && token, "E2E_URL, E2E_TOKEN_URL and E2E_TOKEN are set by cargo xtask test");
  browser = await launchChromium();
  // Any page of the site: the test imports the package into it.
  page = await openPage(browser, `${site}/pkg/package.json`, errors);
});

after(async () => {
  await browser?.close();
});

test("a getToken that caches a stale token is asked to refresh once, and the client goes live", async () => {
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "auth" });
  await page.evaluate(async ({ base, sessionId, fresh }) => {
    const { default: init, ReplayClient } = await import("/pkg/web/index.js");
    await init();
    // The application's provider: a cache, renewed only when asked.
    let cached = "stale-token";
    const asked = [];
    const getToken = ({ refresh }) => {
      asked.push(refresh);
      if (refresh) cached = fresh;
      return cached;
    };
    const client = ReplayClient.connect({ baseUrl: base, sessionId, getToken, storage: "memory" });
    window.__auth = { client, asked };
  }, { base, sessionId, fresh: token });
  const state = () => page.evaluate(() => window.__auth.client.view().status.state);
  const describe = async () =>
    ` (state ${await state()}, asked ${JSON.stringify(await page.evaluate(() => window.__auth.asked))})`;
  await until("live with the renewed token", async () => (await state()) === "live", { timeoutMs: 15_000, describe });
  const asked = await page.evaluate(() => window.__auth.asked);
  assert.equal(asked.filter((r) => r === true).length, 1, `one refresh: ${JSON.stringify(asked)}`);
  assert.equal(asked[0], false, "the first call is an ordinary one");

  // A write goes through with the renewed token, and its reply is shown.
  await page.evaluate(() => window.__auth.client.send("hello with a fresh token"));
  await until(
    "the reply",
    () => page.evaluate(() => window.__auth.client.view().items.some((i) => i.kind === "message" && i.role === "assistant")),
    { timeoutMs: 15_000, describe },
  );
  await page.evaluate(() => window.__auth.client.close());
  assert.deepEqual(errors, []);
});

test("a token the server keeps refusing fails with the server's reason", async () => {
  const { session_id: sessionId } = await api("POST", "/v1/sessions", { title: "auth-wrong" });
  await page.evaluate(async ({ base, sessionId }) => {
    const { default: init, ReplayClient } = await import("/pkg/web/index.js");
    await init();
    const client = ReplayClient.connect({ baseUrl: base, sessionId, getToken: () => "wrong", storage: "memory" });
    window.__wrong = client;
  }, { base, sessionId });
  const lastError = () => page.evaluate(() => window.__wrong.view().status.lastError);
  await until("an unauthorized error", async () => (await lastError())?.code === "unauthorized", {
    timeoutMs: 15_000,
    describe: async () => ` (${JSON.stringify(await lastError())})`,
  });
  const error = await lastError();
  assert.equal(error.status, 401);
  assert.match(error.message, /missing or wrong bearer token/, JSON.stringify(error));
  await page.evaluate(() => window.__wrong.close());
});
