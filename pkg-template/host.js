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
import { CALLS, changedParts, message, read, targetKey, wireError } from "./messages.js";
import { prefetch } from "./prefetch.js";

/** @typedef {import("./index.js").ConnectOptions} ConnectOptions */
/** @typedef {import("./index.js").ReplayClient} ReplayClient */
/** @typedef {import("./messages.js").PageMessage} PageMessage */
/** @typedef {import("./messages.js").WireError} WireError */
/** @typedef {{ key: unknown, follower: ReplayClient, attachments: Set<Attachment>, unsubscribe: () => void }} Scope */
/** @typedef {{ port: MessagePort, tab?: string, scope: Scope, last: object, said: string, paused: boolean, viewer: number }} Attachment */

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
    /** @param {WireError} error */
    const refuse = (error) => port.postMessage(message("failed", { host: this.#info(), error }));
    /** @param {unknown} data */
    const receive = (data) => {
      const msg = /** @type {PageMessage | Error} */ (read(data));
      if (msg instanceof Error) return refuse(wireError(msg));
      if (attachment) return this.#receive(attachment, msg);
      // The page gave up before its client was attached: none will be.
      if (msg.type === "close") closed = true;
      if (msg.type !== "attach") return;
      // Without the tab's lock the host could never tell that it went away.
      if (this.#shared && typeof msg.tab !== "string") return refuse({ code: "invalid_options", message: "attach needs the tab's lock name" });
      this.#prefetch(msg.options);
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
      // One subscription per client, posted to every attachment of it.
      // The diagnostics are made and compared once per change, not per page.
      created.unsubscribe = follower.subscribe(() => {
        const diagnostics = follower.diagnostics();
        const said = JSON.stringify(diagnostics);
        created.attachments.forEach((a) => this.#post(a, diagnostics, said));
      });
      this.#followed.set(key, (scope = created));
    }
    /** @type {Attachment} */
    const attachment = { port, tab, scope, last: {}, said: "", paused: false, viewer: ++this.#viewers };
    scope.attachments.add(attachment);
    this.#viewer(attachment, !!hidden);
    if (tab) this.#watch(tab).add(attachment);
    // From memory: a page on a log already followed paints at once.
    this.#post(attachment);
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
    if (msg.type === "pause") {
      attachment.paused = true;
      return;
    }
    if (msg.type === "resume") {
      attachment.paused = false;
      attachment.last = {};
      attachment.said = "";
      return this.#post(attachment);
    }
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

  // Only the parts that changed since this page's last post cross, and the
  // diagnostics only when they changed (a new object on every call); a
  // paused page (frozen, or in the back/forward cache) gets nothing until it
  // resumes.
  /**
   * @param {Attachment} attachment
   * @param {import("./index.js").Diagnostics} [diagnostics] the scope's, if already made
   * @param {string} [said] their JSON
   */
  #post(attachment, diagnostics = attachment.scope.follower.diagnostics(), said = JSON.stringify(diagnostics)) {
    if (attachment.paused) return;
    const { scope } = attachment;
    const view = scope.follower.view();
    const changed = changedParts(view, attachment.last);
    const liveText = appendedText(changed, attachment.last);
    attachment.last = view;
    const fresh = said !== attachment.said;
    attachment.said = said;
    attachment.port.postMessage(
      message("view", { host: this.#info(scope), view: changed, liveText, diagnostics: fresh ? diagnostics : undefined }),
    );
  }
}

/**
 * A live answer's text grows by its end, frame after frame: when the text
 * posted last is the head of the new one, `changed.live` goes without its
 * text and the rest of the text is returned, for the page to append
 * (`liveText`), so that a long answer is not copied whole to every page
 * on every frame.
 * @param {Record<string, any>} changed
 * @param {Record<string, any>} last
 * @returns {string | undefined}
 */
function appendedText(changed, last) {
  const live = changed.live;
  const was = last.live;
  if (!live || !was || live.message_id !== was.message_id || live.text_offset !== was.text_offset) return undefined;
  if (live.text.length < was.text.length || !live.text.startsWith(was.text)) return undefined;
  const { text, ...rest } = live;
  changed.live = rest;
  return text.slice(was.text.length);
}
