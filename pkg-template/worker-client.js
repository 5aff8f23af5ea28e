// The page half of a client run in a dedicated worker (`worker.js`): a view
// kept from the parts the worker posts, and the client's calls forwarded to
// it. It loads no wasm: the page's main thread applies what changed, once per
// notification, and runs the app's listeners. Messages: `messages.d.ts`.
import { ReplayError } from "./replay_error.js";
import { CONNECT_TIMEOUT_MS, message, read, toError } from "./messages.js";

const closedError = () => new ReplayError("closed", "the client is closed");

/** A `ReplayClient` running in a worker, seen from the page. */
export class WorkerClient {
  #port;
  #view = null;
  #diagnostics = null;
  #listeners = [];
  #pending = new Map();
  #nextId = 0;
  #closed = false;

  constructor(port, token) {
    if (token !== CONNECTING) throw new TypeError("use WorkerClient.connect()");
    this.#port = port;
  }

  /**
   * Connects a client inside `worker` (which called `serve()`), resolving
   * once its first view arrived; rejects with a `ReplayError` when the
   * worker could not connect it (e.g. `invalid_options`), when the worker
   * failed to start (`network`), when it speaks another version of the
   * messages (`schema_mismatch`), or when no answer came within
   * `connectTimeoutMs` (default 10 s; `timeout`: was `serve()` called?).
   */
  static connect(worker, options) {
    return new Promise((resolve, reject) => {
      const { port1, port2 } = new MessageChannel();
      const client = new WorkerClient(port1, CONNECTING);
      const settle = (err) => {
        clearTimeout(timer);
        worker.removeEventListener?.("error", failedToStart);
        if (!err) return resolve(client);
        // Should the worker attach the client later, it closes it at once.
        port1.postMessage(message("close"));
        port1.close();
        reject(err);
      };
      // A worker whose script did not load or threw says so only here.
      const failedToStart = (event) =>
        settle(new ReplayError("network", `the worker failed: ${event.message ?? "it did not start"}`));
      const timer = setTimeout(
        () => settle(new ReplayError("timeout", "no answer from the worker: does it call serve()?")),
        options?.connectTimeoutMs ?? CONNECT_TIMEOUT_MS,
      );
      worker.addEventListener?.("error", failedToStart);
      port1.onmessage = ({ data }) => {
        const msg = read(data);
        if (msg instanceof Error) return client.#fail(msg, settle);
        if (msg.type === "failed") return client.#fail(toError(msg.error), settle);
        const waiting = client.#view === null;
        client.#receive(msg);
        if (waiting && client.#view !== null) settle(null);
      };
      try {
        worker.postMessage(message("attach", { options }), [port2]);
      } catch (err) {
        // E.g. a function among the options: it cannot be cloned.
        settle(new ReplayError("invalid_options", `options cannot cross to a worker (give functions to serve()): ${err.message}`));
      }
    });
  }

  // Refused (at connect) or cut off later: nothing more comes on this port.
  #fail(err, settle) {
    if (this.#view === null) return settle(err);
    for (const { reject } of this.#pending.values()) reject(err);
    this.#pending.clear();
  }

  #receive(msg) {
    if (msg.type === "reply") {
      const call = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      if (msg.error) call?.reject(toError(msg.error));
      else call?.resolve(msg.value);
      return;
    }
    if (this.#closed || msg.type !== "view") return;
    this.#diagnostics = { ...msg.diagnostics, host: msg.host };
    // Nothing of the view changed: the same view, no listener called. (The
    // first post holds every part; nobody listens before it.)
    if (Object.keys(msg.view).length === 0) return;
    // A new object when anything changed; the parts not posted keep theirs.
    this.#view = Object.freeze({ ...this.#view, ...msg.view });
    for (const listener of [...this.#listeners]) {
      try {
        listener();
      } catch (err) {
        // One listener's error neither stops the others nor this port.
        reportError(err);
      }
    }
  }

  #call(call, args) {
    if (this.#closed) return Promise.reject(closedError());
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#port.postMessage(message("call", { id, call, args }));
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

  /** Counters and position, as of the latest view; `host` says which worker. */
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

  /** As `ReplayClient.send`. */
  send(text, messageId) {
    return this.#call("send", [text, messageId]);
  }

  /** As `ReplayClient.answer`. */
  answer(questionId, answer) {
    return this.#call("answer", [questionId, answer]);
  }

  /** As `ReplayClient.cancel`. */
  cancel(turnId) {
    return this.#call("cancel", [turnId]);
  }

  /** As `ReplayClient.transcript`, asked of the worker. */
  transcript() {
    return this.#call("transcript", []);
  }

  /** Closes the client in the worker; calls still waiting reject with code `closed`. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#port.postMessage(message("close"));
    this.#port.close();
    for (const { reject } of this.#pending.values()) reject(closedError());
    this.#pending.clear();
    this.#listeners = [];
  }
}

const CONNECTING = Symbol("connecting");
