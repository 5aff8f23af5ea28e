// Drives tests/js/bench/ in headless Chromium and prints `name value` lines
// for `cargo xtask bench`. BENCH_URL is a replay-server serving the bench site.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { proxyBench } from "./bench-proxy.mjs";

const url = process.env.BENCH_URL;
const EVENTS = 10_000;
// BENCH_ONLY=live,burst,restore,cold,memory,shared,paint,link,proxy,send runs those parts (quick, repeatable
// figures while working on one path); unset runs everything.
const only = process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(",") : null;
const wants = (part) => !only || only.includes(part);
// Characters per streamed answer and answers per follower.
const LONG = Number(process.env.BENCH_LONG ?? 8000);
const TURNS = Number(process.env.BENCH_TURNS ?? 3);
// Characters of the burst answer (about 5 700 deltas for 20 000).
const BURST = Number(process.env.BENCH_BURST ?? 20000);

async function api(method, path, body) {
  const res = await fetch(url + path, {
    method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

// A realistic backlog: turns of user and assistant messages (~300-byte
// envelopes), a tool card every fifth turn.
async function seedBacklog(events = EVENTS) {
  const { session_id: id } = await api("POST", "/v1/sessions", { title: "bench" });
  const append = (type, data) => api("POST", "/v1/admin/events", { scope: "session", scope_id: id, type, data });
  const words = "replay cursor gap heartbeat snapshot résumé stream delta epoch café".split(" ");
  const text = (n, k) => Array.from({ length: n }, (_, i) => words[(i * 7 + k) % words.length]).join(" ");
  let head = 1; // session.created
  for (let t = 1; head < events; t++) {
    const turn = `turn_${t}`;
    const batch = [
      ["turn.started", { turn_id: turn, input_message_id: `u${t}` }],
      ["message.committed", { message_id: `u${t}`, turn_id: turn, role: "user", text: text(12, t) }],
    ];
    if (t % 5 === 0) {
      batch.push(["tool.started", { turn_id: turn, call_id: `c${t}`, name: "shell", input: { cmd: "cargo test" } }]);
      batch.push(["tool.completed", { turn_id: turn, call_id: `c${t}`, status: "ok", output: text(10, t) }]);
    }
    batch.push(["message.committed", { message_id: `a${t}`, turn_id: turn, role: "assistant", text: text(24, t + 3) }]);
    batch.push(["turn.completed", { turn_id: turn }]);
    for (const [type, data] of batch) {
      if (head >= events) break;
      await append(type, data);
      head++;
    }
  }
  return { id, head };
}

// A CPU profile's busy nodes with their self time (µs): every sampled node
// but idle and "(program)" (browser work outside script).
function busyNodes(prof) {
  return nodeTimes(prof).filter(([f]) => !OUTSIDE.includes(f.functionName));
}

// Nodes whose samples are no script: waiting, and browser work outside it.
const OUTSIDE = ["(idle)", "(program)"];

// Each node of a CPU profile with the time of its own samples (µs).
function nodeTimes(prof) {
  const dt = new Map();
  for (let i = 0; i < prof.samples.length; i++) dt.set(prof.samples[i], (dt.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i] ?? 0));
  return prof.nodes.map((n) => [n.callFrame, dt.get(n.id) ?? 0]);
}

// Ends a CDP trace started with `transferMode: "ReturnAsStream"` and returns
// its events.
async function traceEvents(cdp) {
  const done = new Promise((resolve) => cdp.once("Tracing.tracingComplete", resolve));
  await cdp.send("Tracing.end");
  const { stream } = await done;
  let text = "";
  for (;;) {
    const chunk = await cdp.send("IO.read", { handle: stream });
    text += chunk.base64Encoded ? Buffer.from(chunk.data, "base64").toString() : chunk.data;
    if (chunk.eof) break;
  }
  await cdp.send("IO.close", { handle: stream });
  const parsed = JSON.parse(text);
  return Array.isArray(parsed) ? parsed : parsed.traceEvents;
}

// Main-thread time of a profile (µs): the sum of its busy nodes.
const busyUs = (prof) => busyNodes(prof).reduce((sum, [, t]) => sum + t, 0);

// Self time by function (top 25) of a CDP CPU profile, on stderr.
function printProfile(prof) {
  const self = new Map();
  for (const [f, t] of busyNodes(prof)) {
    const key = `${f.functionName || "(anonymous)"} ${f.url.split("/").pop()}:${f.lineNumber}`;
    self.set(key, (self.get(key) ?? 0) + t);
  }
  const ms = (us) => (us / 1000).toFixed(1);
  const outside = (name) => ms(nodeTimes(prof).reduce((sum, [f, t]) => sum + (f.functionName === name ? t : 0), 0));
  console.error(`profile: ${ms(busyUs(prof))} ms of script, ${outside("(program)")} ms (program), ${outside("(idle)")} ms idle (self time, µs)`);
  for (const [k, t] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.error(`  ${String(t).padStart(8)} ${k}`);
}

// Starts sampling the page of `cdp` every 100 µs.
async function startProfile(cdp) {
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
  await cdp.send("Profiler.start");
}

// BENCH_PROFILE=path: writes `prof` to path.<name>.cpuprofile and its top
// self times, under `label`, to stderr.
function keepProfile(name, prof, label) {
  writeFileSync(`${process.env.BENCH_PROFILE}.${name}.cpuprofile`, JSON.stringify(prof));
  console.error(label);
  printProfile(prof);
}

// BENCH_JS_FLAGS="--flag ..." passes V8 flags to Chromium: engine
// experiments (e.g. which tier the first restore runs in), never for the
// table, since a page cannot set them.
const jsFlags = process.env.BENCH_JS_FLAGS ? [`--js-flags=${process.env.BENCH_JS_FLAGS}`] : [];
const launchOptions = {
  executablePath: process.env.BENCH_CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--enable-precise-memory-info", ...jsFlags],
};
// A shared worker's CDP target, driven through a browser session: Playwright
// opens sessions to pages (and dedicated and service workers) only. The
// attach is not flattened, so commands go through Target.sendMessageToTarget.
// `script`: the one whose script has that name, where a context runs two.
async function sharedWorkerTarget(browserCdp, contextId, script) {
  const { targetInfos } = await browserCdp.send("Target.getTargets");
  const workers = targetInfos.filter(
    (t) => t.type === "shared_worker" && t.browserContextId === contextId && (!script || new URL(t.url).pathname.endsWith(`/${script}`)),
  );
  if (workers.length !== 1) throw new Error(`expected one shared worker, found ${workers.length}`);
  const { sessionId } = await browserCdp.send("Target.attachToTarget", { targetId: workers[0].targetId, flatten: false });
  const waiting = new Map();
  let next = 0;
  const onMessage = (e) => {
    if (e.sessionId !== sessionId) return;
    const reply = JSON.parse(e.message);
    const call = waiting.get(reply.id);
    if (!call) return;
    waiting.delete(reply.id);
    if (reply.error) call.reject(new Error(`${call.method}: ${reply.error.message}`));
    else call.resolve(reply.result);
  };
  browserCdp.on("Target.receivedMessageFromTarget", onMessage);
  return {
    send: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const id = ++next;
        waiting.set(id, { method, resolve, reject });
        browserCdp.send("Target.sendMessageToTarget", { sessionId, message: JSON.stringify({ id, method, params }) }).catch(reject);
      }),
    detach: async () => {
      browserCdp.off("Target.receivedMessageFromTarget", onMessage);
      await browserCdp.send("Target.detachFromTarget", { sessionId });
    },
  };
}

// The browser context id of `page` (its target's).
async function contextIdOf(browserCdp, page) {
  const cdp = await page.context().newCDPSession(page);
  const { targetInfo } = await cdp.send("Target.getTargetInfo");
  await cdp.detach();
  return targetInfo.browserContextId;
}

// JS heap in use (bytes) of a CDP target after a full GC.
async function heapAfterGc(cdp) {
  await cdp.send("HeapProfiler.collectGarbage");
  return (await cdp.send("Runtime.getHeapUsage")).usedSize;
}

// Opens a tab of tests/js/bench/tab.html in `context` and waits for its
// first paint of the session; returns the page and navigation start to
// that paint (ms), and when its module ran and its client first had a view.
async function openTab(context, host, id, head, origin = url) {
  const tab = await context.newPage();
  await tab.goto(`${origin}/bench/tab.html?host=${host}&session=${id}&head=${head}`);
  await tab.waitForFunction(() => window.paintedAt !== undefined || window.paintError !== undefined, null, {
    timeout: 120_000,
  });
  const { paintedAt, paintError, marks } = await tab.evaluate(() => ({
    paintedAt: window.paintedAt,
    paintError: window.paintError,
    marks: window.marks,
  }));
  if (paintError) throw new Error(`tab (${host}): ${paintError}`);
  return { tab, ms: paintedAt, marks };
}

// A reload's time to paint: navigation start to the
// frame that shows a session's 40 messages, for a hand-written page
// (`host=plain`: fetch the replay pages, render) and the shared host's tab,
// on a first visit (a fresh browser context: no HTTP cache, no SharedWorker,
// nothing stored) and on a reload of that tab (its files from the HTTP
// cache; the shared tab paints its stored snapshot). Median of 3 contexts
// each, the ratio per context pair.
async function reloadPaint() {
  const ROUNDS = 3;
  const { id, head } = await seedBacklog(90); // 20 turns, 4 tool cards
  const { items } = await api("GET", `/v1/sessions/${id}/transcript`);
  const MESSAGES = items.filter((item) => item.kind === "message").length;
  if (MESSAGES !== 40) throw new Error(`the paint session has ${MESSAGES} messages, not 40`);
  const times = { plain: { first: [], second: [] }, shared: { first: [], second: [] } };
  const painted = async (tab) => {
    await tab.waitForFunction(() => window.paintedAt !== undefined || window.paintError !== undefined, null, {
      timeout: 60_000,
    });
    const { paintedAt, paintError } = await tab.evaluate(() => ({ paintedAt: window.paintedAt, paintError: window.paintError }));
    if (paintError) throw new Error(paintError);
    return paintedAt;
  };
  for (let i = 0; i < ROUNDS; i++) {
    for (const host of ["plain", "shared"]) {
      const context = await browser.newContext();
      try {
        const tab = await context.newPage();
        // The shared host stores its state as an app's does (IndexedDB).
        // tab-shared.html preloads the page half's modules, as a bundler's build would.
        const html = host === "shared" ? "tab-shared.html" : "tab.html";
        await tab.goto(`${url}/bench/${html}?host=${host}&session=${id}&head=${head}&messages=${MESSAGES}&storage=indexeddb`);
        times[host].first.push(await painted(tab));
        // Left open a moment (the shared host restored and stored its state).
        await tab.waitForTimeout(1_000);
        await tab.reload();
        times[host].second.push(await painted(tab));
        const m = await tab.evaluate(() => window.marks);
        console.error(`reload paint, ${host} reload: module ${m.module.toFixed(1)}, imported ${m.imported?.toFixed(1)}, view ${m.view.toFixed(1)} ms`);
      } finally {
        await context.close();
      }
    }
    console.error(
      `reload paint, round ${i + 1}: plain ${times.plain.first[i].toFixed(1)} / ${times.plain.second[i].toFixed(1)} ms, shared ${times.shared.first[i].toFixed(1)} / ${times.shared.second[i].toFixed(1)} ms (first visit / reload)`,
    );
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const ratio = (visit) => median(times.shared[visit].map((ms, i) => ms / times.plain[visit][i]));
  console.log(`browser_paint_plain_first_ms ${median(times.plain.first).toFixed(1)}`);
  console.log(`browser_paint_plain_reload_ms ${median(times.plain.second).toFixed(1)}`);
  console.log(`browser_paint_shared_first_ms ${median(times.shared.first).toFixed(1)}`);
  console.log(`browser_paint_shared_reload_ms ${median(times.shared.second).toFixed(1)}`);
  console.log(`browser_paint_shared_first_vs_plain ${ratio("first").toFixed(3)}`);
  console.log(`browser_paint_shared_reload_vs_plain ${ratio("second").toFixed(3)}`);
}

// The shared host across tabs, on the seeded backlog session
// (`head` events), each round in a fresh browser context (no HTTP cache,
// no running SharedWorker):
// - a second tab's time to first paint vs the first tab's: the first tab
//   starts the SharedWorker (its wasm compiles there) and restores the
//   backlog; the second attaches to the session the worker already
//   follows (its page files from the HTTP cache, as for any second tab);
//   median of 5 rounds, the ratio per round;
// - JS heap of 10 tabs: the sum over the 10 pages and the SharedWorker of
//   `Runtime.getHeapUsage().usedSize` after `HeapProfiler.collectGarbage`
//   in each target, against 10 tabs each with the client on the page (the
//   sum over the 10 pages, on two origins: see below); wasm linear memory beside it (the worker's one
//   instance against one per page), which is not JS heap.
async function sharedTabs(id, head) {
  const ROUNDS = 5;
  const browserCdp = await browser.newBrowserCDPSession();
  const firsts = [];
  const seconds = [];
  const clients = [];
  for (let i = 0; i < ROUNDS; i++) {
    const context = await browser.newContext();
    try {
      const first = await openTab(context, "shared", id, head);
      const second = await openTab(context, "shared", id, head);
      firsts.push(first.ms);
      seconds.push(second.ms);
      clients.push([first.ms - first.marks.imported, second.ms - second.marks.imported]);
      const marks = ({ ms, marks: m }) => `module ${m.module.toFixed(1)}, imported ${m.imported.toFixed(1)}, view ${m.view.toFixed(1)}, paint ${ms.toFixed(1)} ms`;
      console.error(`shared tabs, round ${i + 1}: first tab ${marks(first)}; second tab ${marks(second)}`);
    } finally {
      await context.close();
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.error(`shared tabs: first paint ${firsts.map((ms) => ms.toFixed(1))} ms, second ${seconds.map((ms) => ms.toFixed(1))} ms`);
  console.log(`browser_shared_first_tab_paint_ms ${median(firsts).toFixed(1)}`);
  console.log(`browser_shared_second_tab_paint_ms ${median(seconds).toFixed(1)}`);
  console.log(`browser_shared_second_vs_first_tab ${median(seconds.map((ms, i) => ms / firsts[i])).toFixed(3)}`);
  // The same from the client's half imported to the paint: what the host
  // and the client cost a tab, without the page's own load (navigation,
  // HTML, the module graph), which is the same for both tabs.
  console.log(
    `browser_shared_second_vs_first_tab_client ${median(clients.map(([first, second]) => second / first)).toFixed(3)}`,
  );

  const TABS = 10;
  const memory = {};
  for (const host of ["shared", "page"]) {
    const context = await browser.newContext();
    try {
      const tabs = [];
      // Ten on-page clients hold ten streams, more than the six connections
      // Chromium opens to one origin over HTTP/1.1: the tabs past the sixth
      // would never go live (seen in this bench). Half of them load the
      // page from `localhost` (the same server on loopback), so each of the
      // two origins holds five. The shared host's tabs need one stream.
      const origin = (i) => (host === "page" && i % 2 ? url.replace("127.0.0.1", "localhost") : url);
      for (let i = 0; i < TABS; i++) tabs.push((await openTab(context, host, id, head, origin(i))).tab);
      let heap = 0;
      let wasm = 0;
      for (const tab of tabs) {
        const cdp = await context.newCDPSession(tab);
        heap += await heapAfterGc(cdp);
        await cdp.detach();
        if (host === "page") wasm += await tab.evaluate(() => window.wasmMemoryBytes());
      }
      if (host === "shared") {
        const worker = await sharedWorkerTarget(browserCdp, await contextIdOf(browserCdp, tabs[0]));
        const workerHeap = await heapAfterGc(worker);
        const { result } = await worker.send("Runtime.evaluate", {
          expression: "wasmMemoryBytes()",
          awaitPromise: true,
          returnByValue: true,
        });
        await worker.detach();
        console.error(`shared tabs: the SharedWorker's JS heap ${(workerHeap / 1e6).toFixed(2)} MB of the 10 tabs' sum`);
        heap += workerHeap;
        wasm += result.value;
      }
      memory[host] = { heap, wasm };
    } finally {
      await context.close();
    }
  }
  await browserCdp.detach();
  console.log(`browser_tabs10_shared_heap_mb ${(memory.shared.heap / 1e6).toFixed(2)}`);
  console.log(`browser_tabs10_page_heap_mb ${(memory.page.heap / 1e6).toFixed(2)}`);
  console.log(`browser_tabs10_shared_vs_page_heap ${(memory.shared.heap / memory.page.heap).toFixed(3)}`);
  console.log(`browser_tabs10_shared_wasm_mb ${(memory.shared.wasm / 1e6).toFixed(2)}`);
  console.log(`browser_tabs10_page_wasm_mb ${(memory.page.wasm / 1e6).toFixed(2)}`);
  const total = ({ heap, wasm }) => heap + wasm;
  console.log(`browser_tabs10_shared_vs_page_memory ${(total(memory.shared) / total(memory.page)).toFixed(3)}`);
}

// The paint figures on loopback and through the bench's link emulator
// (BENCH_LINKS: `name=origin,...`, each origin the same server through a
// link of its own; xtask/src/link.rs), each host beside the hand-written
// page in the same rounds: for a session of 40 messages, navigation start
// to the frame that shows them on a first visit (a fresh browser context),
// on a reload of that tab and in a second tab of the same context; for a
// 10 000-event session, a first visit to the frame that shows its newest
// message (live or not, as the hand-written page has no stream): the
// clients read the newest page first (`tail: 40`), the hand-written page
// every page forward.
// Every page is loaded from the link's origin, so its files and the
// runtime's answers cross the link. Median of LINK_ROUNDS contexts; ratios
// per round.
// BENCH_LINK_TRACE=1: what a page fetched (the page's own requests, not
// its workers'), when, and the bytes that crossed the link.
async function traceLoads(tab, label) {
  // The shared host's worker: its own requests (its script, the wasm, the
  // first page), on the page's clock.
  let worker = [];
  if (/shared/.test(label)) {
    const browserCdp = await browser.newBrowserCDPSession();
    try {
      const target = await sharedWorkerTarget(browserCdp, await contextIdOf(browserCdp, tab));
      const pageOrigin = await tab.evaluate(() => performance.timeOrigin);
      const { result } = await target.send("Runtime.evaluate", {
        expression: `JSON.stringify([performance.timeOrigin, performance.getEntriesByType("resource").map((e) => [e.name.replace(location.origin, ""), e.startTime, e.responseEnd, e.transferSize])])`,
        returnByValue: true,
      });
      await target.detach();
      const [origin, entries] = JSON.parse(result.value);
      const at = (ms) => (ms + origin - pageOrigin).toFixed(0);
      worker = [`worker started ${at(0)}`].concat(entries.map(([name, start, end, bytes]) => `worker ${name} ${at(start)}-${at(end)} ms, ${bytes} B`));
    } catch (err) {
      worker = [`worker: ${err.message}`];
    } finally {
      await browserCdp.detach();
    }
  }
  const entries = await tab.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const m = window.marks ?? {};
    const marks = ["module", "imported", "view"].map((k) => `${k} ${m[k]?.toFixed(0)}`).join(", ");
    return [`html ${nav.requestStart.toFixed(0)}-${nav.responseEnd.toFixed(0)} ms, ${marks}`].concat(
      performance
        .getEntriesByType("resource")
        .map((e) => `${e.name.replace(location.origin, "")} ${e.startTime.toFixed(0)}-${e.responseEnd.toFixed(0)} ms, ${e.transferSize} B`),
    );
  });
  console.error(`${label}: ${entries.concat(worker).join("; ")}`);
}

async function linkPaint(long) {
  const ROUNDS = Number(process.env.BENCH_LINK_ROUNDS ?? 7);
  const links = (process.env.BENCH_LINKS ?? `lo=${url}`).split(",").map((kv) => kv.split("="));
  const short = await seedBacklog(90);
  const { items } = await api("GET", `/v1/sessions/${short.id}/transcript`);
  const MESSAGES = items.filter((item) => item.kind === "message").length;
  if (MESSAGES !== 40) throw new Error(`the paint session has ${MESSAGES} messages, not 40`);
  // The page each host is measured on: an app's HTML as the README gives
  // it, preloading the host's files (tab-shared.html, tab-page.html).
  const pages = { plain: "tab.html", shared: "tab-shared.html", page: "tab-page.html" };
  // BENCH_LINK_VARIANTS=`name=host@page.html,...`: other pages measured
  // in the same rounds, interleaved (a change of the recommended HTML
  // weighed against it on a loaded machine); `host` is what the page's
  // query says (`shared` or `page`).
  const hostOf = { plain: "plain", shared: "shared", page: "page" };
  for (const v of (process.env.BENCH_LINK_VARIANTS ?? "").split(",").filter(Boolean)) {
    const [name, spec] = v.split("=");
    const [host, page] = spec.split("@");
    hostOf[name] = host;
    pages[name] = page;
  }
  const HOSTS = Object.keys(pages);
  const html = (host) => pages[host];
  const painted = async (tab) => {
    await tab.waitForFunction(() => window.nextFrameAt !== undefined || window.paintError !== undefined, null, {
      timeout: 120_000,
    });
    const { paintedAt, nextFrameAt, htmlAt, moduleAt, paintError } = await tab.evaluate(() => ({
      paintedAt: window.paintedAt,
      nextFrameAt: window.nextFrameAt,
      htmlAt: window.htmlAt,
      moduleAt: window.marks.module,
      paintError: window.paintError,
    }));
    if (paintError) throw new Error(paintError);
    return { ms: paintedAt, nextFrame: nextFrameAt, afterHtml: paintedAt - htmlAt, afterModule: paintedAt - moduleAt };
  };
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  // BENCH_LINK_ONLY=`name,...`: those links alone (e.g. `100ms`).
  const linkOnly = process.env.BENCH_LINK_ONLY?.split(",");
  for (const [name, origin] of links) {
    if (linkOnly && !linkOnly.includes(name)) continue;
    const t = Object.fromEntries(
      HOSTS.map((h) => [h, { first: [], reload: [], reloadAfterHtml: [], reloadAfterModule: [], second: [], long: [], next: [] }]),
    );
    for (let i = 0; i < ROUNDS; i++) {
      for (const host of HOSTS) {
        const context = await browser.newContext();
        try {
          const query = `host=${hostOf[host]}&session=${short.id}&head=${short.head}&messages=${MESSAGES}&storage=indexeddb`;
          const tab = await context.newPage();
          await tab.goto(`${origin}/bench/${html(host)}?${query}`);
          const first = await painted(tab);
          if (process.env.BENCH_LINK_TRACE) await traceLoads(tab, `link ${name}, ${host} first visit (paint ${first.ms.toFixed(0)})`);
          t[host].first.push(first.ms);
          t[host].next.push({ first: first.nextFrame - first.ms });
          // Left open a moment (the clients restored and stored their state).
          await tab.waitForTimeout(1_000);
          await tab.reload();
          const reload = await painted(tab);
          if (process.env.BENCH_LINK_TRACE) await traceLoads(tab, `link ${name}, ${host} reload (paint ${reload.ms.toFixed(0)})`);
          t[host].reload.push(reload.ms);
          t[host].reloadAfterHtml.push(reload.afterHtml);
          t[host].reloadAfterModule.push(reload.afterModule);
          t[host].next[i].reload = reload.nextFrame - reload.ms;
          const second = await context.newPage();
          await second.goto(`${origin}/bench/${html(host)}?${query}`);
          t[host].second.push((await painted(second)).ms);
        } finally {
          await context.close();
        }
      }
      for (const host of HOSTS) {
        const context = await browser.newContext();
        try {
          const tab = await context.newPage();
          await tab.goto(`${origin}/bench/${html(host)}?host=${hostOf[host]}&session=${long.id}&head=${long.head}&storage=indexeddb&tail=40&newest`);
          const visit = await painted(tab);
          if (process.env.BENCH_LINK_TRACE) await traceLoads(tab, `link ${name}, ${host} 10 000 events (paint ${visit.ms.toFixed(0)})`);
          t[host].long.push(visit.ms);
        } finally {
          await context.close();
        }
      }
      const f = (xs) => xs[i].toFixed(0);
      console.error(
        `link ${name}, round ${i + 1}: ` +
          HOSTS.map((h) => `${h} ${f(t[h].first)}/${f(t[h].reload)} (+${f(t[h].reloadAfterHtml)})/${f(t[h].second)}/${f(t[h].long)}`).join(", ") +
          " ms (first/reload (after the HTML)/second tab/10 000 events)",
      );
    }
    for (const host of HOSTS) {
      // The frame that paints the view and the one after it (tab.js): how
      // much later each paint would read if taken a frame later.
      const later = (visit) => median(t[host].next.map((n) => n[visit])).toFixed(1);
      console.error(`link ${name}, ${host}: the next frame came ${later("first")} ms (first visit) and ${later("reload")} ms (reload) after the paint, medians`);
    }
    for (const host of HOSTS) {
      const key = `browser_link_${name}_${host}`;
      console.log(`${key}_first_ms ${median(t[host].first).toFixed(1)}`);
      console.log(`${key}_reload_ms ${median(t[host].reload).toFixed(1)}`);
      console.log(`${key}_reload_after_html_ms ${median(t[host].reloadAfterHtml).toFixed(1)}`);
      console.log(`${key}_reload_after_module_ms ${median(t[host].reloadAfterModule).toFixed(1)}`);
      console.log(`${key}_second_ms ${median(t[host].second).toFixed(1)}`);
      console.log(`${key}_long_ms ${median(t[host].long).toFixed(1)}`);
      console.log(`${key}_long_vs_first ${median(t[host].long.map((ms, i) => ms / t[host].first[i])).toFixed(3)}`);
      if (host === "plain") continue;
      for (const visit of ["first", "reload", "long"]) {
        const ratio = median(t[host][visit].map((ms, i) => ms / t.plain[visit][i]));
        console.log(`${key}_${visit}_vs_plain ${ratio.toFixed(3)}`);
      }
    }
  }
}

// From `send()` to the frame that shows the message's pending bubble
// (tests/js/bench/send.html): the shared host's tab and a page with the
// client on it, each rendering `view.pending` from `subscribe`, beside a
// hand-written page that appends its own bubble before it POSTs. Each host
// in a fresh browser context on a session of its own; SENDS sends each
// (one before them not counted), made 0, 2, ... 14 ms after a frame's
// start in turn (a click comes anywhere in a frame); the median of the
// frames to the bubble (1: the first frame painted after the send) and of
// the time to that frame's start, the time's ratio to the hand-written
// page's.
async function sendPaint() {
  const SENDS = 21;
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const result = {};
  for (const host of ["plain", "page", "shared"]) {
    const { session_id: id } = await api("POST", "/v1/sessions", { title: `send ${host}` });
    const context = await browser.newContext();
    try {
      const tab = await context.newPage();
      await tab.goto(`${url}/bench/send.html?host=${host}&session=${id}`);
      await tab.waitForFunction(() => window.ready === true, null, { timeout: 60_000 });
      await tab.evaluate(() => window.measureSend("not counted", 0));
      const frames = [];
      const ms = [];
      for (let i = 0; i < SENDS; i++) {
        await tab.waitForTimeout(200);
        const r = await tab.evaluate(([text, delay]) => window.measureSend(text, delay), [`message ${i}`, (i % 8) * 2]);
        if (!Number.isFinite(r.ms)) throw new Error(`send (${host}): no bubble after ${r.frames} frames`);
        frames.push(r.frames);
        ms.push(r.ms);
      }
      const error = await tab.evaluate(() => window.sendError);
      if (error) console.error(`send (${host}): a send failed: ${error}`);
      result[host] = { frames: median(frames), max: Math.max(...frames), ms: median(ms) };
      console.error(`send paint, ${host}: frames ${frames.join(" ")}; ms ${ms.map((x) => x.toFixed(1)).join(" ")}`);
    } finally {
      await context.close();
    }
  }
  for (const host of ["plain", "page", "shared"]) {
    console.log(`browser_send_${host}_frames ${result[host].frames}`);
    console.log(`browser_send_${host}_max_frames ${result[host].max}`);
    console.log(`browser_send_${host}_ms ${result[host].ms.toFixed(2)}`);
  }
  for (const host of ["page", "shared"]) {
    console.log(`browser_send_${host}_vs_plain ${(result[host].ms / result.plain.ms).toFixed(3)}`);
  }
}

const browser = await chromium.launch(launchOptions);
try {
  const page = await browser.newPage();
  await page.goto(url + "/bench/");
  await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Performance.enable");
  const browserCdp = await browser.newBrowserCDPSession();

  const { id, head } =
    wants("restore") || wants("cold") || wants("memory") || wants("shared") || wants("link") ? await seedBacklog() : {};
  if (wants("restore") || wants("memory")) {
  await page.evaluate(() => window.hasBase());
  const restore = await page.evaluate(([s, h]) => window.benchRestore(s, h, 7), [id, head]);
  const { sdk: n, baseline: m, base: k = n } = restore.items;
  if (n !== m || k !== n) {
    throw new Error(`SDK, baseline and earlier build folded different item counts: ${JSON.stringify(restore.items)}`);
  }
  if (restore.baseMs !== null) {
    console.log(`browser_restore_base_ms ${restore.baseMs.toFixed(1)}`);
    console.log(`browser_restore_base_vs_baseline ${(restore.baselineMs / restore.baseMs).toFixed(3)}`);
  }
  console.log(`browser_restore_ms ${restore.sdkMs.toFixed(1)}`);
  console.log(`browser_restore_events_per_s ${Math.round(head / (restore.sdkMs / 1000))}`);
  console.log(`browser_baseline_restore_ms ${restore.baselineMs.toFixed(1)}`);
  console.log(`browser_restore_vs_baseline ${(restore.baselineMs / restore.sdkMs).toFixed(3)}`);
  // BENCH_PROFILE=path: one more warm restore of each, profiled after the
  // measured ones (path.restore.<sdk|baseline>.cpuprofile).
  if (process.env.BENCH_PROFILE) {
    for (const which of ["sdk", "baseline"]) {
      await startProfile(cdp);
      const ms = await page.evaluate(([w, s, h]) => window.benchOneRestore(w, s, h), [which, id, head]);
      keepProfile(`restore.${which}`, (await cdp.send("Profiler.stop")).profile, `restore ${which}: ${ms.toFixed(1)} ms`);
    }
  }
  }

  // Cold: the first restore of a first visit, SDK and baseline each in a
  // browser profile of their own (median of 3). V8 runs wasm in its baseline
  // compiler until hot functions are re-compiled. A second visit in the same
  // on-disk profile (an incognito context keeps no code cache) comes after
  // the first page stayed open CACHE_WAIT_MS, the time V8 waits after the
  // last optimised function before it offers the module to Chromium's code
  // cache (`--wasm-caching-timeout-ms`, 2 000 by default); a trace of the
  // second visit tells whether the module came from that cache.
  if (wants("cold")) {
  const CACHE_WAIT_MS = 3000;
  const cold = { sdk: [], baseline: [], sdkWorker: [], init: [], second: [], secondInit: [], cacheHits: 0 };
  // BENCH_PROFILE=path: a CPU profile of the page during the first round's
  // first restore of each (path.cold.<sdk|baseline|sdkWorker>.cpuprofile).
  const visit = async (context, which, { linger = 0, trace = false, profile = false } = {}) => {
    const fresh = await context.newPage();
    const cdp = trace || profile ? await context.newCDPSession(fresh) : null;
    if (trace) await cdp.send("Tracing.start", { categories: "disabled-by-default-devtools.timeline", transferMode: "ReturnAsStream" });
    await fresh.goto(url + (which === "sdkWorker" ? "/bench/?worker" : "/bench/"));
    await fresh.waitForFunction(() => document.getElementById("out").textContent === "ready");
    if (profile) await startProfile(cdp);
    const ms = await fresh.evaluate(([w, s, h]) => window.benchOneRestore(w, s, h), [which, id, head]);
    if (profile) keepProfile(`cold.${which}`, (await cdp.send("Profiler.stop")).profile, `cold ${which}: restore ${ms.toFixed(1)} ms`);
    const init = await fresh.evaluate(() => window.readyAt);
    if (linger) await fresh.waitForTimeout(linger);
    const cacheHit = trace ? (await traceEvents(cdp)).some((e) => e.name === "v8.wasm.moduleCacheHit") : false;
    await fresh.close();
    return { ms, init, cacheHit };
  };
  for (let i = 0; i < 3; i++) {
    for (const which of ["sdk", "baseline", "sdkWorker"]) {
      const profile = mkdtempSync(join(tmpdir(), "bench-profile-"));
      const context = await chromium.launchPersistentContext(profile, launchOptions);
      try {
        const profiled = i === 0 && Boolean(process.env.BENCH_PROFILE);
        const first = await visit(context, which, { linger: which === "sdk" ? CACHE_WAIT_MS : 0, profile: profiled });
        cold[which].push(first.ms);
        if (which === "sdk") {
          cold.init.push(first.init);
          const second = await visit(context, which, { trace: true });
          cold.second.push(second.ms);
          cold.secondInit.push(second.init);
          cold.cacheHits += second.cacheHit ? 1 : 0;
        }
      } finally {
        await context.close();
        rmSync(profile, { recursive: true, force: true });
      }
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`browser_restore_cold_ms ${median(cold.sdk).toFixed(1)}`);
  console.log(`browser_restore_second_visit_ms ${median(cold.second).toFixed(1)}`);
  console.log(`browser_init_cold_ms ${median(cold.init).toFixed(1)}`);
  console.log(`browser_init_second_visit_ms ${median(cold.secondInit).toFixed(1)}`);
  console.log(`browser_second_visit_code_cache_hits ${cold.cacheHits}`);
  console.log(`browser_baseline_restore_cold_ms ${median(cold.baseline).toFixed(1)}`);
  // Per round: the SDK and the baseline measured one after the other, so a
  // change of the machine's load moves both.
  console.log(`browser_restore_cold_vs_baseline ${median(cold.sdk.map((ms, i) => cold.baseline[i] / ms)).toFixed(3)}`);
  console.log(`browser_restore_cold_sdk_worker_ms ${median(cold.sdkWorker).toFixed(1)}`);
  }

  // Live: long streamed answers (chunks as the server paces them), followed
  // by the SDK and by the plain-JS follower in turn, in the same page;
  // main-thread time per received event from a CPU profile of each.
  if (wants("live") || wants("burst") || wants("memory") || wants("shared")) {
    const metric = async () =>
      Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
    // Main-thread time of a follower (`busyUs`): the sum of a CPU profile's samples
    // (JS, wasm, GC and the builtins they call; not idle, not "(program)").
    // CDP's ScriptDuration is not used: it counts tasks (timers, animation
    // frames) and leaves out promise jobs, where both followers read the
    // body and where the SDK parses and folds every chunk (with
    // `notify: "sync"`, which moves the SDK's whole work into promise jobs,
    // ScriptDuration read 1.6 µs per event).
    // A follower on a session of its own, warm: one unmeasured answer
    // first, so each follower's code (and a package's wasm, which starts in
    // V8's baseline tier) is warm when measured, whatever the order.
    const start = async (which, latency) => {
      const { session_id: s } = await api("POST", "/v1/sessions", { title: `live ${which}` });
      // The SDK pipes its body once, when it connects: the probe is on
      // before (its samples are cleared once the follower is warm).
      if (latency) await page.evaluate(() => window.latencyProbe(true));
      await page.evaluate(([w, s]) => window[`${w}Follow`](s, 1), [which, s]);
      let i = 0;
      const answer = async (chars, flags = "") => {
        await api("POST", `/v1/sessions/${s}/messages`, { message_id: `bench${i}`, text: `/long ${chars}${flags}` });
        i++;
        // Polled every 100 ms, not every frame: the probe's own calls would
        // otherwise be counted as the follower's time.
        const wanted = 4 * i + 1;
        await page
          .waitForFunction(([w, n]) => window.liveCursor(w) >= n, [which, wanted], { timeout: 300_000, polling: 100 })
          .catch(async (err) => {
            // Which follower stopped short, and where: the timeout alone does not say.
            const cursor = await page.evaluate((w) => window.liveCursor(w), which).catch(() => "unreadable");
            throw new Error(`follower ${which} (${flags || "paced"}): cursor ${cursor}, waited for ${wanted}: ${err.message}`);
          });
      };
      await answer(2000);
      await page.evaluate((on) => window.latencyProbe(on), latency);
      const f = { which, busy: 0, hostBusy: 0, tasks: 0, events: 0, prof: null, stats: null };
      // The shared host's own CPU time: its SharedWorker profiled beside the page.
      const hostScript = { sdkShared: "sdk-shared.js", baseShared: "sdk-shared-base.js" }[which];
      const host = hostScript ? await sharedWorkerTarget(browserCdp, await contextIdOf(browserCdp, page), hostScript) : null;
      // One measured answer, profiled alone.
      f.measure = async (chars, flags) => {
        if (host) await startProfile(host);
        await startProfile(cdp);
        const before = await metric();
        const eventsBefore = (await page.evaluate((w) => window.liveStats(w), which)).events;
        await answer(chars, flags);
        const after = await metric();
        f.stats = await page.evaluate((w) => window.liveStats(w), which);
        f.prof = (await cdp.send("Profiler.stop")).profile;
        f.busy += busyUs(f.prof);
        if (host) f.hostBusy += busyUs((await host.send("Profiler.stop")).profile);
        f.tasks += after.ScriptDuration - before.ScriptDuration;
        f.events += f.stats.events - eventsBefore;
      };
      return f;
    };
    // Followers measured answer by answer in turn (sdk, js, base; js, base, sdk; …):
    // a change of the machine's load during the run weighs on each alike,
    // where measuring one follower's answers after the other's had moved
    // the ratio by ±25 % between runs. A follower waiting for its turn
    // stays connected; its heartbeats (one a second) fall in the others'
    // profiles, a fraction of a per cent. Returns per follower the
    // main-thread µs per event (`us`), the same by ScriptDuration
    // (`taskUs`), its last answer's profile and the latency samples.
    const followAll = async (whiches, { latency = false, turns = TURNS, burst = false } = {}) => {
      // The probe's samples are the page's: one follower's when `latency`.
      if (latency && whiches.length !== 1) throw new Error("latency is measured one follower at a time");
      const fs = [];
      for (const w of whiches) fs.push(await start(w, latency));
      for (let t = 0; t < turns; t++) {
        // The order turns each round, so that no follower is always the
        // one measured first (the 5–12 % position bias of docs/benchmarks.md).
        const k = t % fs.length;
        for (const f of [...fs.slice(k), ...fs.slice(0, k)]) {
          await f.measure(burst ? BURST : LONG, burst ? " /burst" : "");
        }
      }
      const lat = await page.evaluate(() => window.latencyStats());
      await page.evaluate(() => window.latencyProbe(false));
      const out = {};
      for (const f of fs) {
        await page.evaluate((w) => window.liveStop(w), f.which);
        console.error(`live ${f.which}${burst ? " burst" : ""}: ${f.events} events, busy ${(f.busy / 1e3).toFixed(1)} ms, task script ${(f.tasks * 1e3).toFixed(1)} ms, ${JSON.stringify(f.stats)}`);
        out[f.which] = { us: f.busy / f.events, hostUs: f.hostBusy / f.events, taskUs: (f.tasks * 1e6) / f.events, events: f.events, stats: f.stats, lat, prof: f.prof };
      }
      return out;
    };
    const hasBase = await page.evaluate(() => window.hasBase());
    // `worker`: the plain-JS follower reading its stream in a worker, the
    // floor of a follower that keeps the network off the main thread.
    // `sdkWorker`: this package in a worker, the page applying its posts.
    const whiches = ["sdk", "js", "worker", "sdkWorker", ...(hasBase ? ["base"] : [])];
    const profiles = [];
    if (wants("live") || wants("memory")) {
      const { sdk, js, worker, sdkWorker, base } = await followAll(whiches);
      if (base) {
        console.log(`browser_live_base_delta_us ${base.us.toFixed(2)}`);
        console.log(`browser_live_base_vs_js ${(base.us / js.us).toFixed(3)}`);
        console.log(`browser_live_vs_base ${(sdk.us / base.us).toFixed(3)}`);
      }
      console.log(`browser_live_delta_us ${sdk.us.toFixed(2)}`);
      console.log(`browser_live_js_delta_us ${js.us.toFixed(2)}`);
      console.log(`browser_live_vs_js ${(sdk.us / js.us).toFixed(3)}`);
      console.log(`browser_live_worker_delta_us ${worker.us.toFixed(2)}`);
      console.log(`browser_live_worker_vs_js ${(worker.us / js.us).toFixed(3)}`);
      console.log(`browser_live_sdk_worker_delta_us ${sdkWorker.us.toFixed(2)}`);
      console.log(`browser_live_sdk_worker_vs_js ${(sdkWorker.us / js.us).toFixed(3)}`);
      console.log(`browser_live_task_script_us ${sdk.taskUs.toFixed(2)}`);
      console.log(`browser_live_js_task_script_us ${js.taskUs.toFixed(2)}`);
      console.log(`browser_notifications_per_frame ${sdk.stats.maxPerFrame}`);
      profiles.push(["sdk", sdk], ["js", js]);
      // One follower at a time: the probe and its samples are the page's.
      const sdkLat = (await followAll(["sdk"], { latency: true, turns: 1 })).sdk.lat;
      const jsLat = (await followAll(["js"], { latency: true, turns: 1 })).js.lat;
      console.log(`browser_live_latency_p50_ms ${sdkLat.p50.toFixed(2)}`);
      console.log(`browser_live_latency_p95_ms ${sdkLat.p95.toFixed(2)}`);
      console.log(`browser_live_js_latency_p50_ms ${jsLat.p50.toFixed(2)}`);
      console.log(`browser_live_js_latency_p95_ms ${jsLat.p95.toFixed(2)}`);
    }
    // A burst: an answer's deltas back to back (`/burst`), so thousands of
    // events arrive in a few large chunks; TURNS answers each, interleaved
    // (one answer is 50–130 ms of measure, too little on its own).
    if (wants("live") || wants("burst")) {
      const { sdk, js, worker, sdkWorker, base } = await followAll(whiches, { burst: true });
      if (base) {
        console.log(`browser_burst_base_delta_us ${base.us.toFixed(2)}`);
        console.log(`browser_burst_vs_base ${(sdk.us / base.us).toFixed(3)}`);
      }
      console.log(`browser_burst_events ${sdk.events}`);
      console.log(`browser_burst_delta_us ${sdk.us.toFixed(2)}`);
      console.log(`browser_burst_js_delta_us ${js.us.toFixed(2)}`);
      console.log(`browser_burst_vs_js ${(sdk.us / js.us).toFixed(3)}`);
      console.log(`browser_burst_worker_delta_us ${worker.us.toFixed(2)}`);
      console.log(`browser_burst_worker_vs_js ${(worker.us / js.us).toFixed(3)}`);
      console.log(`browser_burst_sdk_worker_delta_us ${sdkWorker.us.toFixed(2)}`);
      console.log(`browser_burst_sdk_worker_vs_js ${(sdkWorker.us / js.us).toFixed(3)}`);
      profiles.push(["burst.sdk", sdk], ["burst.js", js]);
    }
    // The shared host: the page following through `SharedClient`
    // while a SharedWorker runs the SDK, against the plain-JS follower on
    // the page, interleaved as above; only the page's main thread is
    // profiled (the worker's time is not the page's), as for `sdkWorker`,
    // which is measured in the same rounds: the shared host's page half
    // against the dedicated worker's.
    if (wants("shared")) {
      const { js, sdkShared, sdkWorker, worker, baseShared } = await followAll(["js", "sdkShared", "sdkWorker", "worker", ...(hasBase ? ["baseShared"] : [])]);
      if (baseShared) {
        console.log(`browser_live_base_shared_delta_us ${baseShared.us.toFixed(2)}`);
        console.log(`browser_live_base_shared_vs_js_worker ${(baseShared.us / worker.us).toFixed(3)}`);
        console.log(`browser_live_base_shared_host_cpu_us ${baseShared.hostUs.toFixed(2)}`);
        console.log(`browser_live_sdk_shared_vs_base ${(sdkShared.us / baseShared.us).toFixed(3)}`);
      }
      console.log(`browser_live_sdk_shared_js_delta_us ${js.us.toFixed(2)}`);
      console.log(`browser_live_sdk_shared_js_worker_delta_us ${worker.us.toFixed(2)}`);
      console.log(`browser_live_sdk_shared_vs_js_worker ${(sdkShared.us / worker.us).toFixed(3)}`);
      console.log(`browser_live_sdk_shared_host_cpu_us ${sdkShared.hostUs.toFixed(2)}`);
      console.log(`browser_live_sdk_shared_delta_us ${sdkShared.us.toFixed(2)}`);
      console.log(`browser_live_sdk_shared_vs_js ${(sdkShared.us / js.us).toFixed(3)}`);
      console.log(`browser_live_sdk_shared_vs_sdk_worker ${(sdkShared.us / sdkWorker.us).toFixed(3)}`);
      console.log(`browser_live_sdk_shared_notifications_per_frame ${sdkShared.stats.maxPerFrame}`);
      profiles.push(["shared.sdkShared", sdkShared], ["shared.js", js]);
    }
    // BENCH_PROFILE=path: CPU profiles of each follower's last measured
    // answer (path.sdk.cpuprofile, path.js.cpuprofile, path.burst.sdk.cpuprofile,
    // path.burst.js.cpuprofile), top self times on stderr.
    if (process.env.BENCH_PROFILE) {
      for (const [which, { prof }] of profiles) keepProfile(which, prof, `${which}:`);
    }
  }

  if (wants("memory")) {
  await cdp.send("HeapProfiler.collectGarbage");
  const heap = await cdp.send("Runtime.getHeapUsage");
  const wasmBytes = await page.evaluate(() => window.wasmMemoryBytes());
  console.log(`browser_heap_mb ${(heap.usedSize / 1e6).toFixed(2)}`);
  console.log(`browser_wasm_memory_mb ${(wasmBytes / 1e6).toFixed(2)}`);
  }

  if (wants("send")) await sendPaint();

  if (wants("shared")) await sharedTabs(id, head);
  if (wants("paint")) await reloadPaint();
  if (wants("link")) await linkPaint({ id, head });
  // Behind a proxy that mutes event streams (bench-proxy.mjs).
  if (wants("proxy")) await proxyBench(browser, api);
} finally {
  await browser.close();
}
