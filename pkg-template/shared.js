// The shared host: a SharedWorker that runs every tab's client, so that a
// browser holds one multiplexed stream per runtime however many tabs and
// scopes it shows (clients connected with `multiplex`). Tabs run the page half
// (`shared-client.js`, no wasm) and talk to it in the one schema of
// `messages.d.ts`.
//
// Who goes away, and how each side learns it (docs/architecture.md):
// - a tab: it holds a Web Lock of its own name while it wants its client;
//   this worker requests that name, so the grant means the tab closed,
//   crashed or navigated away, and its clients are detached;
// - this worker: it holds `replay-host:<instance>` for its lifetime; tabs
//   request that name, so the grant means this worker is gone, and they
//   start a new one, which restores from storage.
// The glue itself, not the package entry (`index.js`): the host calls
// `init` itself and needs nothing the entry adds.
import * as replay from "./replay_client.js";
import { CALLS, changedParts, message, read, targetKey, wireError } from "./messages.js";

// The `web` build loads its wasm with `init()`; the `bundler` build has none.
const ready = typeof replay.default === "function" ? replay.default() : Promise.resolve();
const instance = crypto.randomUUID();

// The host's notification pacing where it runs no frames (see follow).
const FRAME_MS = 16;

// What a tab may not set: the host's credentials and storage are the worker
// script's alone, so a tab cannot widen what the host sends, or where.
const HOST_ONLY = ["getToken", "headers", "storage"];

/**
 * One followed scope: a `ReplayClient` whose live stream rides the worker's
 * one multiplexed stream for its base URL (`multiplex`); its pages and
 * writes are its own requests.
 */
function follow(options) {
  // A SharedWorker runs no animation frames: "frame" pacing would tell the
  // tabs at a 0 ms timer, a post to every tab per stream chunk (measured: ~1
  // notification per event, docs/benchmarks.md "Issue 24"). Paced by time
  // instead, at most once per frame's worth, unless the tab chose.
  const notify = options.notify ?? (typeof requestAnimationFrame === "function" ? "frame" : FRAME_MS);
  return replay.ReplayClient.connect({ ...options, notify, multiplex: true });
}

/** The scopes followed, each with the attachments (one per tab's client) that share it. */
class Host {
  #defaults;
  #followed = new Map();
  #tabs = new Map();

  constructor(defaults) {
    this.#defaults = defaults;
  }

