// The JS half of the browser layer: what wasm cannot do, or does at a higher
// cost in bytes or crossings. One module on purpose (every snippet file is
// one more request for a page that loads the package unbundled), but for
// `replay_error.js`: the page halves of the hosted clients need that class
// alone, and this whole module is 3 KB gzipped.

// --- Connect options --------------------------------------------------------
// Checks a ConnectOptions object (api.d.ts) and returns it normalised for
// Rust, which reads it by name (`CheckedOptions` in options.rs): `scope` a
// name, `scopeId` the id that scope follows (absent for "global"), `headers`
// as [name, value] pairs, `storage` a kind name or the adapter, `notify`
// "frame", "sync" or milliseconds. What the caller left out stays undefined
// and Rust's defaults apply. Throws an Error whose message says what is
// wrong. In JS because the same checks through js-sys cost ~2 KB gzipped of
// wasm.
const SCOPES = ["session", "team", "process", "worktree", "system", "global"];
const STORAGES = ["local", "session", "indexeddb", "memory"];
const CREDENTIALS = ["omit", "same-origin", "include"];

export function connectOptions(o) {
  const bad = (message) => { throw new Error(message); };
  const isObject = (v) => typeof v === "object" && v !== null;
  const text = (v) => (typeof v === "string" ? v : undefined);
  if (!isObject(o)) bad("options must be an object");
  const baseUrl = text(o.baseUrl);
  if (!baseUrl) bad("baseUrl must be a non-empty string");
  // Resolved against the page, "127.0.0.1:8787" or "/api" would name a path
  // of the page's own server and fail later as a puzzling 404.
  if (!/^https?:\/\/[^/?#]/i.test(baseUrl)) {
    bad(`baseUrl must be an absolute http:// or https:// URL, e.g. "http://127.0.0.1:8787" (got ${JSON.stringify(baseUrl)})`);
  }
  const scope = text(o.scope) ?? "session";
  if (!SCOPES.includes(scope)) bad("unknown scope");
  let scopeId = text(o.scopeId);
  if (scope === "session") scopeId = text(o.sessionId) ?? scopeId;
  if (scope === "system") scopeId ??= "runtime";
  if (scope === "global") scopeId = undefined;
  else if (!scopeId) bad("sessionId or scopeId is required for this scope");
  const { headers, getToken, storage, notify, multiplex, credentials, fetch } = o;
  let pairs = [];
  if (isObject(headers)) {
    pairs = Object.entries(headers);
    if (pairs.some(([, v]) => typeof v !== "string")) bad("headers values must be strings");
  } else if (headers !== undefined) bad("headers must be an object");
  if (getToken !== undefined && typeof getToken !== "function") bad("getToken must be a function");
  if (credentials !== undefined && !CREDENTIALS.includes(credentials)) bad('credentials must be "omit", "same-origin" or "include"');
  if (fetch !== undefined && typeof fetch !== "function") bad("fetch must be a function");
  if (typeof storage === "string" && !STORAGES.includes(storage)) bad("unknown storage kind");
  if (storage !== undefined && typeof storage !== "string"
    && !(isObject(storage) && ["get", "set", "remove"].every((m) => typeof storage[m] === "function"))) {
    bad("storage must be a kind or an object with get, set and remove");
  }
  if (notify !== undefined && notify !== "frame" && notify !== "sync" && !(typeof notify === "number" && notify >= 0)) {
    bad('notify must be "frame", "sync" or a number');
  }
  if (multiplex !== undefined && typeof multiplex !== "boolean") bad("multiplex must be a boolean");
  const number = (name) => {
    const v = o[name];
    if (v !== undefined && (typeof v !== "number" || !Number.isFinite(v) || v < 0)) bad(name + " must be a number >= 0");
    return v;
  };
  // A page's cookies go to another origin only with "include": a 401 from
  // there names that fix (options.rs `unauthorized_hint`).
  let crossOrigin = true;
  try { crossOrigin = new URL(baseUrl).origin !== globalThis.location?.origin; } catch { bad("baseUrl is not a valid URL"); }
  return {
    baseUrl, scope, scopeId, headers: pairs, getToken, storage, notify, multiplex, credentials, fetch, crossOrigin,
    connectTimeoutMs: number("connectTimeoutMs"), prefetchDepth: number("prefetchDepth"), seed: number("seed"),
    outboxMaxAgeMs: number("outboxMaxAgeMs"), tail: number("tail"),
  };
}

// --- Clock ------------------------------------------------------------------
// The machine's clock (js.rs `now`): monotonic, on the Unix epoch's scale.
// Date.now() steps when the system clock is set, and every deadline the
// machine computed before the step would move with it.
export function monotonicNow() {
  return performance.timeOrigin + performance.now();
}

// --- Transcript items -----------------------------------------------------
// Builds transcript items from one UTF-8 buffer holding their strings back
// to back and a layout: per item a kind code, then the UTF-16 end offset of
// each string field (NONE for null). One decode for a whole batch instead
// of a JSON text parsed again or a crossing per string. Properties are in
// the order of the items' JSON, so both forms stringify the same.
const decoder = new TextDecoder();
const NONE = 0xffffffff;

// The view and its `live` part, built by Rust in one call each (see view.rs).
// The view's keys are in the order of the core's page updates (`PAGE_PARTS`):
// a worker host names an update's parts by them (host.js, `Object.keys`),
// pinned by tests/fixtures/view_parts.json (tests/js/view_parts.test.mjs).
export function viewObject(scope, scopeId, epoch, cursor, items, events, live, interrupted, pendingPrompts, tasks, status, notices, session, extras, pending, hasOlder) {
  return Object.freeze({ scope, scopeId, epoch, cursor, items, events, live, interrupted, pendingPrompts, tasks, status, notices, session, extras, pending, hasOlder });
}

export function liveObject(turn_id, message_id, text_offset, state, tools, pending_question, stale, text) {
  return { turn_id, message_id, text_offset, state, tools, pending_question, stale, text };
}

export function buildItems(bytes, layout) {
  const text = decoder.decode(bytes);
  const items = [];
  let at = 0;
  let i = 0;
  const next = () => {
    const end = layout[i++];
    if (end === NONE) return null;
    const s = text.slice(at, end);
    at = end;
    return s;
  };
  while (i < layout.length) {
    switch (layout[i++]) {
      case 0:
        items.push({ kind: "message", message_id: next(), turn_id: next(), role: next(), text: next() });
        break;
      case 1:
        // `input` crosses as its JSON text.
        items.push({ kind: "tool", call_id: next(), turn_id: next(), name: next(), status: next(), output: next(), input: JSON.parse(next()) });
        break;
      case 2: {
        const item = { kind: "turn_end", turn_id: next(), outcome: next() };
        const reason = next();
        if (reason !== null) item.reason = reason;
        items.push(item);
        break;
      }
      default: {
        const item = { kind: "question", question_id: next(), turn_id: next(), prompt: next(), outcome: next() };
        const answer = next();
        const reason = next();
        if (answer !== null) item.answer = answer;
        if (reason !== null) item.reason = reason;
        items.push(item);
      }
    }
  }
  return items;
}

// --- IndexedDB ------------------------------------------------------------
// A minimal key-value store for the client's persisted value: database
// "replay-client", object store "kv", string values. In JS because the
// equivalent web-sys bindings cost more bytes.

let dbPromise = null;

function db() {
  if (!dbPromise) {
    dbPromise = new Promise((resolve, reject) => {
      if (typeof indexedDB === "undefined") {
        reject(new Error("indexedDB is not available"));
        return;
      }
      const req = indexedDB.open("replay-client", 1);
      req.onupgradeneeded = () => req.result.createObjectStore("kv");
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
    // A failed open may succeed later (e.g. after a private-mode prompt).
    dbPromise.catch(() => { dbPromise = null; });
  }
  return dbPromise;
}

function run(mode, fn) {
  return db().then((d) => new Promise((resolve, reject) => {
    const tx = d.transaction("kv", mode);
    const req = fn(tx.objectStore("kv"));
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error || new Error("transaction aborted"));
  }));
}

export function idbGet(key) {
  const read = earlyReads.get(key);
  earlyReads.delete(key);
  return read ?? run("readonly", (s) => s.get(key)).then((v) => (typeof v === "string" ? v : null));
}

// The read, the merge (by the wasm: `merge(stored)` returns the value to
// write, true for `value`, or undefined to keep the stored one) and the
// write in one
// readwrite transaction: the browser runs those of one store one at a
// time, across tabs.
export function idbMerge(key, value, merge) {
  return run("readwrite", (s) => {
    const old = s.get(key);
    old.onsuccess = () => {
      const next = typeof old.result === "string" ? merge(old.result) : true;
      if (next !== undefined) s.put(next === true ? value : next, key);
    };
    return old;
  }).then(() => undefined);
}

export function idbRemove(key) {
  return run("readwrite", (s) => s.delete(key)).then(() => undefined);
}

// --- Requests -------------------------------------------------------------
// One HTTP exchange, from credentials to the last body byte. In JS because
// fetch, Headers, the body reader and their promises cost several KB of wasm
// through web-sys. It decides nothing: it reports the answer's raw facts
// (its head, its body's chunks, its end, or what failed) and the machine
// reads them (`Machine::handle_response`): no status is looked at here, and
// no deadline is armed (the machine aborts a request that does not answer).
//
// `http` is [baseUrl, headers as [name, value] pairs, getToken or null,
// credentials (a RequestCredentials, or undefined for fetch's default),
// the fetch to call (the `fetch` option, or undefined for the global)]; its
// frame pacing is added here (see paceOf), and `refresh` (set by
// refreshToken). getToken({ refresh }) is awaited for every request;
// `refresh` is true for the first one after the machine asked for fresh
// credentials (a 401/403), so a provider that caches knows to renew.
//
// head(status, contentType, retryAfter) and chunk(chunks) return false to
// stop (the body is cancelled); held() says a first chunk waits (see
// pumpBody). Resolves true at the body's end, false when stopped; rejects
// [kind, message], kind one of "credentials", "options", "cors", "network". Only a
// stream's chunks may be held (`stream`).
async function exchange(http, method, path, accept, body, lastEventId, ctl, stream, head, chunk, held) {
  // Called unbound: a `fetch` taken off `globalThis` throws "Illegal
  // invocation" when called on another object (this array).
  const send = http[4] ?? fetch;
  try {
    const init = await prepare(http, method, accept, body, lastEventId, ctl.signal);
    const url = http[0] + path;
    // A `fetch` option may return a value, not a Promise.
    const r = await (claimEarly(url, init, ctl, send) ?? Promise.resolve(send(url, init))).catch((e) => noAnswer(send, url, ctl, e));
    if (!head(r.status, r.headers.get("content-type"), r.headers.get("retry-after"))) {
      if (r.body) r.body.cancel().catch(() => {});
      return false;
    }
    if (!r.body) return true;
    // Dropped since its answer came (in `head`, or before this resumed):
    // its body stays untouched. Piping the body of a fetch aborted that
    // late is what WebKit (WPE 2.38) reports as an unhandled `AbortError`.
    if (ctl.signal.aborted) return false;
    return await pumpBody(r.body, chunk, stream ? paceOf(http) : UNPACED, held, ctl);
  } catch (e) {
    // Aborted by the wasm (it dropped the request): the expected end, not
    // a failure, so no rejection is left to report.
    if (ctl.signal.aborted) return false;
    throw Array.isArray(e) ? e : ["network", text(e)];
  }
}

const guard = (kind, f) => {
  try { return f(); } catch (e) { throw [kind, text(e)]; }
};

// A request's fetch `init`: its headers (the options', `Accept`, the
// token, `Last-Event-ID`), body, credentials and signal.
async function prepare(http, method, accept, body, lastEventId, signal) {
  const [, pairs, getToken, credentials] = http;
  const headers = guard("options", () => new Headers(pairs));
  headers.set("Accept", accept);
  if (getToken) {
    let token;
    const refresh = http.refresh === true;
    http.refresh = false;
    try { token = await getToken({ refresh }); } catch (e) { throw ["credentials", text(e)]; }
    if (typeof token !== "string") throw ["credentials", "getToken must return a string"];
    guard("credentials", () => headers.set("Authorization", "Bearer " + token));
  }
  if (lastEventId != null) headers.set("Last-Event-ID", lastEventId);
  if (body != null) headers.set("Content-Type", "application/json");
  const init = { method, headers, body, signal };
  if (credentials) init.credentials = credentials;
  return init;
}

// --- The first page before the wasm -----------------------------------------
// `prefetch(options)` sends, while the wasm is still fetched and compiled,
// the request that a client connected with the same options asks for first
// on a first visit (none stored): a session's newest page (`tail`), or the
// first page of its history. It decides nothing: the machine still asks for
// its own page, and the first request of that session's replay takes the
// answer in flight when their URL and headers are equal (`claimEarly`); any
// other aborts it, as does no client asking within EARLY_MS. A value
// already stored means no first visit: nothing is sent. The storage read is
// kept for the client's own (IndexedDB: read while the wasm compiles).
// FIRST_PAGE_LIMIT and TAIL are the machine's `Config` defaults
// (`first_page_limit`, `tail`; tests/defaults_once.rs keeps them equal);
// the URL and the storage key are the machine's first page and the core's
// `Target::storage_key` (tests/fixtures/first_page.json, against which
// tests/first_page.rs checks the core and tests/js/targets.test.mjs this).
const FIRST_PAGE_LIMIT = 500;
const TAIL = 40;
const EARLY_MS = 30_000;
// replay URL prefix -> { sent: Promise of the request's signature, answer, ctl }
const early = new Map();
// storage key -> the IndexedDB read `prefetch` started
const earlyReads = new Map();

const signature = (url, init) => url + "\n" + [...init.headers].join("\n") + "\n" + (init.credentials ?? "same-origin");
// The core's `paths::segment`: all but RFC 3986's unreserved characters
// encoded (pinned with the URL, above).
const segment = (s) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());

export function prefetch(options) {
  let o;
  try { o = connectOptions(options); } catch { return; }
  const base = o.baseUrl.replace(/\/+$/, "");
  const prefix = `${base}/v1/sessions/${segment(o.scopeId)}/replay?`;
  if (o.scope !== "session" || early.has(prefix)) return;
  const key = `replay-client:${base}|session:${o.scopeId}`;
  const storage = o.storage ?? "local";
  let stored = null;
  if (storage === "indexeddb") earlyReads.set(key, (stored = idbGet(key)));
  else if (storage === "local" || storage === "session") {
    try { stored = globalThis[storage + "Storage"].getItem(key); } catch {}
  } else if (storage !== "memory") return;
  const tail = Math.min(Math.trunc(o.tail ?? TAIL), 5000);
  const url = `${prefix}${tail > 0 ? "tail=" + tail : "after_cursor=0"}&limit=${FIRST_PAGE_LIMIT}`;
  const ctl = new AbortController();
  const http = [base, o.headers, o.getToken, o.credentials ?? "same-origin"];
  const e = { ctl, answer: null };
  e.sent = Promise.resolve(stored).then(async (value) => {
    if (value != null) throw 0;
    const init = await prepare(http, "GET", "application/json", null, null, ctl.signal);
    e.answer = Promise.resolve((o.fetch ?? fetch)(url, init));
    e.answer.catch(() => {});
    return signature(url, init);
  });
  e.sent.catch(() => {});
  early.set(prefix, e);
  setTimeout(() => {
    if (early.get(prefix) === e) early.delete(prefix), earlyReads.delete(key), ctl.abort();
  }, EARLY_MS);
}

// A session's first page that a page half asked for itself, before this
// host's script ran (the shared host's first visit: its worker's script
// comes one handshake behind the page's): `sent` is the request as it went
// (`url`, `headers` pairs, `credentials`), `answer` its Response to come.
// Taken as `prefetch`'s is, by the first request of that session's replay
// when it is this request sent as the page sent it (no `fetch` option);
// else, or when its answer fails, the client's request goes itself.
export function adoptFirstPage(sent, answer) {
  const prefix = sent.url.slice(0, sent.url.indexOf("?") + 1);
  let sig;
  try { sig = signature(sent.url, { headers: new Headers(sent.headers), credentials: sent.credentials }); } catch { return; }
  if (!prefix || early.has(prefix)) return;
  const e = { ctl: new AbortController(), sent: Promise.resolve(sig), answer, page: true };
  early.set(prefix, e);
  setTimeout(() => early.get(prefix) === e && early.delete(prefix), EARLY_MS);
}

// The answer `prefetch` started for this request (URL, headers and
// credentials equal), or null: a request of another page of that
// session's replay aborts it and goes itself.
function claimEarly(url, init, ctl, send) {
  for (const [prefix, e] of early) {
    if (!url.startsWith(prefix)) continue;
    early.delete(prefix);
    const own = () => (e.ctl.abort(), send(url, init));
    return e.sent.then((sig) => {
      if (sig !== signature(url, init) || (e.page && send !== fetch)) return own();
      const stop = () => e.ctl.abort();
      if (ctl.signal.aborted) stop();
      ctl.signal.addEventListener("abort", stop);
      return e.page ? e.answer.catch(own) : e.answer;
    }, own);
  }
  return null;
}

// A fetch rejected without an answer: none came (the server is down,
// offline), or the browser hid one without CORS headers for this page's
// origin. A `no-cors` request of the same URL tells the two apart: it
// resolves (opaquely) whenever the server answers at all. Rejects
// ["cors", origin] for the second. The probe goes through `send` too: the
// `fetch` option sees every request the client makes.
async function noAnswer(send, url, ctl, e) {
  const probe = { method: "HEAD", mode: "no-cors", credentials: "omit", signal: ctl.signal };
  if (!ctl.signal.aborted && e instanceof TypeError && (await Promise.resolve(send(url, probe)).then(() => true, () => false))) {
    throw ["cors", globalThis.location?.origin];
  }
  throw e;
}

// Aborts request `ctl` (the wasm dropped it). A request whose body is
// being piped is stopped by ending its pipe (which cancels the body, and so
// the fetch), not by aborting its fetch: WebKit (WPE 2.38, Safari 16's
// engine; WKWebView too) then rejects a promise of its own that no code can
// handle, reported as an unhandled `AbortError: Fetch is aborted`. Called
// from inside a body's write callback (the wasm reading a chunk drops that
// request), the stop waits for the callback to return: ending a pipe from
// within its own write is what WebKit reports the same way. The late chunks
// of a request the machine dropped are ignored by id.
let writing = 0;
const pipeStops = new WeakMap();
export function abortRequest(ctl) {
  const stop = pipeStops.get(ctl) ?? (() => ctl.abort());
  if (writing > 0) queueMicrotask(stop);
  else stop();
}

// Starts request `id` of a client on the microtask queue (no user code,
// such as getToken, runs inside the driver's loop) and reports what
// happens to the client's functions `to` = [opened, chunk, settled,
// failed, held], made once per client: opened(id, status, contentType,
// retryAfter) and chunk(id, chunks), each returning false to stop; held(id)
// when a first chunk waits for releaseChunks; then settled(id, ended) (true
// at the body's end, false when stopped), or failed(id, kind, message).
// Returns the request's AbortController.
//
// With a `claim` the request goes out only while the client holds the Web
// Lock of that name: asked for without waiting the first time, then held
// until releaseClaim. Held by another context, the request fails at once
// with kind "claimed" (nothing was sent). Without Web Locks it just goes.
export function request(http, to, id, method, path, accept, body, lastEventId, stream, claim) {
  const ctl = new AbortController();
  const [opened, chunk, settled, failed, held] = to;
  queueMicrotask(() => takeClaim(http, claim).then((ok) => {
    if (!ok) throw ["claimed", "another context holds " + claim];
    return exchange(
      http, method, path, accept, body, lastEventId, ctl, stream,
      (...head) => opened(id, ...head), (chunks) => chunk(id, chunks), () => held(id),
    );
  }).then((ended) => settled(id, ended), (e) => failed(id, e[0], e[1])));
  return ctl;
}

// The claims a client holds or asks for, kept beside its `http`: name ->
// { got: Promise<boolean>, release() }.
const claimsOf = (http) => (http.claims ??= new Map());

function takeClaim(http, name) {
  const locks = globalThis.navigator?.locks;
  if (name == null || !locks) return Promise.resolve(true);
  const claims = claimsOf(http);
  let c = claims.get(name);
  if (!c) {
    c = { release: () => {} };
    c.got = new Promise((got) => {
      locks.request(name, { ifAvailable: true }, (lock) => {
        got(lock !== null);
        if (lock === null) return undefined;
        // Held until released (or the context ends).
        return new Promise((release) => (c.release = release));
      }).catch(() => got(true));
    });
    claims.set(name, c);
    // Not got: asked for anew next time.
    c.got.then((ok) => ok || claims.get(name) !== c || claims.delete(name));
  }
  return c.got;
}

// Action::Release: lets go of claim `name`, or of every claim (null: the
// client closed).
export function releaseClaim(http, name) {
  const claims = claimsOf(http);
  for (const [n, c] of claims) {
    if (name != null && n !== name) continue;
    claims.delete(n);
    c.got.then((ok) => ok && c.release());
  }
}

// Action::RefreshCredentials: the next getToken call asks for a fresh token.
export function refreshToken(http) {
  http.refresh = true;
}

function text(e) {
  return e instanceof Error ? e.message : typeof e === "string" ? e : "unknown JavaScript error";
}

// --- Response bodies ------------------------------------------------------
// Pipes a body to its end into a sink that hands the chunks to
// `onChunk(chunks)` (an array of Uint8Arrays), which returns false to stop.
// Awaiting each read() from Rust cost a promise-to-future bridge and two
// closures per chunk, and a live answer arrives as thousands of small
// chunks; awaiting each read() in JS still cost more main-thread time than
// anything the chunk then costs (the read's resolution and the async
// function's resumption: 36 % of the SDK's time in a profile of a live
// answer), which the browser's own pipe loop does not. While `pace.hold`
// (the machine's Pace::HoldChunks: a number of bytes, 0 for none) the chunks
// wait, up to that many bytes, and `onHeld()` reports the first; the machine
// then releases them (releaseChunks) together, in an animation frame: one
// crossing per frame instead of one per chunk, each chunk copied once, into
// wasm (joining them in JS first was 8 % of the SDK's time in a burst's
// profile). It decides nothing: when to
// hold and when to release are the machine's. Resolves true at the end of
// the body (what waits is delivered first), false when stopped; rejects as
// the body does (abort, network error), dropping what waits.
async function pumpBody(body, onChunk, pace, onHeld, ctl) {
  let held = null;
  let stopped = false;
  const stop = new AbortController();
  const halt = () => {
    stopped = true;
    stop.abort();
  };
  pipeStops.set(ctl, halt);
  const deliver = (chunks) => {
    if (!stopped && !onChunk(chunks)) {
      stopped = true;
      abortRequest(ctl);
    }
  };
  let heldBytes = 0;
  const release = () => {
    if (pace.release === release) pace.release = null;
    const h = held;
    held = null;
    if (h) deliver(h);
  };
  const write = (value) => {
    if (stopped) return;
    writing++;
    try {
      if (held) held.push(value);
      else if (pace.hold) {
        held = [value];
        heldBytes = 0;
        pace.release = release;
        onHeld();
      } else return deliver([value]);
      // Past the machine's bound what waits goes now: all of it is copied
      // into wasm memory at once, and that memory never shrinks.
      if ((heldBytes += value.byteLength) >= pace.hold) release();
    } finally {
      writing--;
    }
  };
  try {
    try {
      await body.pipeTo(new WritableStream({ write }), { signal: stop.signal });
    } catch (e) {
      if (stopped) return false;
      throw e;
    }
    release();
    return !stopped;
  } finally {
    stopped = true;
    pipeStops.delete(ctl);
    if (pace.release === release) pace.release = null;
  }
}

// The holding of one client's streamed body (a client reads one at a
// time), kept beside its `http`: `hold` the bytes it may hold as the
// machine last said (paceHold), `release` delivers what waits
// (releaseChunks).
const paceOf = (http) => (http.pace ??= { hold: 0, release: null });
// A body read whole (a page, a write's answer, an error) is never held.
const UNPACED = { hold: 0, release: null };

export function paceHold(http, hold) {
  paceOf(http).hold = hold;
}

export function releaseChunks(http) {
  paceOf(http).release?.();
}

// --- Animation frames -------------------------------------------------------
// requestFrame(f) calls f in the next animation frame. Asked again before
// that frame came, the machine stopped waiting for it (FRAME_WAIT_MS): the
// browser is asked anew, so a request that never ran (a page that runs no
// frames) is not left pending behind the next.
const frameRequests = new Map();
export function requestFrame(f) {
  if (frameRequests.has(f)) cancelAnimationFrame(frameRequests.get(f));
  frameRequests.set(f, requestAnimationFrame(() => {
    frameRequests.delete(f);
    f();
  }));
}

// Whether animation frames run (the machine's Frames input): 2 in a visible
// document with requestAnimationFrame, 1 while it is hidden (a frame asked
// for comes when it shows), 0 where there are none (a Worker).
export function frames() {
  if (typeof requestAnimationFrame !== "function") return 0;
  return globalThis.document?.visibilityState === "hidden" ? 1 : 2;
}
