/** Where the client keeps `{epoch, cursor, state}` between page loads. */
export type StorageKind = "local" | "session" | "indexeddb" | "memory";

/**
 * A storage of your own; each method may return a value or a Promise of it.
 * `set` is called with every save, also one older than a value another tab
 * stored under the same key (the built-in storages skip those: see the README).
 */
export interface StorageAdapter {
  get(key: string): string | null | undefined | Promise<string | null | undefined>;
  set(key: string, value: string): void | Promise<void>;
  remove(key: string): void | Promise<void>;
}

/** The logbooks a client can follow (PROTOCOL.md §1); `global` is the all-scopes list. */
export type ScopeName = "session" | "team" | "process" | "worktree" | "system" | "global";

/** Options of {@link ReplayClient.connect}. */
/** What `getToken` is asked for. */
export interface TokenRequest {
  /** The server refused the last token (401/403): return a fresh one, not a cached one. */
  refresh: boolean;
}

export interface ConnectOptions {
  /** Runtime base URL, e.g. `http://127.0.0.1:8787`. */
  baseUrl: string;
  /** Follow this session (shorthand for `scope: "session", scopeId`). */
  sessionId?: string;
  /** The scope to follow; default `"session"`. */
  scope?: ScopeName;
  /** The scope's id (`team_1`, `proc_42`, ...); `system` and `global` need none. */
  scopeId?: string;
  /** Static headers sent with every request. */
  headers?: Record<string, string>;
  /**
   * Called before every request for a bearer token. After the server refused a token (401/403) the
   * next call gets `{ refresh: true }`, once: a provider that caches its token must fetch a new one then.
   */
  getToken?: (request: TokenRequest) => string | Promise<string>;
  /** Default `"local"`. Quota errors or missing storage fall back to memory with a notice. */
  storage?: StorageKind | StorageAdapter;
  /**
   * When subscribers are told: once per animation frame (default), synchronously, or at most every N ms.
   * With `"frame"` in a visible page, the live stream's chunks that arrive between two frames are applied
   * together in the next one, where subscribers are told; a hidden page applies them as they come.
   */
  notify?: "frame" | "sync" | number;
  /** Abort a request that has not produced its first byte after this long (default 10 000 ms). */
  connectTimeoutMs?: number;
  /**
   * Backlog pages requested ahead while a restore or repair reads pages
   * (default 2, at most 8; 0 turns it off). Each takes one of the browser's
   * ~6 connections per origin over HTTP/1.1, beside each client's live stream:
   * lower it when several clients restore at once on one HTTP/1.1 origin.
   */
  prefetchDepth?: number;
  /** Seed of the reconnect jitter (tests); random by default. */
  seed?: number;
  /**
   * Receive the live events over the one multiplexed stream (protocol §4.6) this page or worker holds
   * for `baseUrl`, shared with every client connected with `multiplex: true` (the stream is sent with
   * the first one's `headers` and `getToken`); default false: a stream of its own. The shared host
   * (`serveShared`) connects every tab's clients this way. `scope: "global"` keeps its own stream.
   */
  multiplex?: boolean;
}

/** Connection state; `failed` and `stopped` are final. */
export type StatusState =
  | "connecting" | "restoring" | "live" | "repairing"
  | "backoff" | "offline" | "stopped" | "failed";

/**
 * Stable error codes of {@link ReplayError}. An HTTP error answer keeps the
 * server's own code (its body's `error`, e.g. `"not_found"`), with the HTTP
 * status beside it in `status`; `"http_status"` when the body named none.
 */
export type ReplayErrorCode =
  // The client's own (`tests/error_codes.rs` keeps this list equal to what it emits).
  | "bad_json" | "event_too_large" | "invalid_cursor" | "cursor_ahead"
  | "unauthorized" | "http_status" | "wrong_content_type" | "epoch_changed" | "history_mismatch"
  | "page_not_advancing" | "page_over_limit" | "body_too_large"
  | "stalled" | "network" | "corrupt_storage" | "storage_fallback"
  | "closed" | "invalid_options" | "timeout"
  /** `ReplayClient.connect` was called before the wasm was loaded (`await init()` first). */
  | "not_initialized"
  /** A page and the worker hosting its client speak different versions of their messages. */
  | "schema_mismatch"
  // The reference server's, kept from an error answer's body (`status` beside them).
  | "not_found" | "invalid_json" | "invalid_body" | "invalid_message_id" | "invalid_limit"
  | "payload_too_large" | "too_many_turns" | "question_closed" | "answer_not_delivered"
  | "too_many_streams" | "too_many_connections" | "store_unavailable" | "method_not_allowed"
  | "unsupported_media_type" | "host_not_allowed"
  | (string & {});

/** Why the last connection attempt failed. */
export interface ErrorInfo {
  code: ReplayErrorCode;
  message: string;
  status?: number;
}

