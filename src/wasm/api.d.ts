/** Where the client keeps `{epoch, cursor, state}` between page loads. */
export type StorageKind = "local" | "session" | "indexeddb" | "memory";

/**
 * A storage of your own; each method may return a value or a Promise of it.
 * `set` is called with every save, also one older than a value another tab
 * stored under the same key (the built-in storages skip those: see the README).
 */
export interface StorageAdapter {
  /** The value stored under `key`; `null` or `undefined` when there is none. */
  get(key: string): string | null | undefined | Promise<string | null | undefined>;
  /** Stores `value` under `key`, replacing what was there. */
  set(key: string, value: string): void | Promise<void>;
  /** Removes what is stored under `key` (the stored value was unreadable). */
  remove(key: string): void | Promise<void>;
}

/** The logbooks a client can follow (PROTOCOL.md §1); `global` is the all-scopes list. */
export type ScopeName = "session" | "team" | "process" | "worktree" | "system" | "global";

/** What `getToken` is asked for. */
export interface TokenRequest {
  /** The server refused the last token (401/403): return a fresh one, not a cached one. */
  refresh: boolean;
}

/** Options of {@link ReplayClient.connect}. */
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
  /**
   * Whether the browser sends cookies with every request (fetch's `credentials`); default
   * `"same-origin"`: none to a runtime at another origin (another port counts). A runtime that
   * authenticates with a cookie (replay-server: `--token` with the `replay_token` cookie) at
   * another origin needs `"include"`, and must allow it (`--allow-credentials` and the page's
   * `--allow-origin`, never `*`). A 401 from another origin without it says so.
   */
  credentials?: "omit" | "same-origin" | "include";
  /**
   * Called instead of the global `fetch` for every request the client makes (JSON pages, writes,
   * the live stream, the multiplexed stream), with fetch's arguments: a wrapper adding trace
   * headers, a test double, a desktop shell's or Service Worker's own fetch. The multiplexed stream
   * goes through the first connected client's.
   */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
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
  /**
   * A message `send` queued (offline, server unreachable) and not accepted
   * this long after it was sent becomes `failed` with `expired` instead of
   * being sent long after the user meant it (default 86 400 000: a day).
   */
  outboxMaxAgeMs?: number;
  /**
   * Sessions: a first visit (nothing stored) paints the newest page first,
   * at least this many events from the start of a turn (at most 5000), and
   * follows live from there; `loadOlder()` reads the pages before it, and
   * `view.hasOlder` says whether any is left. Default 40: one page that
   * fills a screen, in one round trip. 0: the whole history is read first.
   * A runtime without the extension (protocol §4.1) is read forward either
   * way.
   */
  tail?: number;
  /** Seed of the reconnect jitter (tests); random by default. */
  seed?: number;
  /**
   * Receive the live events over the one multiplexed stream (protocol §4.6) this page or worker holds
   * for `baseUrl` and `credentials`, shared with every client connected so with `multiplex: true` (the
   * stream is sent with the first one's `headers`, `getToken` and `fetch`); default false: a stream of its own. The shared host
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
  /** A restore read past the head the server announced, or past its byte or event budget. */
  | "history_past_head" | "history_too_large"
  /** The stream ended right after its `hello`: counted as a failed connection for the backoff. */
  | "stream_ended_early"
  | "stalled" | "network" | "corrupt_storage" | "storage_fallback"
  | "closed" | "invalid_options" | "timeout"
  /** A queued message was not accepted within `outboxMaxAgeMs` of its sending: never sent. */
  | "expired"
  /** The message (the answer) was discarded (`discard(id)`) before the runtime accepted it. */
  | "discarded"
  /** `answer()` while another answer to the question is queued or being sent (the same answer again waits for it). */
  | "answer_pending"
  /** The server answered, but without CORS headers for this page's origin (`--allow-origin`). */
  | "cors"
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
  /** Stable, machine-readable reason (as `ReplayError.code`). */
  code: ReplayErrorCode;
  /** What happened, with the server's own words where it gave some. */
  message: string;
  /** The HTTP status, when an answer had one. */
  status?: number;
}

