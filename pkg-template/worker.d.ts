import type { ConnectOptions } from "./index.js";

/**
 * Serves `WorkerClient.connect` calls from the page that started this
 * dedicated worker: one `ReplayClient` per call, on a port of its own.
 * `defaults` apply under every page's options; a `getToken` function or a
 * storage adapter can only be given here. Storage defaults to
 * `"indexeddb"` (a worker has no `localStorage`).
 */
export declare function serve(defaults?: Partial<ConnectOptions>): void;
