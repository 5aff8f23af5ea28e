// Browser figures for `cargo xtask bench`, measured in one page: the SDK
// (optimised package) against a plain-JS baseline doing the same restore.
import init, { ReplayClient } from "../pkg/web/index.js";

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

// SDK: connect with empty storage, resolve when the whole backlog is folded.
async function sdkRestore(sessionId, head) {
  const t0 = performance.now();
  const client = ReplayClient.connect({ baseUrl, sessionId, storage: "memory", notify: "sync" });
  const view = await whenLive(client, head);
  const ms = performance.now() - t0;
  const items = view.items.length;
  client.close();
  return { ms, items };
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

window.benchRestore = async (sessionId, head, rounds) => {
  const sdk = [];
  const base = [];
  let items = {};
  for (let i = 0; i < rounds; i++) {
    const a = await sdkRestore(sessionId, head);
    const b = await baselineRestore(sessionId);
    sdk.push(a.ms);
    base.push(b.ms);
    items = { sdk: a.items, baseline: b.items };
  }
  return { sdkMs: median(sdk), baselineMs: median(base), items };
};

// One restore as the first work of a fresh page: the wasm still runs its
// baseline (Liftoff) code, as on an app's first load.
window.benchFirstRestore = async (which, sessionId, head) =>
  (which === "sdk" ? await sdkRestore(sessionId, head) : await baselineRestore(sessionId)).ms;

// Follows a session while a long turn streams; counts notifications per frame.
window.benchLive = async (sessionId, head) => {
  const client = ReplayClient.connect({ baseUrl, sessionId, storage: "memory" });
  await whenLive(client, head);
  let inFrame = 0;
  let maxPerFrame = 0;
  let notifications = 0;
  const frame = () => {
    maxPerFrame = Math.max(maxPerFrame, inFrame);
    inFrame = 0;
    if (!window.benchLiveDone) requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  client.subscribe(() => {
    inFrame++;
    notifications++;
    client.view();
  });
  window.benchLiveClient = client;
  window.benchLiveStats = () => ({
    maxPerFrame: Math.max(maxPerFrame, inFrame),
    notifications,
    events: client.diagnostics().counters.events,
    cursor: client.view().cursor,
    live: client.view().live !== null,
  });
};

window.wasmMemoryBytes = () => wasm.memory.buffer.byteLength;
document.getElementById("out").textContent = "ready";
