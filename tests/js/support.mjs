// Helpers shared by the Playwright test files (`e2e.test.mjs`, `worker.test.mjs`).
import assert from "node:assert/strict";
import { after, before } from "node:test";
import { chromium } from "playwright-core";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `predicate` every 100 ms until it returns something truthy (returned);
 * after `timeoutMs` throws, with what `describe()` says of the state then.
 */
export async function until(what, predicate, { timeoutMs = 30_000, describe = async () => "" } = {}) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await predicate();
    if (value) return value;
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}${await describe()}`);
}

/** A JSON call to the server at `base`; asserts a 2xx answer and returns its JSON (or null). */
export async function api(base, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A new page of `browser` at `url`; its uncaught errors are pushed to `errors`. */
export async function openPage(browser, url, errors, options = {}) {
  const page = await browser.newPage(options);
  page.on("pageerror", (err) => errors.push(String(err)));
  await page.goto(url);
  return page;
}

/** Debian's headless Chromium (`E2E_CHROMIUM`, set by `cargo xtask test`), never a downloaded one. */
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.E2E_CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
    ],
  });
}

/**
 * The Chromium of one test file against the demo site (`E2E_URL`): launched
 * before the file's tests, closed after them. `chromium.browser` is set once
 * launched; `chromium.errors` collects the uncaught errors of pages opened
 * with `openPage(chromium.browser, url, chromium.errors)`.
 */
export function withChromium() {
  const chromium = { site: process.env.E2E_URL, browser: null, errors: [] };
  before(async () => {
    assert.ok(chromium.site, "E2E_URL is set by cargo xtask test");
    chromium.browser = await launchChromium();
  });
  after(async () => {
    await chromium.browser?.close();
  });
  return chromium;
}
