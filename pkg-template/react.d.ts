import type { View } from "./index.js";
import type { Connect, ReplayClientLike, ReplayTarget } from "./connection.js";

export type { Connect, ReplayClientLike, ReplayTarget } from "./connection.js";

/**
 * A client following `options`' target for as long as the component is
 * mounted; `null` until `connect` resolved (and with `options` null).
 * Connects once per target: a StrictMode double mount keeps one client (one
 * stream), a new target closes the old client, unmounting closes it. Other
 * options (`getToken`, `storage`) are read when connecting. A rejected
 * `connect` is thrown to the nearest error boundary.
 */
export declare function useReplay<O extends ReplayTarget, C extends ReplayClientLike>(
  options: O | null | undefined,
  connect: Connect<O, C>,
): C | null;

/**
 * The client's view (`null` without a client, and when rendered on a
 * server), re-rendering on changes, at most as often as the client notifies
 * (once per animation frame by default).
 */
export declare function useReplayView(client: ReplayClientLike | null | undefined): View | null;
/**
 * The part of the view `selector` picks: the component re-renders only when
 * it is a different value (unchanged parts of a view keep their objects).
 */
export declare function useReplayView<T>(
  client: ReplayClientLike | null | undefined,
  selector: (view: View) => T,
): T | null;
