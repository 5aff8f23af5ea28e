// Drives tests/js/bench/ in headless Chromium and prints `name value` lines
// for `cargo xtask bench`. BENCH_URL is a replay-server serving the bench site.
import { chromium } from "playwright-core";

const url = process.env.BENCH_URL;
const EVENTS = 10_000;

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
async function seedBacklog() {
  const { session_id: id } = await api("POST", "/v1/sessions", { title: "bench" });
  const append = (type, data) => api("POST", "/v1/admin/events", { scope: "session", scope_id: id, type, data });
  const words = "replay cursor gap heartbeat snapshot résumé stream delta epoch café".split(" ");
  const text = (n, k) => Array.from({ length: n }, (_, i) => words[(i * 7 + k) % words.length]).join(" ");
  let head = 1; // session.created
  for (let t = 1; head < EVENTS; t++) {
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
      if (head >= EVENTS) break;
      await append(type, data);
      head++;
    }
  }
  return { id, head };
}

const browser = await chromium.launch({
  executablePath: process.env.BENCH_CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--enable-precise-memory-info"],
});
try {
  const page = await browser.newPage();
  await page.goto(url + "/bench/");
  await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Performance.enable");

  const { id, head } = await seedBacklog();
  const restore = await page.evaluate(([s, h]) => window.benchRestore(s, h, 7), [id, head]);
  if (restore.items.sdk !== restore.items.baseline) {
    throw new Error(`SDK and baseline folded different item counts: ${JSON.stringify(restore.items)}`);
  }
  console.log(`browser_restore_ms ${restore.sdkMs.toFixed(1)}`);
  console.log(`browser_restore_events_per_s ${Math.round(head / (restore.sdkMs / 1000))}`);
  console.log(`browser_baseline_restore_ms ${restore.baselineMs.toFixed(1)}`);
  console.log(`browser_restore_vs_baseline ${(restore.baselineMs / restore.sdkMs).toFixed(3)}`);

  // Cold: the first restore of a first visit, SDK and baseline each in a
  // browser context of their own (no HTTP or code cache; median of 3). V8
  // runs wasm in its baseline compiler until hot functions are re-compiled,
  // and caches the optimised code only for later visits.
  const cold = { sdk: [], baseline: [] };
  for (let i = 0; i < 3; i++) {
    for (const which of ["sdk", "baseline"]) {
      const context = await browser.newContext();
      const fresh = await context.newPage();
      await fresh.goto(url + "/bench/");
      await fresh.waitForFunction(() => document.getElementById("out").textContent === "ready");
      cold[which].push(await fresh.evaluate(([w, s, h]) => window.benchFirstRestore(w, s, h), [which, id, head]));
      await context.close();
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`browser_restore_cold_ms ${median(cold.sdk).toFixed(1)}`);
  console.log(`browser_baseline_restore_cold_ms ${median(cold.baseline).toFixed(1)}`);

  // Live: a long streamed answer; script time per delta from the CDP metrics.
  const { session_id: live } = await api("POST", "/v1/sessions", { title: "live" });
  await page.evaluate(([s]) => window.benchLive(s, 1), [live]);
  const metric = async () =>
    Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  const before = await metric();
  const eventsBefore = (await page.evaluate(() => window.benchLiveStats())).events;
  for (let i = 0; i < 3; i++) {
    await api("POST", `/v1/sessions/${live}/messages`, { message_id: `bench${i}`, text: "/long 8000" });
    // Polled every 100 ms, not every frame: the probe's own view()/diagnostics()
    // calls would otherwise be counted as the SDK's script time.
    await page.waitForFunction((n) => window.benchLiveStats().cursor >= n, 4 * (i + 1) + 1, {
      timeout: 120_000,
      polling: 100,
    });
  }
  const after = await metric();
  const stats = await page.evaluate(() => window.benchLiveStats());
  const deltas = stats.events - eventsBefore;
  const scriptSeconds = after.ScriptDuration - before.ScriptDuration;
  console.log(`browser_live_delta_us ${((scriptSeconds * 1e6) / deltas).toFixed(2)}`);
  console.log(`browser_notifications_per_frame ${stats.maxPerFrame}`);
  console.error(`live: ${deltas} events, ${stats.notifications} notifications, script ${scriptSeconds.toFixed(3)} s`);

  await page.evaluate(() => {
    window.benchLiveDone = true;
  });
  await cdp.send("HeapProfiler.collectGarbage");
  const heap = await cdp.send("Runtime.getHeapUsage");
  const wasmBytes = await page.evaluate(() => window.wasmMemoryBytes());
  console.log(`browser_heap_mb ${(heap.usedSize / 1e6).toFixed(2)}`);
  console.log(`browser_wasm_memory_mb ${(wasmBytes / 1e6).toFixed(2)}`);
} finally {
  await browser.close();
}
