// Browser figures for `cargo xtask bench`, measured in one page: the SDK
// (optimised package) against a plain-JS baseline doing the same restore.
import init, { ReplayClient } from "../pkg/web/index.js";
import { WorkerClient } from "../pkg/web/worker-client.js";
import { applyEvent, readEvents } from "./plain-follower.js";

const wasm = await init();
const baseUrl = location.origin;

function whenLive(client, cursor) {
  return new Promise((resolve) => {
    const check = () => {
      const view = client.view();
      if (view.status.state === "live" && view.cursor >= cursor) {
        off();
        resolve(view);
      }
    };
    const off = client.subscribe(check);
    check();
  });
}

// A client of this package or of an earlier build (`base`) on the page,
// told of every change at once.
const onPage = (Client) => (o) => Client.connect({ ...o, notify: "sync" });

// SDK: connect with empty storage, resolve when the whole backlog is folded
// (`tail: 0`: read forward, as the baseline does, not the newest page first).
// `connect` makes the client (a `WorkerClient` is made asynchronously).
async function sdkRestore(sessionId, head, connect = onPage(ReplayClient)) {
  const t0 = performance.now();
  const client = await connect({ baseUrl, sessionId, storage: "memory", tail: 0 });
  const view = await whenLive(client, head);
  const ms = performance.now() - t0;
  client.close();
  return { ms, items: view.items.length };
}

