// The worker half of a client run off the page's main thread. `serve()` in a
// dedicated worker answers `WorkerClient.connect` (`worker-client.js`): one
// `ReplayClient` per connect, on a port of its own. The page then spends its
// main thread only on the parts of the view that changed, once per
// notification; the stream's bytes, the parsing and the fold stay here.
import * as replay from "./index.js";

// The `web` build loads its wasm with `init()`; the `bundler` build has none.
const ready = typeof replay.default === "function" ? replay.default() : Promise.resolve();

// What a page may call: the client's writes and its transcript.
const CALLS = ["send", "answer", "cancel", "transcript"];

// A `ReplayError`'s code, or `fallback` for anything else thrown.
const errorInfo = (err, fallback = "invalid_options") => ({
  code: typeof err?.code === "string" ? err.code : fallback,
  message: String(err?.message ?? err),
  status: typeof err?.status === "number" ? err.status : undefined,
});

function attach(port, options) {
  let client;
  try {
    client = replay.ReplayClient.connect(options);
  } catch (err) {
    port.postMessage({ failed: errorInfo(err) });
    port.close();
    return;
  }
  // The view keeps an unchanged part as the same object: only the parts
  // that changed cross, and the page keeps its copies of the others.
  let last = {};
  const post = () => {
    const view = client.view();
    const changed = {};
    for (const key of Object.keys(view)) if (view[key] !== last[key]) changed[key] = view[key];
    last = view;
    port.postMessage({ view: changed, diagnostics: client.diagnostics() });
  };
  // `close()` drops this subscription with the client's other listeners.
  client.subscribe(post);
  post();
  port.onmessage = ({ data }) => {
    if (data?.call === "close") {
      client.close();
      port.close();
      return;
    }
    const { id, call, args } = data ?? {};
    if (!CALLS.includes(call) || !Array.isArray(args)) return;
    // The page awaits an answer for every id: a synchronous throw answers too.
    Promise.resolve()
      .then(() => client[call](...args))
      .then(
        (value) => port.postMessage({ id, value }),
        (err) => port.postMessage({ id, error: errorInfo(err) }),
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
    if (event.data?.type !== "replay-client.connect" || !event.ports[0]) return;
    const port = event.ports[0];
    const options = { storage: "indexeddb", ...defaults, ...event.data.options };
    ready.then(
      () => attach(port, options),
      // The package's wasm could not be fetched or compiled here.
      (err) => port.postMessage({ failed: errorInfo(err, "network") }),
    );
  });
}
