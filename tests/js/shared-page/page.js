// The page half of tests/js/shared.test.mjs: the README's "One connection
// per browser" recipe, with hooks the test reads. `?noshared` removes
// SharedWorker from this page's global first; `?headers` starts a worker
// whose requests carry a header the page's do not.
import { SharedClient } from "../pkg/web/shared-client.js";
import { ReplayError } from "../pkg/web/replay_error.js";

const query = new URLSearchParams(location.search);
if (query.has("noshared")) delete globalThis.SharedWorker;
const out = document.getElementById("out");
const workerUrl = new URL(`./shared-worker.js${query.has("headers") ? "?headers" : ""}`, import.meta.url);
const startWorker = () => new SharedWorker(workerUrl, { type: "module", name: "replay" });

window.t = {
  client: null,
  // Every view this tab was given, and when it was painted first.
  views: [],
  // When each of `views` came (Date.now()).
  viewTimes: [],
  async connect(options) {
    const client = await SharedClient.connect(startWorker, { baseUrl: location.origin, ...options });
    this.client = client;
    this.views = [client.view()];
    this.viewTimes = [Date.now()];
    client.subscribe(() => {
      const view = client.view();
      this.views.push(view);
      this.viewTimes.push(Date.now());
      out.textContent = `${view.status.state} ${view.items.length}`;
    });
    return client.diagnostics().host;
  },
  // What the test compares with the server.
  state() {
    const view = this.client.view();
    return {
      state: view.status.state,
      cursor: view.cursor,
      items: view.items,
      live: view.live,
      session: view.session,
      extras: view.extras,
      host: this.client.diagnostics().host,
    };
  },
  async rejects(f) {
    try {
      await f();
      return null;
    } catch (err) {
      return { isReplayError: err instanceof ReplayError, code: err.code, message: err.message };
    }
  },
  // A raw message to the shared worker on a port of its own: its answer.
  ask(data) {
    const worker = startWorker();
    return new Promise((resolve) => {
      worker.port.onmessage = ({ data }) => {
        worker.port.close();
        resolve(data);
      };
      worker.port.postMessage(data);
    });
  },
  // The shared worker's unhandled rejections (its probe, shared-worker.js).
  rejections: () => probe("rejections"),
  // Fires `offline` then `online` in the shared worker (its own global,
  // not the tab's).
  online: () => probe("online"),
  wasmLoadedHere: () => performance.getEntriesByType("resource").some((e) => e.name.endsWith(".wasm")),
  // What this page and the shared worker fetched (resource timing, URLs).
  pageRequests: () => performance.getEntriesByType("resource").map((e) => e.name),
  workerRequests: () => probe("requests"),
};

// A probe of the shared worker (shared-worker.js) on a port of its own:
// its answer's field of the probe's name. The host refuses the unversioned
// message on the same port; that answer has no such field.
function probe(name) {
  const worker = startWorker();
  return new Promise((resolve) => {
    worker.port.onmessage = ({ data }) => {
      if (data?.[name] === undefined) return;
      worker.port.close();
      resolve(data[name]);
    };
    worker.port.postMessage({ probe: name });
  });
}
out.textContent = "ready";
