import { chromium } from "playwright-core";
const url = process.env.BENCH_URL;
const src = await import("fs").then(f => f.readFileSync("bench.mjs", "utf8"));
// reuse seedBacklog from bench.mjs by eval-ing the function text
const seedText = src.slice(src.indexOf("async function api"), src.indexOf("const browser"));
const EVENTS = 10_000;
const seedBacklog = new Function("url", "EVENTS", seedText + "; return seedBacklog;")(url, EVENTS);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
const page = await browser.newPage();
await page.goto(url + "/bench/");
await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
const { id, head } = await seedBacklog();
// warm up
console.log(await page.evaluate(([s, h]) => window.benchRestore(s, h, 3), [id, head]));
const cdp = await page.context().newCDPSession(page);
await cdp.send("Profiler.enable");
await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
await cdp.send("Profiler.start");
await page.evaluate(async ([s, h]) => { const { ReplayClient } = await import("../pkg/web/index.js"); for (let i = 0; i < 4; i++) { const c = ReplayClient.connect({ baseUrl: location.origin, sessionId: s, storage: "memory", notify: "sync" }); await new Promise((res) => { const off = c.subscribe(() => { const v = c.view(); if (v.status.state === "live" && v.cursor >= h) { off(); res(); } }); }); c.close(); } }, [id, head]);
const { profile } = await cdp.send("Profiler.stop");
const self = new Map();
const dt = profile.timeDeltas; const byId = new Map(profile.nodes.map(n => [n.id, n]));
const counts = new Map();
for (let i = 0; i < profile.samples.length; i++) counts.set(profile.samples[i], (counts.get(profile.samples[i]) || 0) + (dt[i] || 0));
for (const [nid, t] of counts) { const n = byId.get(nid); const k = n.callFrame.functionName + " " + (n.callFrame.url.split("/").pop()) ; self.set(k, (self.get(k) || 0) + t); }
const tot = [...self.values()].reduce((a, b) => a + b, 0);
console.log("total ms", (tot/1000).toFixed(1));
for (const [k, t] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 40)) console.log((t / 1000).toFixed(1).padStart(8), k);
await browser.close();