  /** Attaches the client a tab asked for on `port`; the first view is posted at once. */
  attach(port, tab, pageOptions) {
    const options = this.#options(pageOptions);
    // One client per followed log (base URL and the core's target key).
    const key = targetKey(options);
    let scope = this.#followed.get(key);
    if (!scope) {
      const follower = follow(options);
      scope = { key, follower, attachments: new Set() };
      // One subscription per scope, posted to every attachment of it.
      scope.unsubscribe = follower.subscribe(() => this.#post(scope));
      this.#followed.set(key, scope);
    }
    const attachment = { port, tab, scope, last: {}, paused: false };
    scope.attachments.add(attachment);
    this.#watch(tab).add(attachment);
    // From memory: a tab on a scope already followed paints at once.
    this.#postTo(attachment);
    return attachment;
  }

  /** The tab's message on its attachment's port. */
  receive(attachment, msg) {
    if (msg.type === "close") return this.detach(attachment);
    if (msg.type === "pause") {
      attachment.paused = true;
      return;
    }
    if (msg.type === "resume") {
      attachment.paused = false;
      attachment.last = {};
      return this.#postTo(attachment);
    }
    if (msg.type !== "call" || !CALLS.includes(msg.call) || !Array.isArray(msg.args)) return;
    const { id, call, args } = msg;
    const { port, scope } = attachment;
    // Every write goes through the one client of the scope; the page
    // awaits an answer for every id, a synchronous throw answers too.
    Promise.resolve()
      .then(() => scope.follower[call](...args))
      .then(
        (value) => port.postMessage(message("reply", { host: this.#host(scope), id, value })),
        (err) => port.postMessage(message("reply", { host: this.#host(scope), id, error: wireError(err) })),
      );
  }

  /** Drops an attachment; the scope's client closes with its last one. Idempotent. */
  detach(attachment) {
    const { scope, tab, port } = attachment;
    if (!scope.attachments.delete(attachment)) return;
    this.#tabs.get(tab)?.delete(attachment);
    port.close();
    if (scope.attachments.size > 0) return;
    this.#followed.delete(scope.key);
    scope.unsubscribe();
    scope.follower.close();
  }

  /** How many scopes are followed and attachments served (tests, devtools). */
  get counts() {
    let attachments = 0;
    for (const scope of this.#followed.values()) attachments += scope.attachments.size;
    return { scopes: this.#followed.size, attachments };
  }

  // The tab's lock, requested once per tab: granted when the tab let it go.
  #watch(tab) {
    let set = this.#tabs.get(tab);
    if (set) return set;
    set = new Set();
    this.#tabs.set(tab, set);
    navigator.locks.request(tab, () => {
      this.#tabs.delete(tab);
      for (const attachment of set) this.detach(attachment);
    });
    return set;
  }

  #options(pageOptions) {
    for (const name of HOST_ONLY) {
      if (pageOptions?.[name] !== undefined) {
        throw Object.assign(new Error(`"${name}" is the host's: give it to serveShared() in the worker script`), {
          code: "invalid_options",
        });
      }
    }
    const baseUrl = this.#defaults.baseUrl;
    if (baseUrl && pageOptions?.baseUrl && pageOptions.baseUrl !== baseUrl) {
      throw Object.assign(new Error(`this host serves ${baseUrl} only, not ${pageOptions.baseUrl}`), {
        code: "invalid_options",
      });
    }
    return { storage: "indexeddb", ...this.#defaults, ...pageOptions };
  }

  #host(scope) {
    return { role: "shared", instance, attached: scope.attachments.size };
  }

  #post(scope) {
    for (const attachment of scope.attachments) this.#postTo(attachment);
  }

  // Only the parts that changed since this tab's last post cross; a paused
  // tab (frozen, or in the back/forward cache) gets nothing until it resumes.
  #postTo(attachment) {
    if (attachment.paused) return;
    const { scope } = attachment;
    const view = scope.follower.view();
    const changed = changedParts(view, attachment.last);
    attachment.last = view;
    attachment.port.postMessage(
      message("view", { host: this.#host(scope), view: changed, diagnostics: scope.follower.diagnostics() }),
    );
  }
}

/**
 * Serves `SharedClient.connect` from every tab of this origin, in a
 * SharedWorker script the app owns. `defaults` apply under every tab's
 * options; the credentials (`getToken`, `headers`) and the storage are
 * given here only (a tab's attach naming them is refused), and with a
 * `baseUrl` here a tab may follow no other. Storage defaults to
 * `"indexeddb"`. Resolves once this worker serves; returns the host's
 * counts for devtools (`scopes`, `attachments`).
 */
export async function serveShared(defaults = {}) {
  const host = new Host(defaults);
  const shared = { role: "shared", instance };
  // Attaches that came before the wasm was ready; `failure` once it failed.
  const waiting = [];
  let serving = false;
  let failure = null;
  addEventListener("connect", (event) => {
    const port = event.ports[0];
    let attachment = null;
    const refuse = (error) => port.postMessage(message("failed", { host: shared, error }));
    port.onmessage = ({ data }) => {
      const msg = read(data);
      if (msg instanceof Error) return refuse(wireError(msg));
      if (attachment) return host.receive(attachment, msg);
      if (msg.type !== "attach") return;
      // Without the tab's lock the host could never tell that it went away.
      if (typeof msg.tab !== "string") return refuse({ code: "invalid_options", message: "attach needs the tab's lock name" });
      const start = () => {
        if (failure) return refuse(failure);
        try {
          attachment = host.attach(port, msg.tab, msg.options);
        } catch (err) {
          refuse(wireError(err));
        }
      };
      if (serving || failure) start();
      else waiting.push(start);
    };
  });
  // This worker's life lock, held before any tab learns the instance id,
  // so a tab's request for it is granted only once this worker is gone.
  await new Promise((held) => navigator.locks.request(`replay-host:${instance}`, () => (held(), new Promise(() => {}))));
  try {
    await ready;
    serving = true;
  } catch (err) {
    // The package's wasm could not be fetched or compiled here.
    failure = wireError(err, "network");
  }
  for (const start of waiting.splice(0)) start();
  return {
    get counts() {
      return host.counts;
    },
  };
}
