// @ts-check
// The page<->worker messages (types: `messages.d.ts`, the one schema both
// hosts use). Every message carries `v`; a receiver checks it with `read`.
import { ReplayError } from "./replay_error.js";

/** @typedef {import("./messages.js").PageMessage} PageMessage */
/** @typedef {import("./messages.js").WorkerMessage} WorkerMessage */
/** @typedef {import("./messages.js").WireError} WireError */

/** The schema's version: bump it with any change to a message's shape. */
export const SCHEMA = 3;

/**
 * A message of this schema: `{ v: SCHEMA, type, ...fields }`.
 * @template {string} T
 * @param {T} type
 * @param {object} [fields]
 */
export const message = (type, fields) => ({ v: SCHEMA, type, ...fields });

/**
 * `data` as a message of this schema, or a `ReplayError` (`schema_mismatch`)
 * saying which version came: the caller refuses it.
 * @param {any} data
 * @returns {PageMessage | WorkerMessage | ReplayError}
 */
export function read(data) {
  if (data?.v === SCHEMA && typeof data.type === "string") return data;
  const came = data?.v === undefined ? "an unversioned message" : `version ${data.v}`;
  return new ReplayError("schema_mismatch", `page and worker disagree: ${came}, this side speaks version ${SCHEMA} (reload every tab of this site)`);
}

/**
 * A thrown value as it crosses: a `ReplayError`'s code, or `fallback`.
 * @param {any} err
 * @returns {WireError}
 */
export const wireError = (err, fallback = "invalid_options") => ({
  code: typeof err?.code === "string" ? err.code : fallback,
  message: String(err?.message ?? err),
  status: typeof err?.status === "number" ? err.status : undefined,
});

/** @param {WireError} e */
export const toError = ({ code, message, status }) => new ReplayError(code, message, status);

/**
 * How long the page half waits for its worker to answer unless the options'
 * `connectTimeoutMs` says otherwise: the client's own connect timeout
 * (`Config::DEFAULT_CONNECT_TIMEOUT_MS`; `tests/defaults_once.rs` keeps the
 * two equal), the only default the page half needs without the wasm.
 */
export const CONNECT_TIMEOUT_MS = 10_000;

/** The `ReplayClient` methods a page may call through a worker. */
export const CALLS = ["send", "retry", "discard", "answer", "cancel", "transcript", "loadOlder"];

/**
 * The log `options` follow, named as the core names it (`Target::key`:
 * `session:ses_1`, `system:runtime`, `global`), read from the options as
 * `ReplayClient.connect` reads them (`connectOptions` in browser.js, which
 * also refuses what is not a string): for `"session"` the `sessionId` wins
 * over `scopeId`, `"system"` without an id is `runtime`, `"global"` has
 * none. The one target rule of the JS halves (the bindings through
 * connection.js, the shared host), pinned to the core's by
 * tests/js/targets.test.mjs and tests/fixtures/targets.json.
 * @param {{ scope?: string, scopeId?: string, sessionId?: string }} options
 * @returns {string}
 */
export function logKey({ scope = "session", scopeId, sessionId }) {
  if (scope == "global") return scope;
  const id = scope == "session" ? (sessionId ?? scopeId) : scope == "system" ? (scopeId ?? "runtime") : scopeId;
  return `${scope}:${id ?? ""}`;
}

/**
 * One string per followed target (base URL and log): options that name the
 * same log share it.
 * @param {{ baseUrl?: string, scope?: string, scopeId?: string, sessionId?: string } | null | undefined} options
 * @returns {string | null}
 */
export function targetKey(options) {
  if (options == null) return null;
  return JSON.stringify([options.baseUrl, logKey(options)]);
}
