// @ts-check
// The worker half of a client run off the page's main thread. `serve()` in a
// dedicated worker answers `WorkerClient.connect` (`worker-client.js`): a
// `Host` whose one page gets a `ReplayClient` per connect, on a port of its
// own. The page then spends its main thread only on the parts of the view
// that changed; the stream's bytes, the parsing and the fold stay here.
import { Host, ready } from "./host.js";

/**
 * Serves `WorkerClient.connect` calls from the page that started this
 * dedicated worker. `defaults` apply under every page's options; a
 * `getToken` or `fetch` function or a storage adapter can only be given here
 * (functions do not cross to a worker). Storage defaults to `"indexeddb"`: a worker has
 * no `localStorage`.
 * @param {Partial<import("./index.js").ConnectOptions>} [defaults]
 */
export function serve(defaults = {}) {
  const host = new Host("worker", (pageOptions) => ({ storage: "indexeddb", ...defaults, ...pageOptions }), false, ready);
  // The page transfers each client's port with its `attach`.
  addEventListener("message", ({ data, ports: [port] }) => port && host.listen(port, data));
}
