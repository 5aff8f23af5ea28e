// The proxy part of bench.mjs (`BENCH_ONLY=proxy`, `cargo xtask bench
// --proxy`): the clients behind nginx compressing event streams and ignoring
// `X-Accel-Buffering: no` (xtask/src/nginx.rs), where the stream is muted and
// the clients follow by polling. BENCH_PROXY_URL is nginx in front of the
// bench's server (the pages load through it: one origin), BENCH_PROXY_DIR its
// prefix (`access.log`: `$msec $status $request_uri`, written as a request
// ends). Prints `name value` lines.
// - Last words: a fresh page (a new browser context: no SharedWorker, no
//   cache) on a new session, a `/long` turn posted 1.5 s after its load (the
//   first turn after a page load: the stream has not proved itself yet);
//   when the server committed the answer (the transcript read every 25 ms)
//   to the first view that shows its last characters (live text or the
//   committed message; a view before the commit counts as 0). Shared host
//   and on-page client alternating, PROXY_ROUNDS page loads each: median
//   and p95 (nearest rank: of 5, the slowest).
// - Idle requests: three tabs of the shared host on one idle session and,
//   beside them in another browser context, one on-page tab on another;
//   once every tab polls and the idle pace has settled, the requests that
//   name each session (the polls, and the stream probes: the multiplexed
//   stream names its subscriptions) during IDLE_WINDOW_MS, one whole probe
//   cycle (a muted probe's 10 s connect deadline, then the 3-minute
//   re-probe period: its probe is one of the idle requests), per minute.
import { readFileSync } from "node:fs";
import { join } from "node:path";

const PROXY_ROUNDS = Number(process.env.BENCH_PROXY_ROUNDS ?? 5);
/** Characters of the answer: a few seconds at the bench server's pace. */
const PROXY_LONG = Number(process.env.BENCH_PROXY_LONG ?? 8000);
/** When the turn is posted after the page's load. */
const POST_AFTER_MS = 1500;
/** The idle requests are counted this long: one probe cycle. */
const IDLE_WINDOW_MS = Number(process.env.BENCH_PROXY_IDLE_MS ?? 190_000);
/** Waited after every tab polls: the idle pace doubles up to 10 s. */
const IDLE_SETTLE_MS = 30_000;
const TAIL = 40;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The access log's requests: `{ at (ms), status, uri }`. */
function requests(dir) {
  return readFileSync(join(dir, "access.log"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [msec, status, uri] = line.split(" ");
      return { at: Number(msec) * 1000, status: Number(status), uri };
    });
}

async function until(what, predicate, timeoutMs, describe = async () => "") {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`proxy: timed out waiting for ${what}${await describe()}`);
    await sleep(25);
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
/** Nearest rank. */
const p95 = (xs) => [...xs].sort((a, b) => a - b)[Math.ceil(0.95 * xs.length) - 1];

/** A tab of the proxy page in `context`, following `sessionId` through the proxy. */
async function openProxyTab(context, proxy, host, sessionId) {
  const tab = await context.newPage();
  await tab.goto(`${proxy}/bench/proxy-tab.html?host=${host}&session=${sessionId}`);
  return tab;
}

const transportOf = (tab) =>
  tab.evaluate(() => {
    if (window.connectError) throw new Error(window.connectError);
    return window.client?.diagnostics().transport ?? null;
  });

/** One page load and its first turn: ms from the commit to the last words shown, and the live text's growths. */
async function lastWords(browser, api, proxy, host) {
  const { session_id: id } = await api("POST", "/v1/sessions", { title: `proxy ${host}` });
  const context = await browser.newContext();
  try {
    const tab = await openProxyTab(context, proxy, host, id);
    await sleep(POST_AFTER_MS);
    await api("POST", `/v1/sessions/${id}/messages`, { message_id: "proxy1", text: `/long ${PROXY_LONG}` });
    const { committedAt, text } = await until(
      "the server to commit the answer",
      async () => {
        const { items } = await api("GET", `/v1/sessions/${id}/transcript`);
        const answer = items.find((item) => item.kind === "message" && item.role === "assistant");
        return answer ? { committedAt: Date.now(), text: answer.text } : null;
      },
      120_000,
    );
    const tail = text.slice(-TAIL);
    const showsTail = (v) => (v.answerTail?.endsWith(tail) ?? false) || (v.liveTail?.endsWith(tail) ?? false);
    const views = await until(
      `the ${host} page to show the answer's last words`,
      async () => {
        const views = await tab.evaluate(() => {
          if (window.connectError) throw new Error(window.connectError);
          return window.views;
        });
        return views.some(showsTail) ? views : null;
      },
      60_000,
    );
    const shownAt = views.find(showsTail).at;
    const ends = views.map((v) => v.liveEnd).filter((n) => n !== null);
    const growths = ends.filter((n, i) => i > 0 && n > ends[i - 1]).length;
    const transport = await transportOf(tab);
    return { late: shownAt - committedAt, growths, transport, views: views.length };
  } finally {
    await context.close();
  }
}

