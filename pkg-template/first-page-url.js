// @ts-check
// The page half's guess of a session's first page (`SharedClient` asks for
// it itself on a first visit). Its own module, inlined into the page half:
// the on-page client has no use for it.
// The machine's `Config` defaults (`tail`, `first_page_limit`), as
// `prefetch`'s copies (tests/defaults_once.rs keeps all of them equal).
const FIRST_PAGE_LIMIT = 500;
const TAIL = 40;

/**
 * The request a client connected with `options` asks for first on a first
 * visit of a session (nothing stored): its newest page with `tail`, else
 * the history's first page; null for another scope. Built as `prefetch`
 * (browser.js) builds it, from the core's defaults and path encoding: both
 * are pinned to tests/fixtures/first_page.json (tests/js/targets.test.mjs),
 * which tests/first_page.rs pins to the machine's first page. A wrong guess
 * costs a request, never a second apply: the host's client takes the
 * answer only when its own first request is this one.
 * @param {{ baseUrl?: string, scope?: string, scopeId?: string, sessionId?: string, tail?: number }} options
 * @returns {string | null}
 */
export function firstPageUrl(options) {
  const { baseUrl, scope = "session", tail = TAIL } = options;
  const id = options.sessionId ?? options.scopeId;
  if (scope !== "session" || typeof baseUrl !== "string" || typeof id !== "string" || typeof tail !== "number") return null;
  // The core's `paths::segment`: all but RFC 3986's unreserved characters encoded.
  const segment = encodeURIComponent(id).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
  const newest = Math.min(Math.trunc(tail), 5000);
  return `${baseUrl.replace(/\/+$/, "")}/v1/sessions/${segment}/replay?${newest > 0 ? "tail=" + newest : "after_cursor=0"}&limit=${FIRST_PAGE_LIMIT}`;
}
