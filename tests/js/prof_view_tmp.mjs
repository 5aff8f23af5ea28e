import { chromium } from "playwright-core";
const url = process.env.BENCH_URL;
const src = (await import("fs")).readFileSync("bench.mjs", "utf8");
const seedText = src.slice(src.indexOf("async function api"), src.indexOf("const browser"));
const seedBacklog = new Function("url", "EVENTS", seedText + "; return seedBacklog;")(url, 10000);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] });
const page = await browser.newPage();
await page.goto(url + "/bench/");
await page.waitForFunction(() => document.getElementById("out").textContent === "ready");
const { id, head } = await seedBacklog();
const r = await page.evaluate(async ([s, h]) => {
  const { ReplayClient } = await import("../pkg/web/index.js");
  const out = [];
  for (let i = 0; i < 6; i++) {
    const t0 = performance.now();
    const c = ReplayClient.connect({ baseUrl: location.origin, sessionId: s, storage: "memory", notify: "sync" });
    const res = await new Promise((resolve) => {
      const off = c.subscribe(() => {
        const t1 = performance.now();
        const v = c.view();
        const t2 = performance.now();
        if (v.status.state === "live" && v.cursor >= h) { off(); resolve({ notified: t1 - t0, view: t2 - t1, items: v.items.length }); }
      });
    });
    c.close();
    out.push(res);
  }
  return out;
}, [id, head]);
console.log(r.map(x => `notified ${x.notified.toFixed(1)} view ${x.view.toFixed(1)} items ${x.items}`).join("\n"));
await browser.close();
