import { chromium } from "playwright-core";
const url = process.env.BENCH_URL;
async function api(method, path, body) {
  const res = await fetch(url + path, { method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status}`);
  return res.json();
}
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
const page = await browser.newPage();
await page.goto(url + "/bench/");
await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
const cdp = await page.context().newCDPSession(page);
await cdp.send("Performance.enable");
const { session_id: live } = await api("POST", "/v1/sessions", { title: "live" });
await page.evaluate(([s]) => window.benchLive(s, 1), [live]);
await cdp.send("Profiler.enable");
await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
const metric = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
const before = await metric();
const e0 = (await page.evaluate(() => window.benchLiveStats())).events;
await cdp.send("Profiler.start");
for (let i = 0; i < 2; i++) {
  await api("POST", `/v1/sessions/${live}/messages`, { message_id: `bench${i}`, text: "/long 8000" });
  await page.waitForFunction((n) => window.benchLiveStats().cursor >= n, 4 * (i + 1) + 1, { timeout: 120_000, polling: 200 });
}
const { profile } = await cdp.send("Profiler.stop");
const after = await metric();
const st = await page.evaluate(() => window.benchLiveStats());
const n = st.events - e0;
console.log("events", n, "notifications", st.notifications, "script s", (after.ScriptDuration - before.ScriptDuration).toFixed(3), "us/ev", ((after.ScriptDuration - before.ScriptDuration) * 1e6 / n).toFixed(1));
const self = new Map(); const dt = profile.timeDeltas; const byId = new Map(profile.nodes.map(n => [n.id, n]));
for (let i = 0; i < profile.samples.length; i++) { const nd = byId.get(profile.samples[i]); const k = nd.callFrame.functionName + " " + nd.callFrame.url.split("/").pop(); self.set(k, (self.get(k) || 0) + (dt[i] || 0)); }
for (const [k, t] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.log((t / 1000).toFixed(1).padStart(8), k);
const parent = new Map(); for (const nd of profile.nodes) for (const c of nd.children || []) parent.set(c, nd.id);
for (const target of ["decode", "__wbg_read_e3bea75dace70752"]) {
  const by = new Map();
  for (let i = 0; i < profile.samples.length; i++) { const nd = byId.get(profile.samples[i]); if (nd.callFrame.functionName !== target) continue;
    let p = byId.get(parent.get(nd.id)); let chain = []; for (let j = 0; j < 4 && p; j++) { chain.push(p.callFrame.functionName || "(anon)"); p = byId.get(parent.get(p.id)); }
    const k = chain.join(" < "); by.set(k, (by.get(k) || 0) + (dt[i] || 0)); }
  console.log("callers of", target); for (const [k, t] of [...by].sort((a, b) => b[1] - a[1]).slice(0, 6)) console.log((t / 1000).toFixed(1).padStart(8), k);
}
await browser.close();
