// The host's import of the snippet's `adoptFirstPage` (`src/wasm/browser.js`):
// `xtask/src/pkg.rs` writes `first-page.js` only to bundle the hosts, and
// ships neither; this declaration is for the type check of `host.js`.
import type { FirstPageSent } from "./messages.js";

/**
 * A session's first page that a page half asked for itself: taken by the
 * host's client when its own first request is that one, else dropped.
 */
export declare function adoptFirstPage(sent: FirstPageSent, answer: Promise<Response>): void;
