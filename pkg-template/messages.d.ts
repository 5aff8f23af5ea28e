// The messages between a page and the worker hosting its client: ONE
// schema for both hosts, the dedicated worker (`serve()` / `WorkerClient`)
// and the shared one (`serveShared()` / `SharedClient`). Every message
// carries `v`, the schema's version: a receiver refuses any other version
// with the `ReplayError` code `schema_mismatch` (an old SharedWorker still
// running beside a page of a newer deploy is the case this is for).
import type { ConnectOptions, Diagnostics, ReplayErrorCode, StorageKind, View } from "./index.js";
import type { ReplayError } from "./replay_error.js";

/** The schema's version, in every message (`messages.js` exports it as `SCHEMA`). */
export type SchemaVersion = 3;

/**
 * What a page may ask a worker to connect: `ConnectOptions` without
 * functions or credentials (the worker script gives `getToken`, `headers`,
 * `credentials`, `fetch` and storage adapters to `serve()` / `serveShared()`).
 */
export type PageConnectOptions = Omit<ConnectOptions, "getToken" | "storage" | "headers" | "credentials" | "fetch"> & {
  storage?: Exclude<StorageKind, "local" | "session">;
};

/** A `ReplayError` as it crosses: its code, message and HTTP status. */
export interface WireError {
  /** The error's `code`. */
  code: ReplayErrorCode;
  /** The error's `message`. */
  message: string;
  /** The error's HTTP `status`, when it had one. */
  status?: number;
}

/** Who runs the client a page talks to; `diagnostics().host`. */
export interface HostInfo {
  /** `shared`: a SharedWorker; `worker`: a dedicated worker; `page`: this page. */
  role: "shared" | "worker" | "page";
  /** The worker's id, new each time a worker starts (none on the page). */
  instance?: string;
  /** Shared host: how many pages' clients share this client now. */
  attached?: number;
  /** On the page as a fallback: why the shared host was not used. */
  fallback?: WireError;
}

/**
 * A session's first page, asked for by the page itself before its host ran
 * (a first visit: the shared host's worker starts behind the page): the
 * request as it went. The host's client takes the answer when its own
 * first request is this one (URL, headers, credentials), else drops it.
 */
export interface FirstPageSent {
  /** The request's URL (`firstPageUrl`). */
  url: string;
  /** Its headers, as `[...new Headers(…)]` gives them (lower-case names). */
  headers: [string, string][];
  /** Its `credentials` mode. */
  credentials: RequestCredentials;
}

/**
 * What came of the request in `FirstPageSent`: its head and whole body, or
 * `error` when none came.
 */
export interface FirstPageAnswer {
  /** The response's status. */
  status?: number;
  /** Its status text. */
  statusText?: string;
  /** Its headers, in order. */
  headers?: [string, string][];
  /** Its whole body (transferred). */
  body?: ArrayBuffer;
  /** Why no response came (a network error, or the page closed). */
  error?: string;
}

/** The calls a page forwards; each is the `ReplayClient` method of that name. */
export type CallName = "send" | "retry" | "discard" | "answer" | "cancel" | "transcript" | "loadOlder";

/** Page to worker. */
export type PageMessage =
  /**
   * Connect a client. To a dedicated worker: posted to the worker with the
   * client's port transferred. To the shared one: on its port, with `tab`,
   * the Web Lock the page holds while it wants this client.
   */
  | { v: SchemaVersion; type: "attach"; options: PageConnectOptions; tab?: string; hidden?: boolean; firstPage?: FirstPageSent }
  /**
   * The answer to the request `attach` said the page sent (`firstPage`):
   * its head and whole body, or `error` when none came.
   */
  | ({ v: SchemaVersion; type: "firstPage" } & FirstPageAnswer)
  /** Call a method; answered by a `reply` with the same `id`. */
  | { v: SchemaVersion; type: "call"; id: number; call: CallName; args: unknown[] }
  /** Stop posting views (the page was frozen or went into the back/forward cache). */
  | { v: SchemaVersion; type: "pause" }
  /** Post again, starting with the whole view. */
  | { v: SchemaVersion; type: "resume" }
  /**
   * The page was hidden or shown (as in `attach`): the host's client counts
   * as hidden only while every page showing it is.
   */
  | { v: SchemaVersion; type: "visibility"; hidden: boolean }
  /** This page is done with the client. */
  | { v: SchemaVersion; type: "close" };

/** Worker to page; `host` says which worker instance wrote it. */
export type WorkerMessage =
  /**
   * The parts of the view that changed since this page's last `view`
   * (all of them in the first one, and after a `resume`) and the
   * diagnostics (absent when a page would show no difference; their
   * counters at most once a second). The core makes it
   * (`Machine::page_update`).
   * With `liveText`, `view.live` comes without its `text`: the text is the
   * one this page was posted last with `liveText` appended.
   */
  | { v: SchemaVersion; type: "view"; host: HostInfo; view: Partial<View>; liveText?: string; diagnostics?: Diagnostics }
  /** The outcome of the `call` with this `id`. */
  | { v: SchemaVersion; type: "reply"; host: HostInfo; id: number; value?: unknown; error?: WireError }
  /** The `attach` was refused (bad options, another schema version, no wasm). */
  | { v: SchemaVersion; type: "failed"; host: HostInfo; error: WireError };

/** The version of this schema. */
export declare const SCHEMA: SchemaVersion;
/** The page half's wait for its worker unless `connectTimeoutMs` is given (ms). */
export declare const CONNECT_TIMEOUT_MS: number;
/**
 * The log `options` follow, as the core names it (`session:ses_1`,
 * `system:runtime`, `global`): for `"session"` the `sessionId` wins over
 * `scopeId`, `"system"` without an id is `runtime`.
 */
export declare function logKey(options: { scope?: string; scopeId?: string; sessionId?: string }): string;

/** One string per followed target (base URL and log). */
export declare function targetKey(
  options: { baseUrl?: string; scope?: string; scopeId?: string; sessionId?: string } | null | undefined,
): string | null;

/** A message of this schema: `{ v: SCHEMA, type, ...fields }`. */
export declare function message<T extends string, F extends object = {}>(type: T, fields?: F): { v: SchemaVersion; type: T } & F;
/** `data` as a message of this schema, or a `ReplayError` (`schema_mismatch`) saying which version came. */
export declare function read(data: unknown): PageMessage | WorkerMessage | ReplayError;
/** A thrown value as it crosses: a `ReplayError`'s code, or `fallback` (default `invalid_options`). */
export declare function wireError(err: unknown, fallback?: ReplayErrorCode): WireError;
/** The `ReplayError` a `WireError` stands for. */
export declare function toError(error: WireError): ReplayError;
/** The `ReplayClient` methods a page may call through a worker. */
export declare const CALLS: CallName[];
