// @ts-check
// The page half of a client hosted by a worker (`host.js`), over one
// MessagePort: the view kept from the parts the host posts, the client's
// calls forwarded with ids, the app's subscribers called once per animation
// frame, posts paused while the page is frozen. It loads no wasm.
// `WorkerClient` (a dedicated worker) and `SharedClient` (a SharedWorker for
// every tab) are this class with their own `Link`: how they reach the host,
// and what they add. Messages: `messages.d.ts`.
import { ReplayError } from "./replay_error.js";
import { CONNECT_TIMEOUT_MS, message, read, toError } from "./messages.js";

/** @typedef {import("./index.js").View} View */
/** @typedef {import("./index.js").Diagnostics} Diagnostics */
/** @typedef {import("./messages.js").CallName} CallName */
/** @typedef {import("./messages.js").HostInfo} HostInfo */
/** @typedef {import("./messages.js").PageConnectOptions} PageConnectOptions */
/** @typedef {import("./messages.js").PageMessage} PageMessage */
/** @typedef {import("./messages.js").WorkerMessage} WorkerMessage */
/** @typedef {{ call: CallName, args: unknown[], resolve: (value: any) => void, reject: (err: ReplayError) => void }} Call */

const isHidden = () => globalThis.document?.visibilityState === "hidden";

/**
 * How a page half reaches its host, and what it adds to the common part.
 * Functions, so that they may use the subclass's state (set after `super`).
 * @typedef {object} Link
 * @property {string} name  the host, as errors name it ("worker")
 * @property {string} serves  what the host's script must call ("serve()")
 * @property {() => { port: MessagePort, worker: EventTarget, post: (attach: PageMessage) => void }} open
 *   starts the host or joins it: the port to it, the worker whose `error`
 *   says it did not start, and how the `attach` goes (it may throw)
 * @property {(msg: WorkerMessage) => boolean} [seen]  false: not this client's host (the message is dropped)
 * @property {(view: View) => View} [shown]  the view to show for the host's
 * @property {(err: ReplayError) => void} [lost]  the host refused this client after its first view (default: the waiting calls reject)
 * @property {() => void} [hidden]  the page was hidden, frozen or left
 */

/** @type {(client: PageClient) => Promise<void>} */
let attach;
/** @type {(client: PageClient) => Promise<void>} */
let reattach;
/** @type {(client: PageClient, view: View, diagnostics?: Diagnostics & { host: HostInfo }) => void} */
let show;
// Functions of this module for the subclasses (`attach`, `reattach`,
// `show`): not methods, so that they are no part of the clients' API.
export { attach, reattach, show };

const closedError = () => new ReplayError("closed", "the client is closed");

/** A client hosted by a worker, seen from this page. */
export class PageClient {
  /** @type {Partial<import("./index.js").ConnectOptions>} */
  #options;
  /** @type {Link} */
  #link;
  /** @type {MessagePort | null} */
  #port = null;
  // Posts of the current port reached this client: calls go out.
  #live = false;
  /** @type {View | null} What the host's posts add up to. */
  #hostView = null;
  /** @type {View | null} What the page shows (`Link.shown`). */
  #view = null;
  /** @type {(Diagnostics & { host: HostInfo }) | null} */
  #diagnostics = null;
  /** @type {(() => void)[]} */
  #listeners = [];
  /** @type {number | null} */
  #frame = null;
  /** @type {Map<number, Call>} */
  #pending = new Map();
  #nextId = 0;
  #closed = false;
  #unlisten = () => {};

