// One small interface over every engine the suite runs, so an engine test is
// written once: Chromium (playwright-core), Firefox ESR (puppeteer-core over
// WebDriver BiDi), WebKitGTK and WPE WebKit (selenium-webdriver against
// their WebKitWebDriver / WPEWebDriver). All are Debian's binaries.
//
//   const browser = await launch("firefox");
//   const tab = await browser.open(url);     // a tab of one profile
//   await browser.open(url, { ownWindow: true }); // in a window of its own (WebKit)
//   await tab.evaluate((x) => x + 1, 41);     // a function, one JSON argument
//   await tab.reload(); await tab.close();
//   await browser.errors();                   // page and worker errors since the last call
//   await browser.tabCount(); await browser.close();
//
// The WebKit drivers give no console logs, so errors come from the page
// (`error-hook.js`, loaded first by the engine site's pages) and from the
// workers (`worker-hook.js`), which report over a BroadcastChannel that the
// page hook records: one way for every engine.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { sleep } from "../support.mjs";

/** Every engine name `launch` takes. */
export const ENGINES = ["chromium", "firefox", "webkitgtk", "wpe"];

/** How many tabs `engine` holds at once (WPE's Cog: one window). */
export const maxTabs = (engine) => (engine === "wpe" ? 1 : Infinity);

const CHROMIUM = process.env.E2E_CHROMIUM ?? "/usr/bin/chromium";
const FIREFOX = process.env.E2E_FIREFOX ?? "/usr/bin/firefox-esr";
const MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser";
/** How long one evaluate, navigation or reload may take. */
const COMMAND_TIMEOUT_MS = 30_000;

/** The page hook's record: `window.__engineErrors` (see error-hook.js). */
const readErrors = () => window.__engineErrors ?? [];

/** A browser of `engine` with one fresh profile. */
export async function launch(engine) {
  switch (engine) {
    case "chromium":
      return launchPlaywright();
    case "firefox":
      return launchPuppeteer();
    case "webkitgtk":
      return launchSelenium({
        driver: "/usr/bin/WebKitWebDriver",
        display: true,
        capabilities: {
          browserName: "MiniBrowser",
          "webkitgtk:browserOptions": { binary: MINIBROWSER, args: ["--automation"] },
        },
      });
    case "wpe":
      return launchSelenium({
        driver: "/usr/bin/WPEWebDriver",
        display: false,
        capabilities: {
          browserName: "cog",
          "wpe:browserOptions": { binary: "/usr/bin/cog", args: ["--automation", "--platform=headless"] },
        },
      });
    default:
      throw new Error(`unknown engine ${engine}; one of ${ENGINES.join(", ")}`);
  }
}

/**
 * What every browser offers beside its tabs: the errors its tabs' hooks
 * recorded, the open tabs' count; `open` opens a tab of the engine.
 */
function browserOf({ name, open, tabCount, close }) {
  const tabs = new Set();
  const closedErrors = [];
  const reported = new Set();
  return {
    name,
    /**
     * `ownWindow`: a WebKit driver opens the tab in a window of its own,
     * shown beside the others; a tab behind another is hidden there (its
     * page's timers and a client's polls slow down), as in Firefox, where
     * the tab opened last is the one in front.
     */
    async open(url, { ownWindow = false } = {}) {
      if (tabs.size >= maxTabs(name)) throw new Error(`${name} holds ${maxTabs(name)} tab(s) at most`);
      const tab = await open(url, { ownWindow });
      const close = tab.close;
      // A closing tab's record is kept: its errors still count.
      tab.close = async () => {
        closedErrors.push(...(await tab.evaluate(readErrors).catch(() => [])));
        tabs.delete(tab);
        await close();
      };
      tabs.add(tab);
      return tab;
    },
    /**
     * The errors any tab recorded since the last call (each tab sees the
     * workers' too, and a worker sends its whole record to each new page:
     * each error is returned once).
     */
    async errors() {
      const all = [...closedErrors];
      for (const tab of tabs) all.push(...(await tab.evaluate(readErrors)));
      const fresh = [...new Set(all)].filter((error) => !reported.has(error));
      for (const error of fresh) reported.add(error);
      return fresh;
    },
    tabCount,
    close,
  };
}

/** `fill` and `click` as the schedule uses them, inside the page (one way for every driver). */
function withForms(tab) {
  tab.fill = (selector, text) =>
    tab.evaluate(
      ([selector, text]) => {
        const input = document.querySelector(selector);
        input.value = text;
        input.dispatchEvent(new Event("input", { bubbles: true }));
      },
      [selector, text],
    );
  tab.click = (selector) => tab.evaluate((selector) => document.querySelector(selector).click(), selector);
  return tab;
}

/** A tab over a Playwright or puppeteer page (the same three calls). */
const pageTab = (page) =>
  withForms({
    evaluate: (fn, arg) => page.evaluate(fn, arg),
    reload: () => page.reload(),
    close: () => page.close(),
  });

async function launchPlaywright() {
  const { launchChromium } = await import("../support.mjs");
  const browser = await launchChromium();
  const context = await browser.newContext();
  return browserOf({
    name: "chromium",
    async open(url) {
      const page = await context.newPage();
      await page.goto(url);
      return pageTab(page);
    },
    tabCount: async () => context.pages().length,
    close: () => browser.close(),
  });
}

