// @ts-check
// The page half of a client run in a dedicated worker (`worker.js`): a
// `PageClient` on a port of its own, transferred to the worker with the
// `attach`. It loads no wasm: the page's main thread applies what changed,
// once per frame, and runs the app's listeners. Messages: `messages.d.ts`.
import { PageClient, attach } from "./page-client.js";

/** @typedef {import("./worker-client.js").WorkerConnectOptions} WorkerConnectOptions */

/** A `ReplayClient` running in a worker, seen from the page. */
export class WorkerClient extends PageClient {
  /**
   * @param {Worker | MessagePort} worker
   * @param {WorkerConnectOptions} options
   * @param {symbol} token
   */
  constructor(worker, options, token) {
    if (token !== CONNECTING) throw new TypeError("use WorkerClient.connect()");
    super(options, {
      name: "worker",
      serves: "serve()",
      open: () => {
        const { port1, port2 } = new MessageChannel();
        return { port: port1, worker, post: (msg) => worker.postMessage(msg, [port2]) };
      },
    });
  }

  /**
   * Connects a client inside `worker` (which called `serve()`), resolving
   * once its first view arrived; rejects with a `ReplayError` when the
   * worker could not connect it (e.g. `invalid_options`), when the worker
   * failed to start (`network`), when it speaks another version of the
   * messages (`schema_mismatch`), or when no answer came within
   * `connectTimeoutMs` (default 10 s; `timeout`: was `serve()` called?).
   * @param {Worker | MessagePort} worker
   * @param {WorkerConnectOptions} options
   * @returns {Promise<WorkerClient>}
   */
  static async connect(worker, options) {
    const client = new WorkerClient(worker, options, CONNECTING);
    try {
      await attach(client);
    } catch (err) {
      client.close();
      throw err;
    }
    return client;
  }
}

const CONNECTING = Symbol("connecting");
