// @ts-check
// The shared host: a SharedWorker that runs every tab's client (`Host`), so
// that a browser holds one multiplexed stream per runtime however many tabs
// and scopes it shows (clients connected with `multiplex`). Tabs run the
// page half (`shared-client.js`, no wasm).
//
// Who goes away, and how each side learns it (docs/architecture.md):
// - a tab: it holds a Web Lock of its own name while it wants its client;
//   this worker requests that name, so the grant means the tab closed,
//   crashed or navigated away, and its clients are detached;
// - this worker: it holds `replay-host:<instance>` for its lifetime; tabs
//   request that name, so the grant means this worker is gone, and they
//   start a new one, which restores from storage.
import { Host, instance, ready } from "./host.js";

/** @typedef {import("./index.js").ConnectOptions} ConnectOptions */

// What a tab may not set: the host's credentials, fetch and storage are the
// worker script's alone, so a tab cannot widen what the host sends, or
// where (and the tabs following one log share its one client).
const HOST_ONLY = ["getToken", "headers", "credentials", "fetch", "storage"];

/** @param {string} text */
const invalid = (text) => Object.assign(new Error(text), { code: "invalid_options" });

/**
 * Serves `SharedClient.connect` from every tab of this origin, in a
 * SharedWorker script the app owns. `defaults` apply under every tab's
 * options; the credentials (`getToken`, `headers`) and the storage are
 * given here only, as are `credentials` and `fetch` (a tab's attach naming
 * them is refused), and with a
 * `baseUrl` here a tab may follow no other. Storage defaults to
 * `"indexeddb"`. Resolves once this worker serves; returns the host's
 * counts for devtools (`scopes`, `attachments`).
 * @param {Partial<ConnectOptions>} [defaults]
 */
export async function serveShared(defaults = {}) {
  // This worker's life lock, held before any tab learns the instance id,
  // so a tab's request for it is granted only once this worker is gone.
  const held = /** @type {Promise<unknown>} */ (new Promise((held) => navigator.locks.request(`replay-host:${instance}`, () => (held(null), new Promise(() => {})))));
  const serving = held.then(() => ready);
  /** @param {any} pageOptions */
  const options = (pageOptions) => {
    for (const name of HOST_ONLY) {
      if (pageOptions?.[name] !== undefined) throw invalid(`"${name}" is the host's: give it to serveShared() in the worker script`);
    }
    const { baseUrl } = defaults;
    if (baseUrl && pageOptions?.baseUrl && pageOptions.baseUrl !== baseUrl) {
      throw invalid(`this host serves ${baseUrl} only, not ${pageOptions.baseUrl}`);
    }
    // Each followed log's live stream rides the worker's one multiplexed
    // stream for its base URL; its pages and writes are its own requests.
    return { storage: "indexeddb", ...defaults, ...pageOptions, multiplex: true };
  };
  const host = new Host("shared", options, true, serving);
  addEventListener("connect", (event) => host.listen(/** @type {MessageEvent} */ (event).ports[0]));
  await serving.catch(() => {});
  return {
    get counts() {
      return host.counts;
    },
  };
}
