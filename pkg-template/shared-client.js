// @ts-check
// The page half of the shared host (`shared.js`, in a SharedWorker): one
// client per browser for every tab, this page keeping only a view built
// from the parts the worker posts (`PageClient`). It loads no wasm, unless
// the shared host cannot run here: then the same call runs the client on
// the page. What the shared host adds: this tab's lock, the host watched
// through its life lock and attached again when it is gone, message ids
// chosen here, and the paint snapshot.
import { ReplayError } from "./replay_error.js";
import { message, targetKey, wireError } from "./messages.js";
import { firstPageUrl } from "./first-page-url.js";
import { PageClient, attach, reattach, show } from "./page-client.js";

/** @typedef {import("./index.js").View} View */
/** @typedef {import("./index.js").ConnectOptions} ConnectOptions */
/** @typedef {import("./shared-client.js").SharedConnectOptions} SharedConnectOptions */

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
// The prefix is the README's too: an app's HTML reads it to tell a return
// visit (the worker and its wasm need not start before this paint).
/** @param {SharedConnectOptions} options */
const paintKey = (options) => "replay-paint:" + targetKey(options);

/** A client hosted by the SharedWorker, seen from this page. */
export class SharedClient extends PageClient {
  /** @type {() => SharedWorker} */
  #startWorker;
  #tab = `replay-tab:${crypto.randomUUID()}`;
  #releaseTab = () => {};
  /** @type {string | null} */
  #instance = null;
  /** @type {AbortController | null} */
  #watchingHost = null;
  #paintKey;
  // The stored paint, shown until the host has restored as far.
  /** @type {View | null} */
  #stored = null;
  // The first page this page asked for itself, until the first attach says so.
  /** @type {{ sent: import("./messages.js").FirstPageSent, answer: Promise<import("./messages.js").FirstPageAnswer> } | null} */
  #firstPage = null;
  /** @type {Promise<void>} */
  #asking = Promise.resolve();