// Baseline: what an app would write by hand with fetch + JSON.parse and an
// equivalent fold (messages, tool cards updated in place, turn ends).
async function baselineRestore(sessionId) {
  const t0 = performance.now();
  const items = [];
  const tools = new Map();
  let cursor = 0;
  for (;;) {
    const res = await fetch(`${baseUrl}/v1/sessions/${sessionId}/replay?after_cursor=${cursor}&limit=2000`);
    const page = JSON.parse(await res.text());
    for (const e of page.history) {
      if (e.seq !== cursor + 1) continue;
      cursor = e.seq;
      const d = e.data;
      switch (e.type) {
        case "message.committed":
          items.push({ kind: "message", message_id: d.message_id, turn_id: d.turn_id, role: d.role, text: d.text });
          break;
        case "tool.started": {
          const card = { kind: "tool", call_id: d.call_id, turn_id: d.turn_id, name: d.name, status: "running", output: null };
          tools.set(d.call_id, items.length);
          items.push(card);
          break;
        }
        case "tool.completed": {
          const at = tools.get(d.call_id);
          if (at !== undefined) items[at] = { ...items[at], status: d.status, output: d.output };
          break;
        }
        case "turn.completed":
        case "turn.cancelled":
        case "turn.failed":
          items.push({ kind: "turn_end", turn_id: d.turn_id, outcome: e.type.slice(5), reason: d.reason });
          break;
      }
    }
    if (!page.has_more) break;
  }
  return { ms: performance.now() - t0, items: items.length };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// With an earlier build loaded (`hasBase`), it restores in the same rounds:
// a before/after of the restore within one run.
window.benchRestore = async (sessionId, head, rounds) => {
  const sdk = [];
  const base = [];
  const earlier = [];
  let items = {};
  for (let i = 0; i < rounds; i++) {
    const a = await sdkRestore(sessionId, head);
    const b = await baselineRestore(sessionId);
    sdk.push(a.ms);
    base.push(b.ms);
    items = { sdk: a.items, baseline: b.items };
    if (baseClient) {
      const c = await sdkRestore(sessionId, head, onPage(baseClient));
      earlier.push(c.ms);
      items.base = c.items;
    }
  }
  const baseMs = baseClient ? median(earlier) : null;
  return { sdkMs: median(sdk), baselineMs: median(base), baseMs, items };
};

// `/bench/?worker`: the SDK's worker started as the page loads, as an app
// would start it (its wasm compiles there, not on the page).
const startWorker = () => new Worker(new URL("./sdk-worker.js", import.meta.url), { type: "module" });
const coldWorker = location.search === "?worker" ? startWorker() : null;

// One restore of `which` (sdk, sdkWorker, baseline). As the first work of a
// fresh page, the wasm still runs its baseline (Liftoff) code, as on an
// app's first load; `BENCH_PROFILE` also profiles one on the warm page.
window.benchOneRestore = async (which, sessionId, head) => {
  if (which === "sdk") return (await sdkRestore(sessionId, head)).ms;
  // Through `WorkerClient`, told as the worker's client notifies.
  if (which === "sdkWorker") return (await sdkRestore(sessionId, head, (o) => WorkerClient.connect(coldWorker, o))).ms;
  return (await baselineRestore(sessionId)).ms;
};

// --- Live, side by side with a plain-JS follower ---------------------------
// Both followers "render" the same way, once per animation frame: the
// answer's text length into the page, as an app would set the text.
const shown = document.getElementById("out");

// Delta arrival to render: while on, each body chunk stamps the first
// chunk not yet rendered, and each render records the time since it (the
// paint follows the animation frame's callbacks). The plain-JS follower
// reads its body (read() is stamped); the SDK pipes it into a sink
// (pipeTo() is given a stamping stage first, which costs the SDK a
// little time in the latency run only).
let unrendered = null;
const latencies = [];
const stamp = () => {
  if (unrendered === null) unrendered = performance.now();
};
const plainRead = ReadableStreamDefaultReader.prototype.read;
function stampedRead() {
  return plainRead.call(this).then((r) => {
    if (!r.done) stamp();
    return r;
  });
}
const plainPipeTo = ReadableStream.prototype.pipeTo;
function stampedPipeTo(dest, options) {
  const stage = new TransformStream({
    transform(chunk, controller) {
      stamp();
      controller.enqueue(chunk);
    },
  });
  return plainPipeTo.call(this.pipeThrough(stage), dest, options);
}
window.latencyProbe = (on) => {
  ReadableStreamDefaultReader.prototype.read = on ? stampedRead : plainRead;
  ReadableStream.prototype.pipeTo = on ? stampedPipeTo : plainPipeTo;
  unrendered = null;
  latencies.length = 0;
};
window.latencyStats = () => {
  const xs = [...latencies].sort((a, b) => a - b);
  return { n: xs.length, p50: xs[Math.floor(xs.length / 2)] ?? 0, p95: xs[Math.floor(xs.length * 0.95)] ?? 0 };
};
function rendered() {
  if (unrendered !== null) {
    latencies.push(performance.now() - unrendered);
    unrendered = null;
  }
}
let sdkLive = null;
let jsLive = null;
let baseLive = null;
let workerLive = null;
let sdkWorkerLive = null;
let sdkSharedLive = null;
let baseSharedLive = null;
const followers = () => ({
  sdk: sdkLive,
  js: jsLive,
  base: baseLive,
  worker: workerLive,
  sdkWorker: sdkWorkerLive,
  sdkShared: sdkSharedLive,
  baseShared: baseSharedLive,
});

// SDK follower: a subscriber that reads view() once per notification.
// `connect` makes the client (this package's on the page or in a worker, or
// an earlier build's), as for `sdkRestore`.
async function follow(connect, sessionId, head) {
  const client = await connect({ baseUrl, sessionId, storage: "memory" });
  await whenLive(client, head);
  // Notifications per frame, counted by the frame's timestamp: a loop of
  // our own would add a requestAnimationFrame per frame to the SDK's time.
  let frameTime = -1;
  let inFrame = 0;
  let maxPerFrame = 0;
  let notifications = 0;
  let cursor = 0;
  client.subscribe(() => {
    const t = document.timeline.currentTime;
    inFrame = t === frameTime ? inFrame + 1 : 1;
    frameTime = t;
    maxPerFrame = Math.max(maxPerFrame, inFrame);
    notifications++;
    const v = client.view();
    cursor = v.cursor;
    shown.textContent = v.live ? v.live.text.length : v.items.length;
    rendered();
  });
  const live = {
    stop: () => client.close(),
    // Polled while waiting: what the subscriber saw, no calls into the SDK.
    cursor: () => cursor,
    stats: () => ({
      maxPerFrame,
      notifications,
      events: client.diagnostics().counters.events,
      cursor: client.view().cursor,
    }),
  };
  return live;
}

window.sdkFollow = async (sessionId, head) => {
  sdkLive = await follow((o) => ReplayClient.connect(o), sessionId, head);
};

// An earlier build of the package served at ../pkg-base/ (xtask: BENCH_BASE_PKG),
// followed in the same page for a before/after within one run.
let baseClient = null;
window.hasBase = async () => {
  try {
    const base = await import("../pkg-base/web/index.js");
    await base.default();
    baseClient = base.ReplayClient;
    return true;
  } catch {
    return false;
  }
};
window.baseFollow = async (sessionId, head) => {
  baseLive = await follow((o) => baseClient.connect(o), sessionId, head);
};

// Plain JS, as an app developer would write it: fetch, TextDecoderStream,
// split on blank lines, JSON.parse, append deltas, one render per frame.
// Renders `st` once per animation frame, however often it is called.
function frameRenderer(st) {
  let queued = false;
  const render = () => {
    queued = false;
    st.frames++;
    shown.textContent = st.text ? st.text.length : st.items.length;
    rendered();
  };
  return () => {
    if (!queued) {
      queued = true;
      requestAnimationFrame(render);
    }
  };
}

const followerState = (head) => ({ cursor: head, events: 0, text: "", items: [], frames: 0 });
const followerLive = (st, stop) => ({
  stop,
  cursor: () => st.cursor,
  stats: () => ({ events: st.events, cursor: st.cursor, frames: st.frames }),
});

window.jsFollow = async (sessionId, head) => {
  const ctl = new AbortController();
  const res = await fetch(`${baseUrl}/v1/sessions/${sessionId}/events?after_seq=${head}`, {
    headers: { Accept: "text/event-stream" },
    signal: ctl.signal,
  });
  const st = followerState(head);
  const render = frameRenderer(st);
  readEvents(res, (e) => applyEvent(st, e) && render()).catch(() => {
    // aborted
  });
  jsLive = followerLive(st, () => ctl.abort());
};

// The same plain-JS follower with its stream read and parsed in a worker
// (`follow-worker.js`): the page applies what the worker posts, at most one
// post per frame, and renders once per frame as the others do.
window.workerFollow = async (sessionId, head) => {
  const worker = new Worker(new URL("./follow-worker.js", import.meta.url), { type: "module" });
  const st = followerState(head);
  const render = frameRenderer(st);
  worker.onmessage = ({ data: { events, cursor, text, items } }) => {
    st.events += events;
    if (cursor) st.cursor = cursor;
    if (items.length) {
      st.items.push(...items);
      st.text = "";
    }
    st.text += text;
    render();
  };
  worker.postMessage({ url: `${baseUrl}/v1/sessions/${sessionId}/events?after_seq=${head}` });
  workerLive = followerLive(st, () => worker.terminate());
};

// The SDK in a worker (`sdk-worker.js` calls the package's `serve()`), the
// page following it through `WorkerClient` with the same subscriber as above.
window.sdkWorkerFollow = async (sessionId, head) => {
  const worker = startWorker();
  const live = await follow((o) => WorkerClient.connect(worker, o), sessionId, head);
  sdkWorkerLive = { ...live, stop: () => (live.stop(), worker.terminate()) };
};

// The SDK in the shared host (`sdk-shared.js` calls the package's
// `serveShared()` in a SharedWorker), the page following through
// `SharedClient` with the same subscriber. The host's storage is its own
// (memory); `SharedClient` is imported here only, so the other parts' page
// heap stays as it was.
// `pkg`: the package's folder (`pkg-base` for an earlier build), `script`
// and `name` its SharedWorker's.
const sharedFollow = (pkg, script, name) => async (sessionId, head) => {
  const { SharedClient } = await import(`../${pkg}/web/shared-client.js`);
  const startShared = () => new SharedWorker(new URL(script, import.meta.url), { type: "module", name });
  return follow(async ({ storage: _, ...options }) => {
    const client = await SharedClient.connect(startShared, options);
    // A fallback to the page would measure the on-page SDK under this name.
    const role = client.diagnostics()?.host?.role;
    if (role !== "shared") throw new Error(`the client runs in "${role}", not the shared host`);
    return client;
  }, sessionId, head);
};
const sdkShared = sharedFollow("pkg", "./sdk-shared.js", "bench");
const baseShared = sharedFollow("pkg-base", "./sdk-shared-base.js", "bench-base");
window.sdkSharedFollow = async (sessionId, head) => {
  sdkSharedLive = await sdkShared(sessionId, head);
};
// The same through an earlier build's shared host (BENCH_BASE_PKG).
window.baseSharedFollow = async (sessionId, head) => {
  baseSharedLive = await baseShared(sessionId, head);
};

window.liveStats = (which) => followers()[which].stats();
window.liveCursor = (which) => followers()[which].cursor();
window.liveStop = (which) => followers()[which].stop();

window.wasmMemoryBytes = () => wasm.memory.buffer.byteLength;
// Navigation start to the package loaded (wasm compiled and instantiated).
window.readyAt = performance.now();
document.getElementById("out").textContent = "ready";
