import type { ConnectOptions } from "./replay_client.js";

/**
 * Sends, before the wasm is loaded, the first request a client connected
 * with the same `options` asks for on a first visit (nothing stored for its
 * session): the newest page with `tail`, else the first page of the
 * history. Call it as the page starts, then `await init()` and
 * `ReplayClient.connect(options)`: the client takes the answer in flight
 * when its first page is that request (same URL and headers), else it is
 * aborted, as it is when no client asks for it within 30 s. Sends nothing
 * when a value is stored, for another scope than a session, or with a
 * storage adapter. Never throws. The hosts (`serve`, `serveShared`) call it
 * themselves when a page attaches.
 */
export declare function prefetch(options: ConnectOptions): void;
