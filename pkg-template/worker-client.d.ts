import type { ConnectOptions, Diagnostics, Status, StorageKind, Transcript, View } from "./index.js";
import type { HostInfo } from "./messages.js";

/**
 * What a page passes to a client in a worker: `ConnectOptions` without
 * functions (they cannot cross to a worker; give `getToken`, `fetch` or a
 * storage adapter to `serve()` there); `credentials` crosses. `storage`
 * defaults to `"indexeddb"`.
 */
export type WorkerConnectOptions = Omit<ConnectOptions, "getToken" | "storage" | "fetch"> & {
  storage?: Exclude<StorageKind, "local" | "session">;
};

/**
 * A `ReplayClient` running in a dedicated worker (which called `serve()`),
 * seen from the page. Call `close()` before terminating the worker: a page
 * is not told that its worker stopped (Chromium has no `close` event on a
 * `MessagePort` yet), so its calls would wait.
 */
export declare class WorkerClient {
  private constructor();
  /**
   * Connects a client inside `worker` (a `Worker` that called `serve()`, or
   * a `MessagePort` to one); resolves once its first view arrived. Rejects
   * with a `ReplayError`: the worker's own (e.g. `invalid_options`),
   * `network` when the worker failed to start, `schema_mismatch` when it
   * speaks another version of the messages, `timeout` when it did not
   * answer within `connectTimeoutMs` (default 10 s).
   */
  static connect(worker: Worker | MessagePort, options: WorkerConnectOptions): Promise<WorkerClient>;
  /** The latest view: the same object until something changed, and unchanged parts keep their objects. */
  view(): View;
  /** The connection status (the view's `status`). */
  status(): Status;
  /** Counters and position, as of the latest view; `host` says which worker runs the client. */
  diagnostics(): Diagnostics & { host: HostInfo };
  /** Calls `listener` after each change the worker posts; returns an unsubscribe function. */
  subscribe(listener: () => void): () => void;
  /** As `ReplayClient.send`. */
  send(text: string, messageId?: string | null): Promise<{ turnId: string }>;
  /** As `ReplayClient.retry`: a failed message by its `message_id`, or a failed answer by its question's id. */
  retry(id: string): Promise<{ turnId: string } | undefined>;
  /** As `ReplayClient.discard`, asked of the worker. */
  discard(id: string): Promise<boolean>;
  /** As `ReplayClient.answer`. */
  answer(questionId: string, answer: string): Promise<void>;
  /** As `ReplayClient.cancel`. */
  cancel(turnId?: string | null): Promise<void>;
  /** As `ReplayClient.loadOlder`: the page before the oldest item, put first; the host reads it. */
  loadOlder(): Promise<void>;
  /** As `ReplayClient.transcript`, asked of the worker (it rejects for non-session scopes). */
  transcript(): Promise<Transcript>;
  /** Closes the client in the worker; calls still waiting reject with code `closed`. */
  close(): void;
}
