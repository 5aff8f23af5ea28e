// One tab of an app that shows one session, for the shared-host figures of
// bench.mjs. The query says which session (`session`, `head`: its last
// seq) and who runs the client: `host=shared` through the shared host
// (`SharedClient`; this page loads no wasm), `host=page` on this page
// (`ReplayClient`, as `/?page` in the demo). Each loads only its own half.
// `window.paintedAt`: navigation start to the animation frame that first
// shows the whole session (live, at `head`); with `newest`, the first that
// shows its newest message (at `head`, live or not: a long session's first
// visit, which reads the newest page first); with `messages=<n>`, the first
// that shows its n messages, live or not (a reload's paint), and
// `host=plain` is a hand-written page that fetches the replay pages and
// renders them.
// The paint is the frame that first shows the view. The SDK calls its
// subscribers from an animation frame's callback, and what a subscriber
// writes there is painted by that very frame; text written by any other
// task, as the hand-written page's, by the next frame. `inFrame` is true
// while a frame's callback runs (requestAnimationFrame wrapped before any
// client starts).
let inFrame = false;
const nextFrame = globalThis.requestAnimationFrame.bind(globalThis);
globalThis.requestAnimationFrame = (f) =>
  nextFrame((t) => {
    inFrame = true;
    try {
      f(t);
    } finally {
      inFrame = false;
    }
  });
const query = new URLSearchParams(location.search);
const sessionId = query.get("session");
const head = Number(query.get("head"));
const messages = query.has("messages") ? Number(query.get("messages")) : null;
const baseUrl = location.origin;
// `tail=<n>`: a first visit reads the newest page first (the clients'
// `tail` option); the hand-written page reads forward either way.
const tail = query.has("tail") ? { tail: Number(query.get("tail")) } : {};
const out = document.getElementById("out");
// Navigation start to this module running, to the client's half imported,
// and to the client's first view.
window.marks = { module: performance.now() };

// `storage=<kind>`: the host's storage (else in memory, as every bench client).
const hostScript = `./sdk-shared.js${query.has("storage") ? `?storage=${query.get("storage")}` : ""}`;
// A page may start its worker itself (tab-shared.html: the bundled one).
const workerUrl = window.benchWorker ?? new URL(hostScript, import.meta.url);
const startShared = () => new SharedWorker(workerUrl, { type: "module", name: "bench" });

async function connect() {
  if (query.get("host") === "shared") {
    const { SharedClient } = await import("../pkg/web/shared-client.js");
    window.marks.imported = performance.now();
    const client = await SharedClient.connect(startShared, { baseUrl, sessionId, ...tail });
    // A fallback to the page would measure the other mode under this name.
    const role = client.diagnostics()?.host?.role;
    if (role !== "shared") throw new Error(`the client runs in "${role}", not the shared host`);
    return client;
  }
  const { default: init, ReplayClient, prefetch } = await import("../pkg/web/index.js");
  window.marks.imported = performance.now();
  const options = { baseUrl, sessionId, storage: query.get("storage") ?? "memory", ...tail };
  // As the README's short start: the first page asked for while the wasm
  // compiles (the client takes it).
  prefetch(options);
  const wasm = await init();
  window.wasmMemoryBytes = () => wasm.memory.buffer.byteLength;
  return ReplayClient.connect(options);
}

// What a hand-written page does: every replay page, its messages rendered.
async function plainPage() {
  const items = [];
  for (let cursor = 0, more = true; more; ) {
    const res = await fetch(`${baseUrl}/v1/sessions/${sessionId}/replay?after_cursor=${cursor}&limit=2000`);
    const page = await res.json();
    for (const e of page.history) {
      cursor = e.seq;
      if (e.type === "message.committed") items.push({ kind: "message", text: e.data.text });
    }
    more = page.has_more;
  }
  return { items };
}

const newest = query.has("newest");
const shown = (view) =>
  messages !== null
    ? view?.items.filter((item) => item.kind === "message").length >= messages
    : view?.cursor >= head && (newest || view.status.state === "live");

// Shows the view's item count, as an app's subscriber writes its DOM, and
// marks the paint: the frame running now when written from a frame's
// callback, else the next one. `nextFrameAt`: the next frame's start in
// either case, a frame later than `paintedAt` for a view written from a
// frame's callback (the link part prints both).
function show(view) {
  out.textContent = view.items.length;
  const painted = () => {
    // When the page's own HTML had arrived: a reload's floor, the same for
    // every page (its revalidation).
    window.htmlAt = performance.getEntriesByType("navigation")[0]?.responseEnd;
    window.paintedAt = performance.now();
  };
  if (inFrame) painted();
  else requestAnimationFrame(painted);
  requestAnimationFrame(() => (window.nextFrameAt = performance.now()));
}

// Resolves once the client's view is shown (written by its subscriber).
function whenLive(client) {
  return new Promise((resolve) => {
    const check = () => {
      const view = client.view();
      if (shown(view)) {
        off();
        show(view);
        resolve(view);
      }
    };
    const off = client.subscribe(check);
    check();
  });
}

try {
  const client = query.get("host") === "plain" ? null : await connect();
  window.marks.view = performance.now();
  if (client) await whenLive(client);
  else show(await plainPage());
  window.benchClient = client;
} catch (err) {
  window.paintError = String(err?.stack ?? err);
}
