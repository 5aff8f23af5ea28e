import type { View } from "./index.js";

/**
 * What a binding needs of a client: `ReplayClient`, `WorkerClient` and the
 * shared host's client all have it.
 */
export interface ReplayClientLike {
  /** The latest view: the same object until something changed. */
  view(): View;
  /** Calls `listener` after changes; returns an unsubscribe function. */
  subscribe(listener: () => void): () => void;
  /** Sessions read newest first: puts the page before the oldest item first (`view.hasOlder`). */
  loadOlder(): Promise<void>;
  /** Stops following; nothing more is sent. */
  close(): void;
}

/**
 * The options fields that name what is followed (`ConnectOptions` has
 * them): a binding connects again only when one of them changes.
 */
export interface ReplayTarget {
  /** The runtime's base URL, as in `ConnectOptions`. */
  baseUrl: string;
  /** The session followed, as in `ConnectOptions`. */
  sessionId?: string;
  /** The scope followed, as in `ConnectOptions` (default `"session"`). */
  scope?: string;
  /** The scope's id, as in `ConnectOptions`. */
  scopeId?: string;
}

/** Makes a client for `options`: e.g. `ReplayClient.connect` after `init()`, or `WorkerClient.connect`. */
export type Connect<O extends ReplayTarget, C extends ReplayClientLike> = (options: O) => C | Promise<C>;

export { logKey, targetKey } from "./messages.js";