/** Requests per minute of a window's. */
const perMinute = (list) => (list.length * 60_000) / IDLE_WINDOW_MS;

async function idleRequests(browser, api, proxy, dir) {
  const shared = (await api("POST", "/v1/sessions", { title: "proxy idle, shared" })).session_id;
  const page = (await api("POST", "/v1/sessions", { title: "proxy idle, page" })).session_id;
  const sharedContext = await browser.newContext();
  const pageContext = await browser.newContext();
  try {
    const tabs = [];
    for (let i = 0; i < 3; i++) tabs.push(await openProxyTab(sharedContext, proxy, "shared", shared));
    tabs.push(await openProxyTab(pageContext, proxy, "page", page));
    await until(
      "every tab to follow by polling",
      async () => {
        for (const tab of tabs) if ((await transportOf(tab)) !== "polling") return false;
        return true;
      },
      120_000,
      async () => `: ${JSON.stringify(await Promise.all(tabs.map(transportOf)))}`,
    );
    await sleep(IDLE_SETTLE_MS);
    const from = Date.now();
    await sleep(IDLE_WINDOW_MS);
    const to = Date.now();
    const runtime = requests(dir).filter((r) => r.at >= from && r.at < to && r.uri.startsWith("/v1/"));
    const of = (id) => runtime.filter((r) => r.uri.includes(id));
    const other = runtime.filter((r) => !r.uri.includes(shared) && !r.uri.includes(page));
    const show = (list) => list.map((r) => `${((r.at - from) / 1000).toFixed(1)}s ${r.status} ${r.uri}`).join("; ");
    console.error(`proxy idle, shared host (3 tabs), ${of(shared).length} requests in ${IDLE_WINDOW_MS} ms: ${show(of(shared))}`);
    console.error(`proxy idle, on-page, ${of(page).length} requests: ${show(of(page))}`);
    if (other.length) console.error(`proxy idle, requests naming neither session: ${show(other)}`);
    for (const tab of tabs) {
      const transport = await transportOf(tab);
      if (transport !== "polling") throw new Error(`an idle tab left polling (${transport}) during the window`);
    }
    return { shared: perMinute(of(shared)), page: perMinute(of(page)), other: other.length };
  } finally {
    await sharedContext.close();
    await pageContext.close();
  }
}

/** The proxy part: `api` calls the runtime directly (not through the proxy). */
export async function proxyBench(browser, api) {
  const proxy = process.env.BENCH_PROXY_URL;
  const dir = process.env.BENCH_PROXY_DIR;
  if (!proxy || !dir) throw new Error("BENCH_PROXY_URL and BENCH_PROXY_DIR are set by cargo xtask bench");
  const hosts = ["shared", "page"];
  const late = { shared: [], page: [] };
  const growths = { shared: [], page: [] };
  for (let round = 0; round < PROXY_ROUNDS; round++) {
    // Alternating, the first host turning each round: a change of the
    // machine's load weighs on both.
    for (const host of round % 2 ? [...hosts].reverse() : hosts) {
      const r = await lastWords(browser, api, proxy, host);
      console.error(
        `proxy, round ${round + 1}, ${host}: last words shown ${r.late} ms after the commit, the live text grew ${r.growths} times in ${r.views} views, transport ${r.transport}`,
      );
      late[host].push(Math.max(0, r.late));
      growths[host].push(r.growths);
    }
  }
  for (const host of hosts) {
    console.log(`browser_proxy_${host}_last_words_p50_ms ${median(late[host]).toFixed(1)}`);
    console.log(`browser_proxy_${host}_last_words_p95_ms ${p95(late[host]).toFixed(1)}`);
    console.log(`browser_proxy_${host}_live_growths_min ${Math.min(...growths[host])}`);
  }
  const idle = await idleRequests(browser, api, proxy, dir);
  console.log(`browser_proxy_shared_idle_requests_per_min ${idle.shared.toFixed(2)}`);
  console.log(`browser_proxy_page_idle_requests_per_min ${idle.page.toFixed(2)}`);
}
