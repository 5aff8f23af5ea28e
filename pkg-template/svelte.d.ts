import type { View } from "./index.js";
import type { Connect, ReplayClientLike, ReplayTarget } from "./connection.js";

export type { Connect, ReplayClientLike, ReplayTarget } from "./connection.js";

/** What {@link replay} returns: reactive fields (Svelte 5). */
export interface Replay<C extends ReplayClientLike> {
  /** The client, `null` until `connect` resolved. */
  readonly client: C | null;
  /** Its latest view. */
  readonly view: View | null;
  /** Why `connect` rejected, if it did. */
  readonly error: unknown;
}

/**
 * Follows `options`' target while something reads the result's fields in
 * an effect or a template: connects on the first read, closes once no
 * effect reads them (the component unmounted). For another target make a
 * new one, e.g. `const chat = $derived(replay({ baseUrl, sessionId }, connect))`.
 */
export declare function replay<O extends ReplayTarget, C extends ReplayClientLike>(
  options: O,
  connect: Connect<O, C>,
): Replay<C>;

/** A readable store (`$view`) of `client`'s view; the client stays yours to close. */
export declare function replayStore(client: ReplayClientLike): {
  subscribe(run: (view: View) => void): () => void;
};
