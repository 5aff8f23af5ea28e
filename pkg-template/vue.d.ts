import type { MaybeRefOrGetter, ShallowRef } from "vue";
import type { View } from "./index.js";
import type { Connect, ReplayClientLike, ReplayTarget } from "./connection.js";

export type { Connect, ReplayClientLike, ReplayTarget } from "./connection.js";

/** What {@link useReplay} returns. */
export interface UseReplay<C extends ReplayClientLike> {
  /** The client, `null` until `connect` resolved. */
  client: ShallowRef<C | null>;
  /** Its latest view, a new object only when something changed. */
  view: ShallowRef<View | null>;
  /** Why `connect` rejected, if it did. */
  error: ShallowRef<unknown>;
}

/**
 * Follows `options`' target (a value, ref or getter) in the current effect
 * scope: a new target closes the old client and connects again; the client
 * is closed when the scope is disposed (the component unmounts).
 */
export declare function useReplay<O extends ReplayTarget, C extends ReplayClientLike>(
  options: MaybeRefOrGetter<O | null | undefined>,
  connect: Connect<O, C>,
): UseReplay<C>;