/**
 * Connection status. `since` and `nextRetryAt` are milliseconds on the client's monotonic clock,
 * `performance.timeOrigin + performance.now()`: the same as `Date.now()` unless the system clock was
 * set after the page loaded, and unlike it never stepping back.
 */
export interface Status {
  /** Where the connection is now. */
  state: StatusState;
  /** When `state` was entered. */
  since: number;
  /** In `backoff`: when the next attempt starts; otherwise `null`. */
  nextRetryAt: number | null;
  /** The last error seen; `null` again once live. */
  lastError: ErrorInfo | null;
  /**
   * The backlog of a restore could not be read (a `restore_failed` notice): the view shows the
   * live events over the history it had, and events between the two may be missing. Cleared when
   * the backlog is folded in.
   */
  historyIncomplete: boolean;
}

/** Something the application should know, e.g. a cursor reset or a storage fallback. */
export interface Notice {
  /** What happened: an error code, or one of the notices' own codes. */
  code:
    | ReplayErrorCode
    | "restore_failed" | "storage_fallback" | "cursor_reset" | "restored"
    | "gap_repaired" | "turn_interrupted" | "stream_muted";
  /** The same in words. */
  message: string;
  /** Milliseconds on the client's monotonic clock (see `Status`). */
  at: number;
  /** The HTTP status, when the notice came from an answer (e.g. 409 for `cursor_reset`). */
  status?: number;
}

/** One committed item of a transcript (PROTOCOL.md §7). */
export type TranscriptItem =
  | { kind: "message"; message_id: string; turn_id: string; role: "user" | "assistant"; text: string }
  /** A tool card; `input` is the call's input as `tool.started` gave it (any JSON; `null` when it had none). */
  | { kind: "tool"; call_id: string; turn_id: string; name: string; status: "running" | "ok" | "error"; output: string | null; input: unknown }
  | { kind: "turn_end"; turn_id: string; outcome: "completed" | "failed" | "cancelled"; reason?: string }
  /** A question once answered or declined, at its end's place; while open it is in `pendingPrompts`. */
  | { kind: "question"; question_id: string; turn_id: string; prompt: string; outcome: "answered" | "declined"; answer?: string; reason?: string };

/** An unanswered question; `persisted: false` exists only in the live turn. */
export interface PendingPrompt {
  /** The question's id: what `answer()` takes. */
  question_id: string;
  /** What is asked. */
  prompt: string;
  /** The answer choices offered (may be empty). */
  options: string[];
  /** `false` while the question exists only in the live turn, not yet in the log. */
  persisted: boolean;
  /**
   * In a view's `pendingPrompts`: the answer given with `answer()` and not
   * yet shown ended (the outbox); it leaves with the question. Never in a
   * `Transcript`.
   */
  answer?: PendingAnswer;
}

/** An answer of the outbox, on its question until the question's end is in the view. */
export interface PendingAnswer {
  /** The answer, as given to `answer()`. */
  readonly text: string;
  /** When it was given (ms since the Unix epoch). */
  readonly at: number;
  /**
   * As a message's: `queued`, `sending` (in flight, or accepted), `failed`
   * (the server's code, or `expired`; `retry(questionId)` sends it again,
   * `discard(questionId)` removes it, `answer()` with another text
   * replaces it).
   */
  readonly state: "queued" | "sending" | "failed";
  /** Why it failed. */
  readonly error?: { readonly code: ReplayErrorCode | (string & {}); readonly message: string; readonly status?: number };
}

/** A background task (PROTOCOL.md §3). */
export interface Task {
  /** The task's id. */
  task_id: string;
  /** What the task does, for display. */
  title: string;
  /** Where the task is; `succeeded`, `failed` and `cancelled` are final. */
  state: "queued" | "running" | "succeeded" | "failed" | "cancelled";
  /** The runtime process running it (a `process` scope id), once it has one. */
  process_id?: string;
  /** When it started (the server's timestamp). */
  started_at?: string;
  /** When it ended (the server's timestamp). */
  ended_at?: string;
  /** Why it ended so, e.g. `"worker_restart"` for a task a restart failed. */
  detail?: string;
}