async function launchPuppeteer() {
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.launch({
    browser: "firefox",
    executablePath: FIREFOX,
    headless: true,
    protocolTimeout: COMMAND_TIMEOUT_MS,
  });
  // The blank page Firefox starts with is not one of the test's tabs.
  const blank = new Set(await browser.pages());
  return browserOf({
    name: "firefox",
    async open(url) {
      const page = await browser.newPage();
      page.setDefaultTimeout(COMMAND_TIMEOUT_MS);
      await page.goto(url);
      return pageTab(page);
    },
    tabCount: async () => (await browser.pages()).filter((page) => !blank.has(page)).length,
    close: () => browser.close(),
  });
}

/** A free loopback port, for a driver process. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on("error", reject);
  });
}

/** A process that ends with this one; its output kept for a failure's message. */
function child(program, args, env) {
  const proc = spawn(program, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const keep = (chunk) => (output = (output + chunk).slice(-4000));
  proc.stdout.on("data", keep);
  proc.stderr.on("data", keep);
  process.once("exit", () => proc.kill("SIGKILL"));
  return { proc, output: () => output };
}

/** Xvfb on a free display number, for WebKitGTK's MiniBrowser. */
async function startXvfb() {
  for (let display = 90 + Math.floor(Math.random() * 400); ; display++) {
    const x = child("Xvfb", [`:${display}`, "-screen", "0", "1280x1024x24", "-nolisten", "tcp"]);
    await sleep(500);
    if (x.proc.exitCode === null) return { display: `:${display}`, stop: () => x.proc.kill() };
  }
}

/**
 * A WebDriver session on `driver` (a WebKit driver process of its own),
 * tabs as its windows. One session has one current window: every command
 * switches to its tab first, so commands run one at a time.
 */
async function launchSelenium({ driver, display, capabilities }) {
  const { Builder } = await import("selenium-webdriver");
  const xvfb = display ? await startXvfb() : null;
  const port = await freePort();
  const service = child(driver, [`--port=${port}`, "--host=127.0.0.1"], xvfb ? { DISPLAY: xvfb.display } : {});
  const session = await connectWhenUp(Builder, `http://127.0.0.1:${port}`, capabilities, service);
  await session.manage().setTimeouts({ script: COMMAND_TIMEOUT_MS, pageLoad: COMMAND_TIMEOUT_MS });
  let queue = Promise.resolve();
  const serial = (command) => {
    const result = queue.then(command);
    queue = result.catch(() => {});
    return result;
  };
  // The session's first window is the first tab.
  let spare = await session.getWindowHandle();
  const stop = () => {
    service.proc.kill();
    xvfb?.stop();
  };
  const name = capabilities.browserName === "cog" ? "wpe" : "webkitgtk";
  return browserOf({
    name,
    open: (url, { ownWindow }) =>
      serial(async () => {
        let handle = spare;
        spare = null;
        if (!handle) {
          await session.switchTo().newWindow(ownWindow ? "window" : "tab");
          handle = await session.getWindowHandle();
        }
        const on = async (command) => {
          await session.switchTo().window(handle);
          return command();
        };
        await on(() => session.get(url));
        return withForms({
          evaluate: (fn, arg) => serial(() => on(() => evaluateIn(session, fn, arg))),
          reload: () => serial(() => on(() => session.navigate().refresh())),
          close: () =>
            serial(async () => {
              // The last window cannot close without ending the session: a
              // blank one opens first, kept for the next tab (WPE's one
              // window goes blank instead).
              if (maxTabs(name) === 1) {
                await on(() => session.get("about:blank"));
                spare = handle;
                return;
              }
              if ((await session.getAllWindowHandles()).length === 1) {
                await session.switchTo().newWindow("tab");
                spare = await session.getWindowHandle();
              }
              await on(() => session.close());
            }),
        });
      }),
    tabCount: async () => (await session.getAllWindowHandles()).length - (spare ? 1 : 0),
    close: async () => {
      await session.quit().catch(() => {});
      stop();
    },
  });
}

/** A new session once the driver process listens (it takes a moment to start). */
async function connectWhenUp(Builder, server, capabilities, service) {
  const deadline = Date.now() + COMMAND_TIMEOUT_MS;
  for (;;) {
    try {
      return await new Builder().usingServer(server).withCapabilities(capabilities).build();
    } catch (err) {
      if (Date.now() > deadline || service.proc.exitCode !== null) {
        throw new Error(`${err.message}; driver output: ${service.output()}`);
      }
      await sleep(200);
    }
  }
}

/**
 * `fn(arg)` in the current window, awaited there: the value, or its
 * exception rethrown here (WebDriver would report only "script error").
 * The value travels as JSON text: the WebKit drivers' own serialisation
 * reorders an object's keys, and the tests compare JSON texts.
 */
async function evaluateIn(session, fn, arg) {
  const outcome = await session.executeAsyncScript(
    `const done = arguments[arguments.length - 1];
     Promise.resolve()
       .then(() => (${fn})(arguments[0]))
       .then((value) => done({ json: value === undefined ? "null" : JSON.stringify(value) }), (e) => done({ error: e instanceof Error ? e.name + ": " + e.message + " at " + e.stack : String(e) }));`,
    arg === undefined ? null : arg,
  );
  if (outcome.error !== undefined) throw new Error(`in the page: ${outcome.error}`);
  return JSON.parse(outcome.json);
}
