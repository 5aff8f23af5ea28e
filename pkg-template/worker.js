// The worker half of a client run off the page's main thread. `serve()` in a
// dedicated worker answers `WorkerClient.connect` (`worker-client.js`): one
// `ReplayClient` per connect, on a port of its own. The page then spends its
// main thread only on the parts of the view that changed, once per
// notification; the stream's bytes, the parsing and the fold stay here.
// Messages: `messages.d.ts` (one schema for this and the shared host).
// The glue itself, not the package entry (`index.js`): the host calls
// `init` itself and needs nothing the entry adds.
import * as replay from "./replay_client.js";
import { CALLS, changedParts, message, read, wireError } from "./messages.js";

// The `web` build loads its wasm with `init()`; the `bundler` build has none.
const ready = typeof replay.default === "function" ? replay.default() : Promise.resolve();

// Which worker this is: in every message, so a page can tell a new one.
const host = { role: "worker", instance: crypto.randomUUID() };

function attach(port, options) {
  let client;
  try {
    client = replay.ReplayClient.connect(options);
  } catch (err) {
    port.postMessage(message("failed", { host, error: wireError(err) }));
    port.close();
    return;
  }
  // The view keeps an unchanged part as the same object: only the parts
  // that changed cross, and the page keeps its copies of the others.
  let last = {};
  const post = () => {
    const view = client.view();
    const changed = changedParts(view, last);
    last = view;
    port.postMessage(message("view", { host, view: changed, diagnostics: client.diagnostics() }));
  };
  // `close()` drops this subscription with the client's other listeners.
  client.subscribe(post);
  post();
  port.onmessage = ({ data }) => {
    const msg = read(data);
    if (msg instanceof Error) {
      // A reply the page can read whatever its version: it fails its calls.
      port.postMessage(message("failed", { host, error: wireError(msg) }));
      return;
    }
    if (msg.type === "close") {
      client.close();
      port.close();
      return;
    }
    if (msg.type !== "call" || !CALLS.includes(msg.call) || !Array.isArray(msg.args)) return;
    const { id, call, args } = msg;
    // The page awaits an answer for every id: a synchronous throw answers too.
    Promise.resolve()
      .then(() => client[call](...args))
      .then(
        (value) => port.postMessage(message("reply", { host, id, value })),
        (err) => port.postMessage(message("reply", { host, id, error: wireError(err) })),
      );
  };
}

/**
 * Serves `WorkerClient.connect` calls from the page that started this
 * dedicated worker. `defaults` apply under every page's options; a
 * `getToken` function or a storage adapter can only be given here (functions
 * do not cross to a worker). Storage defaults to `"indexeddb"`: a worker has
 * no `localStorage`.
 */
export function serve(defaults = {}) {
  addEventListener("message", (event) => {
    const port = event.ports[0];
    if (!port) return;
    const msg = read(event.data);
    if (msg instanceof Error) {
      port.postMessage(message("failed", { host, error: wireError(msg) }));
      port.close();
      return;
    }
    if (msg.type !== "attach") return;
    const options = { storage: "indexeddb", ...defaults, ...msg.options };
    ready.then(
      () => attach(port, options),
      // The package's wasm could not be fetched or compiled here.
      (err) => port.postMessage(message("failed", { host, error: wireError(err, "network") })),
    );
  });
}