/** Task state as of the newest snapshot. */
export interface TasksState {
  /** The snapshot's version: a snapshot replaces one of a lower version only. */
  version: number;
  /** Every task of the session. */
  tasks: Task[];
  /** Idle between turns but waiting on these background tasks since `since`; else `null`. */
  background_wait: { task_ids: string[]; since: string } | null;
}

/** A tool call inside the live turn. */
export interface LiveTool {
  /** The tool call's id (its `tool` item's `call_id` once committed). */
  call_id: string;
  /** The tool's name, e.g. `"shell"`. */
  name: string;
  /** The runtime's word for it: the reference server says `"running"`, then `"ok"` or `"error"`. */
  state: "running" | "ok" | "error" | (string & {});
  /** The latest progress the runtime reported (droppable: it may skip some). */
  progress: string;
}

/** The running turn shown over the committed history. */
export interface LiveOverlay {
  /** The running turn. */
  turn_id: string;
  /** The assistant message being written. */
  message_id: string;
  /** The text written so far and not yet committed: at most its last 16 384 Unicode scalar values. */
  text: string;
  /** Where `text` starts in the message, in Unicode scalar values (> 0 when its head was cut). */
  text_offset: number;
  /** What the turn is doing. */
  state: "sampling" | "tool_running" | "waiting_for_answer";
  /** The turn's tool calls not yet in `items`: a call shows here only until its start is durable, then as a `tool` item. */
  tools: LiveTool[];
  /** The question the turn waits on, which may not be in the log yet; else `null`. */
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
  /** The turn. */
  turn_id: string;
  /** The text it had shown live when it was cut. */
  partial_text: string;
  /** Why it was set aside (see above). */
  reason: "worker_restart" | "boot_changed";
}

/** The canonical, comparable transcript (PROTOCOL.md §7). */
export interface Transcript {
  /** The log's epoch. */
  epoch: string;
  /** The `seq` of the last durable event it includes. */
  cursor: number;
  /** The committed items, in durable order. */
  items: TranscriptItem[];
  /** The unanswered questions. */
  pending_prompts: PendingPrompt[];
  /** The newest task snapshot. */
  tasks: TasksState;
}

/** Counters since the client started. */
export interface Counters {
  /** Streams reopened after the first. */
  reconnects: number;
  /** Gap repairs completed. */
  gaps_repaired: number;
  /** Durable events received again and dropped. */
  duplicates_dropped: number;
  /** Droppable (`critical: false`) events dropped under load. */
  droppable_dropped: number;
  /** Stream bytes received. */
  bytes: number;
  /** Events decoded (stream frames and backlog entries). */
  events: number;
  /** Restores started, the first one included. */
  restores: number;
}

/**
 * A session as its runtime described it: the title of its `session.created`,
 * and `closed` after `session.closed`, `failed` (with the `reason`) after
 * `session.failed`.
 */
export interface SessionInfo {
  /** The title `session.created` gave (empty until one did). */
  readonly title: string;
  /** `open` until the runtime said `session.closed` or `session.failed`. */
  readonly state: "open" | "closed" | "failed";
  /** Why it failed (`failed` only). */
  readonly reason?: string;
}

/**
 * A durable session event of a type the client does not fold (a runtime's
 * own plans, artifacts, usage), as the runtime wrote it.
 */
export interface ExtraEvent {
  /** Its `seq` in the session. */
  readonly seq: number;
  /** Its type, e.g. `"plan.updated"`. */
  readonly type: string;
  /** Its data, any JSON. */
  readonly data: unknown;
}

/** For the other scopes: the most recent durable events. */
export interface EventLogEntry {
  /** The event's `seq` in its scope (on the `global` list: its row id). */
  seq: number;
  /** The event's type, e.g. `"process.exited"`. */
  type: string;
  /** When the server wrote it (its timestamp). */
  ts: string;
  /** The event's type-specific data. */
  data: unknown;
}