  /**
   * @param {() => SharedWorker} startWorker
   * @param {SharedConnectOptions} options
   * @param {symbol} token
   */
  constructor(startWorker, options, token) {
    if (token !== CONNECTING) throw new TypeError("use SharedClient.connect()");
    super(options, {
      name: "shared worker",
      serves: "serveShared()",
      open: () => {
        const worker = this.#startWorker();
        const { port } = worker;
        const first = this.#firstPage;
        this.#firstPage = null;
        first?.answer.then((answer) => port.postMessage(message("firstPage", answer), answer.body ? [answer.body] : []));
        return { port, worker, post: (msg) => port.postMessage({ ...msg, tab: this.#tab, ...(first && { firstPage: first.sent }) }) };
      },
      seen: ({ host: { instance = null } }) => {
        if (instance === this.#instance) return true;
        // Another worker answers on this port (one re-running its script):
        // it does not know this client; attach again.
        if (this.#instance !== null) return (this.#restart(), false);
        this.#instance = instance;
        this.#watchHost(instance);
        return true;
      },
      // The stored paint stays, with the host's status, until the host
      // restored as far (or is live or done): no step back on the screen.
      shown: (view) => {
        const stored = this.#stored;
        if (stored && view.cursor < stored.cursor && !/live|failed|stopped/.test(view.status.state)) {
          return Object.freeze({ ...stored, status: view.status, pending: view.pending });
        }
        this.#stored = null;
        return view;
      },
      lost: () => this.#restart(),
      hidden: () => this.#savePaint(),
    });
    this.#startWorker = startWorker;
    this.#paintKey = paintKey(options);
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
   * @param {() => SharedWorker} startWorker
   * @param {SharedConnectOptions} options
   * @param {Partial<ConnectOptions>} [pageOptions]
   * @returns {Promise<SharedClient>}
   */
  static async connect(startWorker, options, pageOptions = {}) {
    let reason;
    if (typeof SharedWorker !== "function") reason = new ReplayError("network", "SharedWorker is missing here");
    else if (!navigator.locks?.request) reason = new ReplayError("network", "Web Locks are missing here");
    else {
      const client = new SharedClient(startWorker, options, CONNECTING);
      const painted = client.#paintStored();
      if (!painted) client.#asking = client.#askFirstPage(options);
      if (painted) {
        // Painted from storage; the host takes over with its first view.
        client.#start().catch((err) => (FALL_BACK.includes(err?.code) ? reattach(client) : client.#failed(err)));
        return client;
      }
      try {
        await client.#start();
        return client;
      } catch (err) {
        client.close();
        if (!FALL_BACK.includes(/** @type {any} */ (err)?.code)) throw err;
        reason = err;
      }
    }
    return /** @type {any} */ (OnPageClient.connect({ ...options, ...pageOptions }, reason));
  }

  async #start() {
    await new Promise((granted) =>
      // Held while this client lives: the worker detaches it when granted.
      navigator.locks.request(this.#tab, () => (granted(null), new Promise((release) => (this.#releaseTab = () => release(null))))),
    );
    await this.#asking;
    await attach(this);
  }

  // A first visit's first page, asked for by this page at once: the
  // worker's script comes one handshake behind this page's (a connection of
  // its own over HTTP/1.1), and its client would ask only once it ran. The
  // host's client takes the answer when its own first request is this one
  // (URL, headers, credentials: the worker's options may add to them),
  // else drops it. Not asked with a paint stored (a return visit) nor while
  // a host runs (it may follow this session already).
  /** @param {SharedConnectOptions} options */
  async #askFirstPage(options) {
    const url = firstPageUrl(options);
    if (!url) return;
    const locks = await navigator.locks.query().catch(() => null);
    if (locks?.held?.some((lock) => lock.name?.startsWith("replay-host:"))) return;
    const headers = new Headers({ Accept: "application/json" });
    const credentials = "same-origin";
    const answer = fetch(url, { headers, credentials })
      .then(async (r) => ({ status: r.status, statusText: r.statusText, headers: [...r.headers], body: await r.arrayBuffer() }))
      .catch((err) => ({ error: String(err?.message ?? err) }));
    this.#firstPage = { sent: { url, headers: [...headers], credentials }, answer };
  }

  #savePaint() {
    const diagnostics = this.diagnostics();
    if (!diagnostics || /memory/.test(diagnostics.storage)) return;
    const { items, ...view } = this.view();
    const paint = { view: { ...view, items: items.slice(-PAINT_ITEMS), notices: [] }, diagnostics };
    try {
      localStorage.setItem(this.#paintKey, JSON.stringify(paint));
    } catch {
      // Full or refused: the next load waits for the host, as without it.
    }
  }

  // The stored paint snapshot as the view (`stored: true`, `restoring`
  // until the host's first view); false when there is none.
  #paintStored() {
    let paint;
    try {
      paint = JSON.parse(/** @type {string} */ (localStorage.getItem(this.#paintKey)));
    } catch {}
    if (!paint?.view) return false;
    const status = { ...paint.view.status, state: "restoring", nextRetryAt: null };
    show(this, (this.#stored = Object.freeze({ ...paint.view, status, stored: true })), { ...paint.diagnostics, status });
    return true;
  }

  // The host refused this client after a stored paint was shown.
  /** @param {unknown} err */
  #failed(err) {
    const view = this.view();
    show(this, Object.freeze(/** @type {View} */ ({ ...view, status: { ...view.status, state: "failed", lastError: wireError(err) } })));
  }

  // The worker's life lock: granted once that worker is gone.
  /** @param {string | null} instance */
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
  // attach to it; the calls waiting are sent again there.
  #restart() {
    if (this.#instance === null) return;
    this.#instance = null;
    this.#watchingHost?.abort();
    reattach(this);
  }

  /**
   * As `ReplayClient.send`; the id is chosen here, so a retry on a new worker keeps it.
   * @param {string} text
   * @param {string | null} [messageId]
   */
  send(text, messageId) {
    return super.send(text, messageId ?? freshMessageId());
  }

  /**
   * As `ReplayClient.cancel`; without `turnId`, the turn this page shows live.
   * @param {string | null} [turnId]
   */
  cancel(turnId) {
    return super.cancel(turnId ?? this.view()?.live?.turn_id ?? null);
  }

  /** Detaches this client (the worker closes the scope's client with its last tab); waiting calls reject with `closed`. */
  close() {
    super.close();
    this.#releaseTab();
    this.#watchingHost?.abort();
  }
}

/** The fallback: today's `ReplayClient` on this page, with the same API. */
class OnPageClient {
  /** @type {import("./index.js").ReplayClient} */
  #client;
  /** @type {import("./messages.js").HostInfo} */
  #host;

  /**
   * @param {import("./index.js").ReplayClient} client
   * @param {import("./messages.js").HostInfo} host
   */
  constructor(client, host) {
    this.#client = client;
    this.#host = host;
  }

  /**
   * @param {ConnectOptions} options
   * @param {unknown} reason
   */
  static async connect(options, reason) {
    // Loaded only here: the shared path never fetches the wasm.
    const replay = await import("./index.js");
    if (typeof replay.default === "function") await replay.default();
    return new OnPageClient(replay.ReplayClient.connect(options), { role: "page", fallback: wireError(reason) });
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

  /** @param {() => void} listener */
  subscribe(listener) {
    return this.#client.subscribe(listener);
  }

  /**
   * @param {string} text
   * @param {string | null} [messageId]
   */
  send(text, messageId) {
    return this.#client.send(text, messageId);
  }

  /** @param {string} id */
  retry(id) {
    return this.#client.retry(id);
  }

  /** @param {string} id */
  async discard(id) {
    return this.#client.discard(id);
  }

  /**
   * @param {string} questionId
   * @param {string} answer
   */
  answer(questionId, answer) {
    return this.#client.answer(questionId, answer);
  }

  /** @param {string | null} [turnId] */
  cancel(turnId) {
    return this.#client.cancel(turnId);
  }

  async transcript() {
    return this.#client.transcript();
  }

  loadOlder() {
    return this.#client.loadOlder();
  }

  close() {
    this.#client.close();
  }
}

const CONNECTING = Symbol("connecting");
