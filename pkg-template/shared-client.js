// The page half of the shared host (`shared.js`, in a SharedWorker): one
// client per browser for every tab, this page keeping only a view built
// from the parts the worker posts. It loads no wasm, unless the shared host
// cannot run here: then the same call runs the client on the page.
// Messages: `messages.d.ts`, the schema the dedicated worker speaks too.
import { ReplayError } from "./replay_error.js";
import { CONNECT_TIMEOUT_MS, message, read, targetKey, toError, wireError } from "./messages.js";

const closedError = () => new ReplayError("closed", "the client is closed");
// `msg_` and 64 random bits, as the client's own: a send retried on a new
// worker keeps its id, so the server starts the turn once.
const freshMessageId = () =>
  "msg_" + Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, "0")).join("");
// Refusals that mean "no shared host here", not "bad options".
const FALL_BACK = ["network", "timeout", "schema_mismatch"];
// The paint snapshot: the last view (its newest items) and diagnostics the
// host posted, kept in this origin's localStorage when the tab is hidden or
// left, so that a reload paints at once, before the worker or the wasm
// started (the host's own state is in IndexedDB, which a worker must open
// first). Not kept when the host stores nothing on disk.
const PAINT_ITEMS = 100;
const paintKey = (options) => "replay-paint:" + targetKey(options);

/** A client hosted by the SharedWorker, seen from this page. */
export class SharedClient {
  #startWorker;
  #options;
  #tab = `replay-tab:${crypto.randomUUID()}`;
  #releaseTab = () => {};
  #port = null;
  #instance = null;
  #watchingHost = null;
  #view = null;
  // The host's view (what its posts add up to), and the stored paint shown
  // until the host has restored as far.
  #hostView = null;
  #stored = null;
  #diagnostics = null;
  #listeners = [];
  #frame = null;
  #pending = new Map();
  #nextId = 0;
  #closed = false;
  #unlisten = () => {};

  constructor(startWorker, options, token) {
    if (token !== CONNECTING) throw new TypeError("use SharedClient.connect()");
    this.#startWorker = startWorker;
    this.#options = options;
  }

  /**
   * Connects through the shared host that `startWorker()` starts (a
   * `SharedWorker` whose script calls `serveShared()`), resolving once the
   * first view arrived. Where `SharedWorker` or Web Locks are missing, the
   * worker does not start or answer within `connectTimeoutMs` (default
   * 10 s), or it speaks another version of the messages, the client runs
   * on this page instead, with `options` and then `pageOptions` (where
   * `getToken` and `headers` go for that case); `diagnostics().host` says
   * which. Rejects with the host's `ReplayError` when it refused the options.
   */
  static async connect(startWorker, options, pageOptions = {}) {
    let reason;
    if (typeof SharedWorker !== "function") reason = new ReplayError("network", "SharedWorker is missing here");
    else if (!navigator.locks?.request) reason = new ReplayError("network", "Web Locks are missing here");
    else {
      const client = new SharedClient(startWorker, options, CONNECTING);
      if (client.#paintStored()) {
        // Painted from storage; the host takes over with its first view.
        client.#start().catch((err) => (FALL_BACK.includes(err?.code) ? client.#reattach() : client.#failed(err)));
        return client;
      }
      try {
        await client.#start();
        return client;
      } catch (err) {
        client.close();
        if (!FALL_BACK.includes(err?.code)) throw err;
        reason = err;
      }
    }
    return PageClient.connect({ ...options, ...pageOptions }, reason);
  }

