import type { ConnectOptions, Diagnostics, Status, Transcript, View } from "./index.js";
import type { HostInfo, PageConnectOptions } from "./messages.js";

export type { HostInfo } from "./messages.js";

/**
 * What a tab asks the shared host for: `ConnectOptions` without functions,
 * credentials or storage (those are the worker script's, given to
 * `serveShared()`).
 */
export type SharedConnectOptions = Omit<PageConnectOptions, "storage">;

/**
 * A client hosted by a SharedWorker (whose script calls `serveShared()`)
 * for every tab of this origin, seen from this tab; or, where that cannot
 * run, the client on this page (`diagnostics().host.role` says which).
 */
export declare class SharedClient {
  private constructor();
  /**
   * Connects through the shared host `startWorker()` starts, e.g.
   * `() => new SharedWorker(new URL("./replay.shared.ts", import.meta.url), { type: "module", name: "replay" })`;
   * resolves once the first view arrived, or at once when this origin's
   * storage keeps a paint snapshot of the target (written when a tab of it
   * was hidden or left, unless the host stores nothing on disk): the view
   * is then that snapshot (`stored: true`, `restoring`) until the host's
   * first view replaces it, and a refusal of the host shows as `failed`
   * with its `lastError`. Where `SharedWorker` or Web Locks
   * are missing, the worker does not start or answer within
   * `connectTimeoutMs` (default 10 s), or it speaks another version of the
   * messages, the client runs on this page with `options` and then
   * `pageOptions` (where `getToken`, `headers`, `credentials`, `fetch` and `storage` go for that
   * case). Rejects with the host's `ReplayError` when it refused the
   * options (`invalid_options`).
   */
  static connect(
    startWorker: () => SharedWorker,
    options: SharedConnectOptions,
    pageOptions?: Partial<ConnectOptions>,
  ): Promise<SharedClient>;
  /** The latest view: the same object until something changed, and unchanged parts keep their objects. */
  view(): View;
  /** The connection status (the view's `status`). */
  status(): Status;
  /** Counters and position, as of the latest view; `host` says who runs the client. */
  diagnostics(): Diagnostics & { host: HostInfo };
  /** Calls `listener` after each change; returns an unsubscribe function. */
  subscribe(listener: () => void): () => void;
  /** As `ReplayClient.send`; the message id is chosen on the page, so a retry on a new worker keeps it. */
  send(text: string, messageId?: string | null): Promise<{ turnId: string }>;
  /** As `ReplayClient.retry`: a failed message by its `message_id`, or a failed answer by its question's id. */
  retry(id: string): Promise<{ turnId: string } | undefined>;
  /** As `ReplayClient.discard`, asked of the host. */
  discard(id: string): Promise<boolean>;
  /** As `ReplayClient.answer`. */
  answer(questionId: string, answer: string): Promise<void>;
  /** As `ReplayClient.cancel`; without `turnId`, the turn this page shows live. */
  cancel(turnId?: string | null): Promise<void>;
  /** As `ReplayClient.loadOlder`: the page before the oldest item, put first; the host reads it. */
  loadOlder(): Promise<void>;
  /** As `ReplayClient.transcript`, asked of the host (it rejects for non-session scopes). */
  transcript(): Promise<Transcript>;
  /** Detaches this tab's client (the host closes the scope's client with its last tab); waiting calls reject with `closed`. */
  close(): void;
}