/**
 * Connection status. `since` and `nextRetryAt` are milliseconds on the client's monotonic clock,
 * `performance.timeOrigin + performance.now()`: the same as `Date.now()` unless the system clock was
 * set after the page loaded, and unlike it never stepping back.
 */
export interface Status {
  state: StatusState;
  since: number;
  nextRetryAt: number | null;
  lastError: ErrorInfo | null;
}

/** Something the application should know, e.g. a cursor reset or a storage fallback. */
export interface Notice {
  code:
    | ReplayErrorCode
    | "restore_failed" | "storage_fallback" | "cursor_reset" | "restored"
    | "gap_repaired" | "turn_interrupted";
  message: string;
  /** Milliseconds on the client's monotonic clock (see `Status`). */
  at: number;
  /** The HTTP status, when the notice came from an answer (e.g. 409 for `cursor_reset`). */
  status?: number;
}

/** One committed item of a transcript (PROTOCOL.md §7). */
export type TranscriptItem =
  | { kind: "message"; message_id: string; turn_id: string; role: "user" | "assistant"; text: string }
  | { kind: "tool"; call_id: string; turn_id: string; name: string; status: "running" | "ok" | "error"; output: string | null }
  | { kind: "turn_end"; turn_id: string; outcome: "completed" | "failed" | "cancelled"; reason?: string };

/** An unanswered question; `persisted: false` exists only in the live turn. */
export interface PendingPrompt {
  question_id: string;
  prompt: string;
  options: string[];
  persisted: boolean;
}

/** A background task (PROTOCOL.md §3). */
export interface Task {
  task_id: string;
  title: string;
  state: "queued" | "running" | "succeeded" | "failed" | "cancelled";
  process_id?: string;
  started_at?: string;
  ended_at?: string;
  detail?: string;
}

/** Task state as of the newest snapshot. */
export interface TasksState {
  version: number;
  tasks: Task[];
  background_wait: { task_ids: string[]; since: string } | null;
}

/** A tool call inside the live turn. */
export interface LiveTool {
  call_id: string;
  name: string;
  /** The runtime's word for it: the reference server says `"running"`, then `"ok"` or `"error"`. */
  state: "running" | "ok" | "error" | (string & {});
  progress: string;
}

/** The running turn shown over the committed history. */
export interface LiveOverlay {
  turn_id: string;
  message_id: string;
  text: string;
  text_offset: number;
  state: "sampling" | "tool_running" | "waiting_for_answer";
  tools: LiveTool[];
  pending_question: { question_id: string; prompt: string; options: string[] } | null;
  /** A hole was seen in the text; it is refreshed by the next snapshot. */
  stale: boolean;
}

/**
 * A turn cut short by a worker restart: its partial text is never promoted. `reason`
 * `"worker_restart"`: the log ended it so; `"boot_changed"`: the stream reached another runtime
 * process (a restart, or another node of a cluster), and the entry goes once the turn ends on its own.
 */
export interface InterruptedTurn {
  turn_id: string;
  partial_text: string;
  reason: "worker_restart" | "boot_changed";
}

/** The canonical, comparable transcript (PROTOCOL.md §7). */
export interface Transcript {
  epoch: string;
  cursor: number;
  items: TranscriptItem[];
  pending_prompts: PendingPrompt[];
  tasks: TasksState;
}

/** Counters since the client started. */
export interface Counters {
  reconnects: number;
  gaps_repaired: number;
  duplicates_dropped: number;
  droppable_dropped: number;
  bytes: number;
  events: number;
  restores: number;
}

/** For the other scopes: the most recent durable events. */
export interface EventLogEntry {
  seq: number;
  type: string;
  ts: string;
  data: unknown;
}

/** An immutable snapshot: the same object until something changed. */
export interface View {
  readonly scope: ScopeName;
  readonly scopeId: string;
  readonly epoch: string | null;
  readonly cursor: number;
  readonly items: readonly TranscriptItem[];
  readonly live: LiveOverlay | null;
  readonly interrupted: readonly InterruptedTurn[];
  readonly pendingPrompts: readonly PendingPrompt[];
  readonly tasks: TasksState;
  /** Non-session scopes: recent durable events. */
  readonly events: readonly EventLogEntry[];
  readonly status: Status;
  readonly notices: readonly Notice[];
}

/** What `diagnostics()` returns. */
export interface Diagnostics {
  status: Status;
  counters: Counters;
  epoch: string | null;
  cursor: number;
  bootId: string | null;
  storage: StorageKind | "custom" | "memory-fallback";
  /**
   * How the live stream comes: `"multiplexed"` through the one multiplexed
   * stream of `multiplex: true` (PROTOCOL §4.6), `"scoped"` on this client's
   * own stream (without `multiplex`, or against a runtime whose
   * `GET /v1/stream` answered 404, 405 or 501).
   */
  transport: "multiplexed" | "scoped";
}
