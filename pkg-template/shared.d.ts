import type { ConnectOptions } from "./index.js";

/** What `serveShared()` resolves to: the host's counts, for devtools and tests. */
export interface SharedHost {
  /** Scopes followed now (one client each) and the tabs' clients attached to them. */
  readonly counts: { scopes: number; attachments: number };
}

/**
 * Serves `SharedClient.connect` from every tab of this origin, in the
 * SharedWorker script the app owns: one client per (base URL, scope, scope
 * id), shared by every tab that follows it and closed with the last one.
 * `defaults` apply under every tab's options. The credentials (`getToken`,
 * `headers`, `credentials`), `fetch` and the storage are given here only: a tab naming them is
 * refused with `invalid_options`, and with a `baseUrl` here a tab may follow
 * no other. Storage defaults to `"indexeddb"`. Resolves once it serves.
 */
export declare function serveShared(defaults?: Partial<ConnectOptions>): Promise<SharedHost>;
