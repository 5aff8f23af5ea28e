// @ts-check
// The host of page halves (`page-client.js`): it runs their clients, posts
// each page the parts of its view that changed, and runs the calls pages
// forward. Both host entries are this: the SharedWorker (`shared.js`: the
// tabs of an origin, one client per followed log, each tab watched through
// its lock) and the dedicated worker (`worker.js`: its one page, a client
// per connect). Messages: `messages.d.ts`.
// The glue itself, not the package entry (`index.js`): the host calls
// `init` itself and needs nothing the entry adds.
import * as replay from "./replay_client.js";
import { CALLS, message, read, targetKey, wireError } from "./messages.js";
import { prefetch } from "./prefetch.js";
import { adoptFirstPage } from "./first-page.js";

/** @typedef {import("./index.js").ConnectOptions} ConnectOptions */
/** @typedef {import("./index.js").ReplayClient} ReplayClient */
/** @typedef {import("./messages.js").PageMessage} PageMessage */
/** @typedef {import("./messages.js").WireError} WireError */
/** @typedef {{ key: unknown, follower: ReplayClient, attachments: Set<Attachment>, unsubscribe: () => void }} Scope */
/** @typedef {{ port: MessagePort, tab?: string, scope: Scope, paused: boolean, viewer: number }} Attachment */

// The `web` build loads its wasm with `init()`; the `bundler` build has none.
/** @type {Promise<unknown>} */
export const ready = typeof replay.default === "function" ? replay.default() : Promise.resolve();
// Which worker this is: in every message, so a page can tell a new one.
export const instance = crypto.randomUUID();

// The notification pacing where the host runs no frames (a SharedWorker):
// "frame" would tell the pages at a 0 ms timer, a post to every page per
// stream chunk (measured: ~1 notification per event, docs/benchmarks.md,
// the shared host). Paced by time instead, at most once per frame's worth,
// unless the page chose.
const FRAME_MS = 16;
// `PageUpdate::WHOLE` as `ReplayClient.pageUpdate` gives it: every part and the diagnostics.
const WHOLE = 2 ** 17 - 1;

/** The clients followed, each with the attachments (one per page's client) that share it. */
export class Host {
  #role;
  #options;
  #shared;
  #serving;
  /** @type {Map<unknown, Scope>} */
  #followed = new Map();
  /** @type {Map<string, Set<Attachment>>} */
  #tabs = new Map();
  #viewers = 0;

  /**
   * @param {"shared" | "worker"} role
   * @param {(pageOptions: any) => ConnectOptions} options  a page's options as its client connects with them; throws to refuse them
   * @param {boolean} shared  the shared host's: one client per followed log for
   *   every page following it, and pages attach with their tab's lock (a
   *   dedicated worker's page goes with the worker: a client per connect)
   * @param {Promise<unknown>} serving  settles once this host serves (rejected: it cannot here)
   */
  constructor(role, options, shared, serving) {
    this.#role = role;
    this.#options = options;
    this.#shared = shared;
    this.#serving = serving;
  }

