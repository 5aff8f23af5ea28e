// The page half of tests/js/worker.test.mjs: the README's "Off the main
// thread" recipe, with hooks the test reads.
import { WorkerClient } from "../pkg/web/worker-client.js";
import { ReplayError } from "../pkg/web/replay_error.js";

const startWorker = (script) => new Worker(new URL(script, import.meta.url), { type: "module" });
const worker = startWorker("./worker.js");
const out = document.getElementById("out");
// A client in `w`, on this site's server.
const connectIn = (w, options) => WorkerClient.connect(w, { baseUrl: location.origin, ...options });

window.t = {
  client: null,
  views: [],
  async connect(options) {
    const client = await connectIn(worker, options);
    this.client = client;
    this.views = [client.view()];
    client.subscribe(() => {
      const view = client.view();
      this.views.push(view);
      out.textContent = `${view.status.state} ${view.items.length} ${view.live?.text.length ?? ""}`;
    });
    return client.diagnostics().storage;
  },
  // While `live` changed: how often `items` kept its object, and how often
  // it got a new one with the same content (never, if only changes cross).
  itemsKeptWhileLiveChanged() {
    let kept = 0;
    let needlesslyNew = 0;
    for (let i = 1; i < this.views.length; i++) {
      const [a, b] = [this.views[i - 1], this.views[i]];
      if (a.live && b.live && a.live !== b.live) {
        if (a.items === b.items) kept++;
        else if (JSON.stringify(a.items) === JSON.stringify(b.items)) needlesslyNew++;
      }
    }
    return { kept, needlesslyNew };
  },
  // More clients through the same worker, kept by name.
  others: {},
  async connectOther(name, options) {
    this.others[name] = await connectIn(worker, options);
  },
  async rejects(f) {
    try {
      await f();
      return null;
    } catch (err) {
      const status = err.status === undefined ? {} : { status: err.status };
      return { isReplayError: err instanceof ReplayError, code: err.code, message: err.message, ...status };
    }
  },
  // A raw message to the worker with a port of its own: the first answer.
  askWorker(data) {
    const { port1, port2 } = new MessageChannel();
    return new Promise((resolve) => {
      port1.onmessage = ({ data }) => resolve(data);
      worker.postMessage(data, [port2]);
    });
  },
  wasmLoadedHere: () => performance.getEntriesByType("resource").some((e) => e.name.endsWith(".wasm")),
  // A worker that never started (its script is missing), or one that does
  // not call serve(): connect rejects instead of waiting forever.
  connectTo(script, options) {
    return this.rejects(() => connectIn(startWorker(script), options));
  },
  // A client in `fetch-worker.js`, whose `fetch` reports each request here.
  fetched: [],
  async connectThroughFetch(options) {
    this.seen ??= new BroadcastChannel("replay-fetch-worker");
    this.seen.onmessage = ({ data }) => this.fetched.push(data);
    this.others.fetch = await connectIn(startWorker("./fetch-worker.js"), options);
  },
  // Options with a function (which cannot be cloned to a worker).
  connectWithFunction() {
    return this.rejects(() => connectIn(worker, { sessionId: "ses_x", getToken: () => "t" }));
  },
};
out.textContent = "ready";
