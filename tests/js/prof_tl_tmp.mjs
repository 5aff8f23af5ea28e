import { chromium } from "playwright-core";
const url = process.env.BENCH_URL;
const src = (await import("fs")).readFileSync("bench.mjs", "utf8");
const seedText = src.slice(src.indexOf("async function api"), src.indexOf("const browser"));
const seedBacklog = new Function("url", "EVENTS", seedText + "; return seedBacklog;")(url, 10000);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"] });
const page = await browser.newPage();
await page.goto(url + "/bench/");
await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
const { id, head } = await seedBacklog();
await page.evaluate(([s, h]) => window.benchRestore(s, h, 2), [id, head]);
const r = await page.evaluate(async ([s, h]) => {
  const { ReplayClient } = await import("../pkg/web/index.js");
  const out = [];
  for (let i = 0; i < 3; i++) {
    performance.clearResourceTimings();
    const t0 = performance.now();
    const c = ReplayClient.connect({ baseUrl: location.origin, sessionId: s, storage: "memory", notify: "sync" });
    const marks = [];
    const res = await new Promise((resolve) => {
      const off = c.subscribe(() => {
        const v = c.view();
        marks.push([(performance.now() - t0).toFixed(1), v.status.state, v.cursor]);
        if (v.status.state === "live" && v.cursor >= h) { off(); resolve(performance.now() - t0); }
      });
    });
    const rt = performance.getEntriesByType("resource").filter(e => e.startTime >= t0 - 1).map(e => `${e.name.replace(/^.*\/v1\//, "")} start ${(e.startTime - t0).toFixed(1)} resp ${(e.responseStart - t0).toFixed(1)} end ${(e.responseEnd - t0).toFixed(1)}`);
    c.close();
    out.push({ total: res.toFixed(1), marks, rt });
  }
  const b0 = performance.now();
  // baseline once
  let cursor = 0; const tl = [];
  for (;;) { const t = performance.now() - b0; const res = await fetch(`${location.origin}/v1/sessions/${s}/replay?after_cursor=${cursor}&limit=2000`); const txt = await res.text(); const t2 = performance.now() - b0; const p = JSON.parse(txt); tl.push(`${t.toFixed(1)}->${t2.toFixed(1)} parse ${(performance.now() - b0 - t2).toFixed(1)}`); cursor = p.cursor; if (!p.has_more) break; }
  out.push({ baseline: (performance.now() - b0).toFixed(1), tl });
  return out;
}, [id, head]);
console.log(JSON.stringify(r, null, 1));
await browser.close();