  /**
   * Serves a page on `port`: its `attach` (`first`, or the port's first
   * message), once this host serves, then its messages.
   * @param {MessagePort} port
   * @param {unknown} [first]
   */
  listen(port, first) {
    /** @type {Attachment | null} */
    let attachment = null;
    let closed = false;
    // Settles the answer of the first page the page asked for itself.
    /** @type {(msg: import("./messages.js").FirstPageAnswer) => void} */
    let firstPage = () => {};
    /** @param {WireError} error */
    const refuse = (error) => port.postMessage(message("failed", { host: this.#info(), error }));
    /** @param {unknown} data */
    const receive = (data) => {
      const msg = /** @type {PageMessage | Error} */ (read(data));
      if (msg instanceof Error) return refuse(wireError(msg));
      if (msg.type === "firstPage") return firstPage(msg);
      // A page that left sends no answer: its client's request goes itself.
      if (msg.type === "close") firstPage({ error: "the page closed" });
      if (attachment) return this.#receive(attachment, msg);
      // The page gave up before its client was attached: none will be.
      if (msg.type === "close") closed = true;
      if (msg.type !== "attach") return;
      // Without the tab's lock the host could never tell that it went away.
      if (this.#shared && typeof msg.tab !== "string") return refuse({ code: "invalid_options", message: "attach needs the tab's lock name" });
      if (msg.firstPage) firstPage = this.#adopt(msg.options, msg.firstPage);
      else this.#prefetch(msg.options);
      this.#serving
        .then(
          () => closed || (attachment = this.#attach(port, msg.tab, msg.options, msg.hidden)),
          // The package's wasm could not be fetched or compiled here.
          (err) => refuse(wireError(err, "network")),
        )
        .catch((err) => refuse(wireError(err)));
    };
    port.onmessage = ({ data }) => receive(data);
    if (first !== undefined) receive(first);
  }

  /**
   * A log not followed yet: its first page is asked for at once, while
   * the wasm may still be loading (`prefetch`: the client takes it).
   * @param {unknown} pageOptions
   */
  #prefetch(pageOptions) {
    try {
      const options = this.#options(pageOptions);
      if (!this.#followed.has(this.#shared ? targetKey(options) : null)) prefetch(options);
    } catch {
      // Refused options: the attach says why.
    }
  }

  /**
   * A log not followed yet whose first page the page asked for itself:
   * its client takes that answer when its first request is the page's
   * (`adoptFirstPage`). Returns what settles the answer from the page's
   * `firstPage` message.
   * @param {unknown} pageOptions
   * @param {import("./messages.js").FirstPageSent} sent
   */
  #adopt(pageOptions, sent) {
    /** @type {(msg: import("./messages.js").FirstPageAnswer) => void} */
    let settle = () => {};
    /** @type {Promise<Response>} */
    const answer = new Promise((resolve, reject) => {
      settle = ({ status, statusText, headers, body, error }) => {
        try {
          if (error !== undefined || status === undefined) throw new Error(error);
          resolve(new Response(body ?? null, { status, statusText, headers }));
        } catch (err) {
          reject(err);
        }
      };
    });
    answer.catch(() => {});
    try {
      if (!this.#followed.has(this.#shared ? targetKey(this.#options(pageOptions)) : null)) adoptFirstPage(sent, answer);
    } catch {
      // Refused options: the attach says why.
    }
    return settle;
  }

  /**
   * Attaches the client a page asked for on `port`; the first view is posted at once.
   * @param {MessagePort} port
   * @param {string | undefined} tab
   * @param {unknown} pageOptions
   * @param {boolean} [hidden]  the page is hidden
   */
  #attach(port, tab, pageOptions, hidden) {
    const options = this.#options(pageOptions);
    // Shared: one client per followed log (base URL and the core's target key).
    const key = this.#shared ? targetKey(options) : {};
    let scope = this.#followed.get(key);
    if (!scope) {
      const notify = options.notify ?? (typeof requestAnimationFrame === "function" ? "frame" : FRAME_MS);
      const follower = replay.ReplayClient.connect({ ...options, notify });
      const created = /** @type {Scope} */ ({ key, follower, attachments: new Set() });
      created.unsubscribe = follower.subscribe(() => this.#post(created));
      this.#followed.set(key, (scope = created));
    }
    // Paused until it gets the whole view (`#post`).
    /** @type {Attachment} */
    const attachment = { port, tab, scope, paused: true, viewer: ++this.#viewers };
    scope.attachments.add(attachment);
    this.#viewer(attachment, !!hidden);
    if (tab) this.#watch(tab).add(attachment);
    // From memory: a page on a log already followed paints at once.
    this.#post(scope, attachment);
    return attachment;
  }

  /**
   * The page's message on its attachment's port.
   * @param {Attachment} attachment
   * @param {PageMessage} msg
   */
  #receive(attachment, msg) {
    if (msg.type === "close") return this.#detach(attachment);
    if (msg.type === "visibility") return this.#viewer(attachment, !!msg.hidden);
    if (msg.type === "pause") attachment.paused = true;
    if (msg.type === "resume") this.#post(attachment.scope, attachment);
    if (msg.type !== "call" || !CALLS.includes(msg.call) || !Array.isArray(msg.args)) return;
    const { id, call, args } = msg;
    const { port, scope } = attachment;
    /** @param {object} outcome */
    const reply = (outcome) => port.postMessage(message("reply", { host: this.#info(scope), id, ...outcome }));
    // Every write goes through the one client of the scope; the page
    // awaits an answer for every id, a synchronous throw answers too.
    Promise.resolve()
      .then(() => /** @type {any} */ (scope.follower)[call](...args))
      .then(
        (value) => reply({ value }),
        (err) => reply({ error: wireError(err) }),
      );
  }

  /**
   * Drops an attachment; its client closes with its last one. Idempotent.
   * @param {Attachment} attachment
   */
  #detach(attachment) {
    const { scope, tab, port } = attachment;
    if (!scope.attachments.delete(attachment)) return;
    if (tab) this.#tabs.get(tab)?.delete(attachment);
    port.close();
    if (scope.attachments.size > 0) return this.#viewer(attachment, undefined);
    this.#followed.delete(scope.key);
    scope.unsubscribe();
    scope.follower.close();
  }

  /**
   * Tells the scope's client that this page is hidden, shown, or gone
   * (`undefined`); the core decides what that makes the client.
   * @param {Attachment} attachment
   * @param {boolean | undefined} hidden
   */
  #viewer(attachment, hidden) {
    /** @type {any} */ (attachment.scope.follower).setViewer(attachment.viewer, hidden);
  }

  /** How many clients are followed and attachments served (tests, devtools). */
  get counts() {
    let attachments = 0;
    for (const scope of this.#followed.values()) attachments += scope.attachments.size;
    return { scopes: this.#followed.size, attachments };
  }

  // The tab's lock, requested once per tab: granted when the tab let it go.
  /** @param {string} tab */
  #watch(tab) {
    let set = this.#tabs.get(tab);
    if (set) return set;
    const attachments = (set = new Set());
    this.#tabs.set(tab, attachments);
    navigator.locks.request(tab, () => {
      this.#tabs.delete(tab);
      for (const attachment of attachments) this.#detach(attachment);
    });
    return attachments;
  }

  /** @param {Scope} [scope] */
  #info(scope) {
    return { role: this.#role, instance, attached: scope?.attachments.size };
  }

  // The pages' update, as the core makes it (`pageUpdate`): what changed
  // since the last one, posted to every page of the scope but a paused one
  // (frozen, or in the back/forward cache). With `to`, a page that has none
  // of the updates (attached, or resumed: what was posted meanwhile may not
  // have reached it): the others get what changed first, then it alone
  // gets the whole view, so that all go on from the same update.
  /**
   * @param {Scope} scope
   * @param {Attachment} [to]
   */
  #post(scope, to) {
    const follower = /** @type {any} */ (scope.follower);
    if (to) {
      this.#post(scope);
      to.paused = false;
    }
    // The number's fields: `ReplayClient.pageUpdate` (wasm/api.rs); every
    // part and the diagnostics for a page that has none of the updates.
    /** @type {number} */
    const u = to ? WHOLE : follower.pageUpdate();
    if (u < 0) return;
    const view = follower.view();
    /** @type {Record<string, unknown>} */
    const parts = {};
    // Bit `i` is the view's `i`th key: `viewObject` (browser.js) builds it
    // in the core's order, tests/js/view_parts.test.mjs checks that.
    Object.keys(view).forEach((part, i) => (u >> i) & 1 && (parts[part] = view[part]));
    const from = Math.floor(u / 131072) - 1;
    let liveText;
    if (from >= 0) {
      const { text, ...live } = view.live;
      parts.live = live;
      liveText = text.slice(from);
    }
    const diagnostics = Math.floor(u / 65536) % 2 ? follower.diagnostics() : undefined;
    const msg = message("view", { host: this.#info(scope), view: parts, liveText, diagnostics });
    for (const a of to ? [to] : scope.attachments) if (!a.paused) a.port.postMessage(msg);
  }
}