  // Sets this module's functions for the subclasses; a field, not a
  // `static {}` block, which Safari has only since 16.4.
  static #friends = (() => {
    attach = (client) => client.#attach();
    reattach = (client) => client.#reattach();
    show = (client, view, diagnostics) => {
      client.#view = view;
      client.#diagnostics = diagnostics ?? client.#diagnostics;
      client.#notifySoon();
    };
  })();

  /**
   * @param {Partial<import("./index.js").ConnectOptions>} options  as the page gave them (posted with the `attach`)
   * @param {Link} link
   */
  constructor(options, link) {
    this.#options = options;
    this.#link = link;
    // A frozen or back/forward-cached page gets no posts; on its return it
    // gets the whole view. `pagehide` without `persisted` needs no pause:
    // the page and its port go.
    /** @param {any} event */
    const pause = (event) => (link.hidden?.(), event.persisted !== false && this.#post(message("pause")));
    /** @param {any} event */
    const resume = (event) => event.persisted !== false && this.#post(message("resume"));
    // The host has no document: it is told, and its client polls slowly
    // only while every page showing it is hidden.
    const hidden = () => {
      if (isHidden()) link.hidden?.();
      this.#post(message("visibility", { hidden: isHidden() }));
    };
    /** @type {[EventTarget | undefined, string, (event: any) => void][]} */
    const on = [
      [globalThis, "pagehide", pause],
      [globalThis.document, "visibilitychange", hidden],
      [globalThis, "pageshow", resume],
      [globalThis.document, "freeze", pause],
      [globalThis.document, "resume", resume],
    ];
    for (const [target, name, f] of on) target?.addEventListener(name, f);
    this.#unlisten = () => on.forEach(([target, name, f]) => target?.removeEventListener(name, f));
  }

  // Opens the host's port and posts `attach`; resolves at the first view.
  // A failed attach closes its port (a host attaching it later closes it).
  #attach() {
    const { name, serves } = this.#link;
    return /** @type {Promise<void>} */ (new Promise((resolve, reject) => {
      /** @type {ReturnType<Link["open"]>} */
      let opened;
      try {
        opened = this.#link.open();
      } catch (err) {
        return reject(new ReplayError("network", `the ${name} did not start: ${/** @type {any} */ (err)?.message ?? err}`));
      }
      const { port, worker, post } = opened;
      this.#port = port;
      this.#live = false;
      /** @param {ReplayError | null} err */
      const settle = (err) => {
        clearTimeout(timer);
        worker.removeEventListener?.("error", failedToStart);
        if (!err) {
          this.#live = true;
          // Calls made while no host served: sent again, same ids.
          for (const [id, { call, args }] of this.#pending) this.#post(message("call", { id, call, args }));
          return resolve();
        }
        this.#drop();
        reject(err);
      };
      // A worker whose script did not load or threw says so only here.
      /** @param {any} event */
      const failedToStart = (event) => settle(new ReplayError("network", `the ${name} failed: ${event.message ?? "it did not start"}`));
      const timer = setTimeout(
        () => settle(new ReplayError("timeout", `no answer from the ${name}: does it call ${serves}?`)),
        this.#options?.connectTimeoutMs ?? CONNECT_TIMEOUT_MS,
      );
      worker.addEventListener?.("error", failedToStart);
      port.onmessage = ({ data }) => {
        if (port !== this.#port || this.#closed) return;
        const msg = /** @type {WorkerMessage | ReplayError} */ (read(data));
        if (msg instanceof Error || msg.type === "failed") {
          const err = msg instanceof Error ? msg : toError(msg.error);
          return this.#live ? this.#lost(err) : settle(err);
        }
        if (this.#link.seen?.(msg) === false) return;
        this.#receive(msg);
        if (!this.#live && msg.type === "view") settle(null);
      };
      try {
        post(message("attach", { options: /** @type {PageConnectOptions} */ (this.#options), hidden: isHidden() }));
      } catch (err) {
        // E.g. a function among the options: it cannot be cloned.
        settle(new ReplayError("invalid_options", `options cannot cross to a ${name} (give functions to ${serves}): ${/** @type {any} */ (err)?.message}`));
      }
    }));
  }

  // The host went away: attach again (to a new one), retrying while none
  // answers. The page keeps its view meanwhile; waiting calls are sent again.
  async #reattach() {
    this.#drop();
    for (let delay = 100; !this.#closed; delay = Math.min(delay * 2, 5_000)) {
      try {
        return await this.#attach();
      } catch {
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  // Done with this port: the host closes what it attached on it.
  #drop() {
    this.#post(message("close"));
    this.#port?.close();
    this.#port = null;
    this.#live = false;
  }

  /** @param {ReplayError} err */
  #lost(err) {
    if (this.#link.lost) return this.#link.lost(err);
    for (const { reject } of this.#pending.values()) reject(err);
    this.#pending.clear();
  }

  /** @param {WorkerMessage} msg */
  #receive(msg) {
    if (msg.type === "reply") {
      const call = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      if (msg.error) call?.reject(toError(msg.error));
      else call?.resolve(msg.value);
      return;
    }
    if (msg.type !== "view") return;
    // Absent when unchanged since the last post.
    this.#diagnostics = /** @type {Diagnostics & { host: HostInfo }} */ ({ ...(msg.diagnostics ?? this.#diagnostics), host: msg.host });
    // Nothing of the view changed: the same view, no listener called.
    if (Object.keys(msg.view).length === 0) return;
    // The live answer's text is posted as what it gained (`Machine::page_update`).
    const live = msg.liveText !== undefined && msg.view.live;
    const posted = live ? { ...msg.view, live: Object.freeze({ ...live, text: (this.#hostView?.live?.text ?? "") + msg.liveText }) } : msg.view;
    // A new object when anything changed; the parts not posted keep theirs.
    const view = (this.#hostView = Object.freeze(/** @type {View} */ ({ ...this.#hostView, ...posted })));
    this.#view = this.#link.shown?.(view) ?? view;
    this.#notifySoon();
  }

  // Subscribers are called once per animation frame of this page, however
  // often the host posts, and not while the page is hidden (no frames run
  // then); they read the latest view. `notify: "sync"` calls them on every post.
  #notifySoon() {
    if (this.#options.notify === "sync" || typeof requestAnimationFrame !== "function") return this.#notify();
    this.#frame ??= requestAnimationFrame(() => {
      this.#frame = null;
      this.#notify();
    });
  }

  #notify() {
    for (const listener of [...this.#listeners]) {
      try {
        listener();
      } catch (err) {
        // One listener's error neither stops the others nor this port.
        reportError(err);
      }
    }
  }

  /** @param {PageMessage} msg */
  #post(msg) {
    this.#port?.postMessage(msg);
  }

  /**
   * @param {CallName} call
   * @param {unknown[]} args
   */
  #call(call, args) {
    if (this.#closed) return Promise.reject(closedError());
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { call, args, resolve, reject });
      if (this.#live) this.#post(message("call", { id, call, args }));
    });
  }

  /** The latest view: the same object until something changed. */
  view() {
    return /** @type {View} */ (this.#view);
  }

  /** The connection status (the view's `status`). */
  status() {
    return this.view().status;
  }

  /** Counters and position, as of the latest view; `host` says who runs the client. */
  diagnostics() {
    return /** @type {Diagnostics & { host: HostInfo }} */ (this.#diagnostics);
  }

  /**
   * Calls `listener` after changes the host posts; returns an unsubscribe function.
   * @param {() => void} listener
   */
  subscribe(listener) {
    const entry = () => listener();
    this.#listeners.push(entry);
    return () => {
      this.#listeners = this.#listeners.filter((l) => l !== entry);
    };
  }

  /**
   * As `ReplayClient.send`.
   * @param {string} text
   * @param {string | null} [messageId]
   * @returns {Promise<{ turnId: string }>}
   */
  send(text, messageId) {
    return this.#call("send", [text, messageId]);
  }

  /**
   * As `ReplayClient.retry`.
   * @param {string} id a message's `message_id`, or an answer's question id
   * @returns {Promise<{ turnId: string } | undefined>}
   */
  retry(id) {
    return this.#call("retry", [id]);
  }

  /**
   * As `ReplayClient.discard`, asked of the host.
   * @param {string} id a message's `message_id`, or an answer's question id
   * @returns {Promise<boolean>}
   */
  discard(id) {
    return this.#call("discard", [id]);
  }

  /**
   * As `ReplayClient.answer`.
   * @param {string} questionId
   * @param {string} answer
   * @returns {Promise<void>}
   */
  answer(questionId, answer) {
    return this.#call("answer", [questionId, answer]);
  }

  /**
   * As `ReplayClient.cancel`.
   * @param {string | null} [turnId]
   * @returns {Promise<void>}
   */
  cancel(turnId) {
    return this.#call("cancel", [turnId]);
  }

  /**
   * As `ReplayClient.loadOlder`: the older page is read by the host and
   * arrives with the view.
   * @returns {Promise<void>}
   */
  loadOlder() {
    return this.#call("loadOlder", []);
  }

  /**
   * As `ReplayClient.transcript`, asked of the host.
   * @returns {Promise<import("./index.js").Transcript>}
   */
  transcript() {
    return this.#call("transcript", []);
  }

  /** Closes this page's client (the host closes its own with it); waiting calls reject with `closed`. */
  close() {
    if (this.#closed) return;
    this.#drop();
    this.#closed = true;
    this.#unlisten();
    for (const { reject } of this.#pending.values()) reject(closedError());
    this.#pending.clear();
    this.#listeners = [];
    if (this.#frame !== null) cancelAnimationFrame(this.#frame);
  }
}