  async #start() {
    await new Promise((granted) =>
      // Held while this client lives: the worker detaches it when granted.
      navigator.locks.request(this.#tab, () => (granted(), new Promise((release) => (this.#releaseTab = release)))),
    );
    // A frozen or back/forward-cached page gets no posts; on its return it
    // gets the whole view. `pagehide` without `persisted` needs no pause:
    // the page's lock goes with it.
    const pause = (event) => (this.#savePaint(), event.persisted !== false && this.#post(message("pause")));
    const resume = (event) => event.persisted !== false && this.#post(message("resume"));
    const hidden = () => document.visibilityState === "hidden" && this.#savePaint();
    const on = [
      [globalThis, "pagehide", pause],
      [globalThis.document, "visibilitychange", hidden],
      [globalThis, "pageshow", resume],
      [globalThis.document, "freeze", pause],
      [globalThis.document, "resume", resume],
    ];
    for (const [target, name, f] of on) target?.addEventListener(name, f);
    this.#unlisten = () => on.forEach(([target, name, f]) => target?.removeEventListener(name, f));
    await this.#attach();
  }

  #savePaint() {
    const diagnostics = this.#diagnostics;
    if (!diagnostics || /memory/.test(diagnostics.storage)) return;
    const { items, ...view } = this.#view;
    const paint = { view: { ...view, items: items.slice(-PAINT_ITEMS), notices: [] }, diagnostics };
    try {
      localStorage.setItem(paintKey(this.#options), JSON.stringify(paint));
    } catch {
      // Full or refused: the next load waits for the host, as without it.
    }
  }

  // The stored paint snapshot as the view (`stored: true`, `restoring`
  // until the host's first view); false when there is none.
  #paintStored() {
    let paint;
    try {
      paint = JSON.parse(localStorage.getItem(paintKey(this.#options)));
    } catch {}
    if (!paint?.view) return false;
    const status = { ...paint.view.status, state: "restoring", nextRetryAt: null };
    this.#view = this.#stored = Object.freeze({ ...paint.view, status, stored: true });
    this.#diagnostics = { ...paint.diagnostics, status };
    return true;
  }

  // The host refused this client after a stored paint was shown.
  #failed(err) {
    this.#view = Object.freeze({ ...this.#view, status: { ...this.#view.status, state: "failed", lastError: wireError(err) } });
    this.#notifySoon();
  }

  // Starts a worker (or joins the running one) and attaches this client;
  // resolves at the first view.
  #attach() {
    return new Promise((resolve, reject) => {
      let worker;
      try {
        worker = this.#startWorker();
      } catch (err) {
        return reject(new ReplayError("network", `the shared worker did not start: ${err?.message ?? err}`));
      }
      const port = worker.port;
      this.#port = port;
      let attached = false;
      const settle = (err) => {
        clearTimeout(timer);
        worker.removeEventListener?.("error", failedToStart);
        if (err) return reject(err);
        attached = true;
        resolve();
      };
      const failedToStart = (event) =>
        settle(new ReplayError("network", `the shared worker failed: ${event.message ?? "it did not start"}`));
      const timer = setTimeout(
        () => settle(new ReplayError("timeout", "no answer from the shared worker: does it call serveShared()?")),
        this.#options?.connectTimeoutMs ?? CONNECT_TIMEOUT_MS,
      );
      worker.addEventListener?.("error", failedToStart);
      port.onmessage = ({ data }) => {
        if (port !== this.#port || this.#closed) return;
        const msg = read(data);
        const err = msg instanceof Error ? msg : msg.type === "failed" ? toError(msg.error) : null;
        if (err) return attached ? this.#restart() : settle(err);
        this.#receive(msg);
        if (!attached && msg.type === "view") {
          settle(null);
          // Calls made while no worker served: sent again, same ids.
          for (const [id, { call, args }] of this.#pending) this.#post(message("call", { id, call, args }));
        }
      };
      port.postMessage(message("attach", { tab: this.#tab, options: this.#options }));
    });
  }

  #receive(msg) {
    const { instance } = msg.host;
    if (instance !== this.#instance) {
      // Another worker answers on this port (one re-running its script):
      // it does not know this client; attach again.
      if (this.#instance !== null) return this.#restart();
      this.#instance = instance;
      this.#watchHost(instance);
    }
    if (msg.type === "reply") {
      const call = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      if (msg.error) call?.reject(toError(msg.error));
      else call?.resolve(msg.value);
      return;
    }
    if (msg.type !== "view") return;
    this.#diagnostics = { ...msg.diagnostics, host: msg.host };
    if (Object.keys(msg.view).length === 0) return;
    // A new object when anything changed; the parts not posted keep theirs.
    const view = (this.#hostView = Object.freeze({ ...this.#hostView, ...msg.view }));
    const stored = this.#stored;
    // The stored paint stays, with the host's status, until the host
    // restored as far (or is live or done): no step back on the screen.
    if (stored && view.cursor < stored.cursor && !/live|failed|stopped/.test(view.status.state)) {
      this.#view = Object.freeze({ ...stored, status: view.status });
    } else {
      this.#stored = null;
      this.#view = view;
    }
    this.#notifySoon();
  }

  // Subscribers are called once per animation frame of this tab, however
  // often the host posts (it paces by a timer: a SharedWorker has no
  // frames), and not while the tab is hidden (no frames run then); they read
  // the latest view. `notify: "sync"` calls them on every post.
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

  // The worker's life lock: granted once that worker is gone.
  #watchHost(instance) {
    this.#watchingHost?.abort();
    const watching = new AbortController();
    this.#watchingHost = watching;
    navigator.locks
      .request(`replay-host:${instance}`, { signal: watching.signal }, () => {
        if (this.#instance === instance) this.#restart();
      })
      .catch(() => {});
  }

  // The worker went away: start another (it restores from storage) and
  // attach again, retrying while none answers. The page keeps showing the
  // last view meanwhile; waiting calls are sent again once attached.
  async #restart() {
    if (this.#closed || this.#instance === null) return;
    this.#instance = null;
    this.#watchingHost?.abort();
    this.#port?.close();
    this.#port = null;
    return this.#reattach();
  }

  async #reattach() {
    for (let delay = 100; !this.#closed; delay = Math.min(delay * 2, 5_000)) {
      try {
        return await this.#attach();
      } catch {
        this.#port?.close();
        this.#port = null;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  #post(msg) {
    this.#port?.postMessage(msg);
  }

  #call(call, args) {
    if (this.#closed) return Promise.reject(closedError());
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { call, args, resolve, reject });
      if (this.#instance !== null) this.#post(message("call", { id, call, args }));
    });
  }

  /** The latest view: the same object until something changed. */
  view() {
    return this.#view;
  }

  /** The connection status (the view's `status`). */
  status() {
    return this.#view.status;
  }

  /** Counters and position, as of the latest view; `host` says who runs the client. */
  diagnostics() {
    return this.#diagnostics;
  }

  /** Calls `listener` after each change the worker posts; returns an unsubscribe function. */
  subscribe(listener) {
    const entry = () => listener();
    this.#listeners.push(entry);
    return () => {
      this.#listeners = this.#listeners.filter((l) => l !== entry);
    };
  }

  /** As `ReplayClient.send`; the id is chosen here, so a retry on a new worker keeps it. */
  send(text, messageId) {
    return this.#call("send", [text, messageId ?? freshMessageId()]);
  }

  /** As `ReplayClient.answer`. */
  answer(questionId, answer) {
    return this.#call("answer", [questionId, answer]);
  }

  /** As `ReplayClient.cancel`; without `turnId`, the turn this page shows live. */
  cancel(turnId) {
    return this.#call("cancel", [turnId ?? this.#view?.live?.turn_id ?? null]);
  }

  /** As `ReplayClient.transcript`, asked of the worker. */
  transcript() {
    return this.#call("transcript", []);
  }

  /** Detaches this client (the worker closes the scope's client with its last tab); waiting calls reject with `closed`. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#post(message("close"));
    this.#port?.close();
    this.#releaseTab();
    this.#watchingHost?.abort();
    this.#unlisten();
    for (const { reject } of this.#pending.values()) reject(closedError());
    this.#pending.clear();
    this.#listeners = [];
    if (this.#frame !== null) cancelAnimationFrame(this.#frame);
  }
}

/** The fallback: today's `ReplayClient` on this page, with the same API. */
class PageClient {
  #client;
  #host;

  constructor(client, host) {
    this.#client = client;
    this.#host = host;
  }

  static async connect(options, reason) {
    // Loaded only here: the shared path never fetches the wasm.
    const replay = await import("./index.js");
    if (typeof replay.default === "function") await replay.default();
    return new PageClient(replay.ReplayClient.connect(options), { role: "page", fallback: wireError(reason) });
  }

  view() {
    return this.#client.view();
  }

  status() {
    return this.#client.status();
  }

  diagnostics() {
    return { ...this.#client.diagnostics(), host: this.#host };
  }

  subscribe(listener) {
    return this.#client.subscribe(listener);
  }

  send(text, messageId) {
    return this.#client.send(text, messageId);
  }

  answer(questionId, answer) {
    return this.#client.answer(questionId, answer);
  }

  cancel(turnId) {
    return this.#client.cancel(turnId);
  }

  async transcript() {
    return this.#client.transcript();
  }

  close() {
    this.#client.close();
  }
}

const CONNECTING = Symbol("connecting");
