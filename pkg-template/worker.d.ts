import type { ConnectOptions } from "./index.js";

/**
 * Serves `WorkerClient.connect` calls from the page that started this
 * dedicated worker: one `ReplayClient` per call, on a port of its own.
 * `defaults` apply under every page's options; a `getToken` or `fetch`
 * function or a storage adapter can only be given here (`credentials` may
 * come from the page too). Storage defaults to
 * `"indexeddb"` (a worker has no `localStorage`).
 */
export declare function serve(defaults?: Partial<ConnectOptions>): void;
