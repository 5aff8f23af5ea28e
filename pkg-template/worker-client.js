// The page half of a client run in a dedicated worker (`worker.js`): a view
// kept from the parts the worker posts, and the client's calls forwarded to
// it. It loads no wasm: the page's main thread applies what changed, once per
// notification, and runs the app's listeners.
import { ReplayError } from "./replay_error.js";

const toError = ({ code, message, status }) => new ReplayError(code, message, status);
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
   * failed to start (`network`), or when no answer came within
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
        port1.postMessage({ call: "close" });
        port1.close();
        reject(err);
      };
      // A worker whose script did not load or threw says so only here.
      const failedToStart = (event) =>
        settle(new ReplayError("network", `the worker failed: ${event.message ?? "it did not start"}`));
      const timer = setTimeout(
        () => settle(new ReplayError("timeout", "no answer from the worker: does it call serve()?")),
        options?.connectTimeoutMs ?? 10_000,
      );
      worker.addEventListener?.("error", failedToStart);
      port1.onmessage = ({ data }) => {
        if (data.failed) return settle(toError(data.failed));
        const waiting = client.#view === null;
        client.#receive(data);
        if (waiting) settle(null);
      };
      try {
        worker.postMessage({ type: "replay-client.connect", options }, [port2]);
      } catch (err) {
        // E.g. a function among the options: it cannot be cloned.
        settle(new ReplayError("invalid_options", `options cannot cross to a worker (give functions to serve()): ${err.message}`));
      }
    });
  }

  #receive(data) {
    if ("id" in data) {
      const call = this.#pending.get(data.id);
      this.#pending.delete(data.id);
      if (data.error) call?.reject(toError(data.error));
      else call?.resolve(data.value);
      return;
    }
    if (this.#closed) return;
    this.#diagnostics = data.diagnostics;
    // Nothing of the view changed: the same view, no listener called. (The
    // first post holds every part; nobody listens before it.)
    if (Object.keys(data.view).length === 0) return;
    // A new object when anything changed; the parts not posted keep theirs.
    this.#view = Object.freeze({ ...this.#view, ...data.view });
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
      this.#port.postMessage({ id, call, args });
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

  /** Counters and position, as of the latest view. */
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
    this.#port.postMessage({ call: "close" });
    this.#port.close();
    for (const { reject } of this.#pending.values()) reject(closedError());
    this.#pending.clear();
    this.#listeners = [];
  }
}

const CONNECTING = Symbol("connecting");