/** A message of the outbox (`View.pending`), between `send` and its commit. */
export interface PendingMessage {
  /** Its idempotency key (`send`'s `messageId`, or one chosen for it). */
  readonly message_id: string;
  /** The user's text, as given to `send`. */
  readonly text: string;
  /** When it was sent (ms since the Unix epoch; `retry` sets it anew). */
  readonly at: number;
  /**
   * `queued`: waiting (offline, server unreachable, behind an older
   * message); `sending`: a request is in flight or the runtime accepted it;
   * `failed`: retrying will not change the answer (`error`) until `retry`
   * or `discard`.
   */
  readonly state: "queued" | "sending" | "failed";
  /** Why it failed: `expired`, or the server's code (`status` beside it). */
  readonly error?: { readonly code: ReplayErrorCode | (string & {}); readonly message: string; readonly status?: number };
}

/** An immutable snapshot: the same object until something changed. */
export interface View {
  /** The scope followed. */
  readonly scope: ScopeName;
  /** The scope's id (the session id for a session; empty for `global`). */
  readonly scopeId: string;
  /** The log's epoch; `null` until one is known. */
  readonly epoch: string | null;
  /** The `seq` of the last durable event applied (0: none). */
  readonly cursor: number;
  /** Sessions: the committed messages, tool cards and turn ends, in durable order. */
  readonly items: readonly TranscriptItem[];
  /**
   * Sessions read newest first (`tail`, the default): older items exist
   * before `items[0]`; `loadOlder()` puts them first.
   */
  readonly hasOlder: boolean;
  /** The running turn over the committed items; `null` when none runs. */
  readonly live: LiveOverlay | null;
  /** Turns cut by a runtime restart, with the text they had shown. */
  readonly interrupted: readonly InterruptedTurn[];
  /** The unanswered questions, each with the answer on its way (`answer`), if one is. */
  readonly pendingPrompts: readonly PendingPrompt[];
  /**
   * Sessions: the messages sent and not yet in `items`, in send order
   * (the outbox). Each leaves in the same view that adds its item.
   */
  readonly pending: readonly PendingMessage[];
  /** Background tasks as of the newest snapshot. */
  readonly tasks: TasksState;
  /** Non-session scopes: recent durable events. */
  readonly events: readonly EventLogEntry[];
  /** Sessions: the title and whether it is open; `null` on other scopes. */
  readonly session: SessionInfo | null;
  /**
   * Sessions: the newest 64 durable events of types the client does not
   * fold, newest last (`[]` on other scopes).
   */
  readonly extras: readonly ExtraEvent[];
  /** The connection status (as `status()`). */
  readonly status: Status;
  /** What the application should know, newest last (the last 50). */
  readonly notices: readonly Notice[];
  /**
   * Present only on a shared host's tab that painted a reload from storage
   * (`SharedClient`): the last view the host posted before the page was
   * left (its newest 100 items, no notices), `restoring` until the host's
   * first view replaces it.
   */
  readonly stored?: true;
}

/** What `diagnostics()` returns. */
export interface Diagnostics {
  /** The connection status. */
  status: Status;
  /** Counters since the client started. */
  counters: Counters;
  /** The log's epoch; `null` until one is known. */
  epoch: string | null;
  /** The `seq` of the last durable event applied. */
  cursor: number;
  /** Sessions: the boot id of the live tail served (PROTOCOL §1); `null` until known. */
  bootId: string | null;
  /** The storage in use: `custom` for an adapter, `memory-fallback` once the chosen one failed. */
  storage: StorageKind | "custom" | "memory-fallback";
  /**
   * How the live stream comes: `"multiplexed"` through the one multiplexed
   * stream of `multiplex: true` (PROTOCOL §4.6), `"scoped"` on this client's
   * own stream (without `multiplex`, or against a runtime whose
   * `GET /v1/stream` answered 404, 405 or 501), `"polling"` while a stream
   * that a proxy mutes is followed by polling (notice `stream_muted`).
   */
  transport: "multiplexed" | "scoped" | "polling";
}
