import type { ReplayErrorCode } from "./replay_client.js";

/** Every error the client throws or rejects with; `code` is stable. */
export declare class ReplayError extends Error {
  /** An error with `code`, `message` and, for an HTTP answer, its `status`. */
  constructor(code: ReplayErrorCode, message: string, status?: number);
  /** Always `"ReplayError"` (what a stack trace and `String(err)` show). */
  readonly name: "ReplayError";
  /** Stable, machine-readable reason. */
  readonly code: ReplayErrorCode;
  /** The HTTP status, when an answer had one. */
  readonly status?: number;
}
