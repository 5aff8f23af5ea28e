// The demo page: one client following one session, rendered with
// textContent only (every server string is text, never HTML).
import { ReplayError } from "./pkg/web/replay_error.js";
import { WorkerClient } from "./pkg/web/worker-client.js";
import { SharedClient } from "./pkg/web/shared-client.js";

const baseUrl = location.origin;
const RECENT_KEY = "replay-demo:sessions";
const $ = (id) => document.getElementById(id);

// Where the client runs (README): by default in a SharedWorker that every
// tab of the demo shares (one stream per session however many tabs);
// `?worker` in a dedicated worker of this page; `?page` on this page. The
// first two load no wasm on the page.
const query = new URLSearchParams(location.search);
const mode = query.has("page") ? "page" : query.has("worker") ? "worker" : "shared";
const worker =
  mode === "worker" ? new Worker(new URL("./replay.worker.js", import.meta.url), { type: "module" }) : null;
const startShared = () =>
  new SharedWorker(new URL("./replay.shared.js", import.meta.url), { type: "module", name: "replay" });
const onPage = mode === "page" ? await import("./pkg/web/index.js") : null;
if (onPage) await onPage.default();
$("mode").textContent = { page: "client on the page", worker: "client in a worker", shared: "client in a SharedWorker" }[mode];

// A client for session `id`, wherever this page's mode runs it.
function connect(id) {
  if (mode === "page") return onPage.ReplayClient.connect({ baseUrl, sessionId: id, storage: "local" });
  if (mode === "worker") return WorkerClient.connect(worker, { baseUrl, sessionId: id });
  // Where the shared host cannot run, the client runs on this page.
  return SharedClient.connect(startShared, { baseUrl, sessionId: id }, { storage: "local" });
}

let client = null;
let sessionId = null;

function recentSessions() {
  try {
    return JSON.parse(localStorage.getItem(RECENT_KEY) || "[]");
  } catch {
    return [];
  }
}

function remember(id) {
  const list = [id, ...recentSessions().filter((s) => s !== id)].slice(0, 10);
  localStorage.setItem(RECENT_KEY, JSON.stringify(list));
  const select = $("session-select");
  select.replaceChildren(...list.map((s) => new Option(s, s, false, s === id)));
}

async function api(method, path, body) {
  const res = await fetch(baseUrl + path, {
    method,
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function createSession() {
  const { session_id } = await api("POST", "/v1/sessions", { title: "demo" });
  return session_id;
}

let opening = 0;

async function open(id) {
  if (client) client.close();
  client = null;
  const generation = ++opening;
  sessionId = id;
  history.replaceState(null, "", "#" + id);
  remember(id);
  renderedItems = [];
  renderedPending = null;
  lastView = null;
  $("transcript").replaceChildren();
  const next = await Promise.resolve()
    .then(() => connect(id))
    .catch((err) => (showError(err), null));
  // Another open() began while this one connected in the worker.
  if (generation !== opening || !next) return next?.close();
  client = next;
  const host = client.diagnostics().host;
  if (host?.fallback) $("mode").textContent = `client on the page (no shared host: ${host.fallback.code})`;
  client.subscribe(() => render(client.view()));
  render(client.view());
  // Hooks for the end-to-end test and for curious people in devtools.
  window.__replay = { client, sessionId: id, paints: 0 };
}

// ---- rendering -----------------------------------------------------------

let renderedItems = [];
let renderedPending = null;
let lastView = null;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function itemNode(item) {
  const li = el("li", "item " + item.kind);
  if (item.kind === "message") {
    li.append(el("p", "bubble " + item.role, item.text));
  } else if (item.kind === "tool") {
    const card = el("div", "tool-card " + item.status);
    card.append(el("span", "tool-name", item.name), el("span", "badge", item.status));
    if (item.output) card.append(el("pre", "tool-output", item.output));
    li.append(card);
  } else if (item.kind === "question") {
    const box = el("div", "prompt answered");
    box.append(el("p", "", item.prompt));
    box.append(el("span", "badge", item.outcome === "answered" ? `answered: ${item.answer}` : `declined (${item.reason})`));
    li.append(box);
  } else if (item.kind === "turn_end" && item.outcome !== "completed") {
    li.append(el("p", "turn-end", `turn ${item.outcome}${item.reason ? ": " + item.reason : ""}`));
  }
  return li;
}

function renderTranscript(view) {
  const list = $("transcript");
  const items = view.items;
  if (items.length < renderedItems.length) {
    list.replaceChildren();
    renderedItems = [];
  }
  // Items append, change in place, or (an older page, `loadOlder()`) come
  // first with the last one unchanged: the reader then stays where they were.
  const grew = items.length > renderedItems.length;
  const older = grew && renderedItems.length > 0 && sameItem(items.at(-1), renderedItems.at(-1));
  const fromBottom = list.scrollHeight - list.scrollTop;
  // Unchanged items keep their object (on the page; a worker's are copies).
  for (let i = 0; i < items.length; i++) {
    if (renderedItems[i] === items[i]) continue;
    const node = itemNode(items[i]);
    if (i < renderedItems.length) list.children[i].replaceWith(node);
    else list.append(node);
    renderedItems[i] = items[i];
  }
  if (older) list.scrollTop = list.scrollHeight - fromBottom;
  else if (grew) list.scrollTop = list.scrollHeight;
  // The session is read newest first: the pages before it on request.
  $("load-older").hidden = !view.hasOlder;
  $("interrupted").replaceChildren(
    ...view.interrupted.map((turn) =>
      el("li", "item interrupted", interruptedWords(turn.reason)),
    ),
  );
}

function sameItem(a, b) {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

// Why a shown answer stopped, for a person (the reason codes of rule 7).
function interruptedWords(reason) {
  if (reason === "worker_restart") return "An answer was interrupted when the runtime restarted; its partial text was not kept.";
  return "An answer could no longer be followed live; its end will show once it is saved.";
}

function renderLive(live) {
  $("live").hidden = !live;
  if (!live) return;
  $("live-state").textContent = live.state.replaceAll("_", " ");
  $("live-stale").hidden = !live.stale;
  $("live-text").textContent = live.text;
  $("live-tools").replaceChildren(
    ...live.tools.map((t) => {
      const card = el("div", "tool-card " + t.state);
      card.append(el("span", "tool-name", t.name), el("span", "badge", t.state));
      if (t.progress) card.append(el("span", "muted", " " + t.progress));
      return card;
    }),
  );
}

function renderPrompts(prompts) {
  $("prompts").replaceChildren(
    ...prompts.map((p) => {
      const box = el("div", "prompt");
      box.dataset.questionId = p.question_id;
      box.append(el("p", "", p.prompt));
      if (!p.persisted) box.append(el("span", "badge warn", "not yet saved"));
      const options = p.options.length ? p.options : ["yes", "no"];
      for (const option of options) {
        const button = el("button", "", option);
        button.type = "button";
        button.onclick = () => client.answer(p.question_id, option).catch(showError);
        box.append(button);
      }
      return box;
    }),
  );
}

function renderTasks(tasks) {
  $("tasks").replaceChildren(
    ...tasks.tasks.map((t) => {
      const li = el("li", "task " + t.state);
      li.append(el("span", "", t.title || t.task_id), el("span", "badge", t.state));
      return li;
    }),
  );
  const wait = tasks.background_wait;
  $("bg-wait").hidden = !wait;
  if (wait) $("bg-wait").textContent = `waiting on ${wait.task_ids.length} background task(s)`;
}

// The outbox: what the user sent that the runtime has not committed yet
// (queued, sending, or failed with the server's code and a way out).
function renderPending(pending) {
  $("pending").replaceChildren(
    ...pending.map((m) => {
      const li = el("li", "item pending " + m.state);
      li.dataset.messageId = m.message_id;
      li.dataset.state = m.state;
      li.append(el("p", "bubble user", m.text));
      const words = { queued: "waiting to send", sending: "sending", failed: "not sent" }[m.state] ?? m.state;
      li.append(el("span", "badge" + (m.state === "failed" ? " warn" : ""), m.error ? `${words}: ${m.error.code}` : words));
      if (m.state === "failed") {
        const retry = el("button", "retry", "Retry");
        retry.type = "button";
        retry.onclick = () => client.retry(m.message_id).catch(showError);
        const discard = el("button", "discard secondary", "Discard");
        discard.type = "button";
        discard.onclick = () => Promise.resolve(client.discard(m.message_id)).catch(showError);
        li.append(retry, discard);
      }
      return li;
    }),
  );
}

function renderSession(session) {
  $("session").hidden = !session;
  if (!session) return;
  $("session-title").textContent = session.title ?? "";
  $("session-state").textContent = session.state;
  $("session").dataset.state = session.state;
  $("session-reason").textContent = session.reason ? `reason: ${session.reason}` : "";
}

function renderStatus(status) {
  const box = $("status");
  box.dataset.state = status.state;
  let text = status.state;
  if (status.nextRetryAt) text += ` (retry in ${Math.max(0, Math.round((status.nextRetryAt - (performance.timeOrigin + performance.now())) / 100) / 10)} s)`;
  if (status.lastError) text += ` · ${status.lastError.code}`;
  $("status-text").textContent = text;
}

function renderDiagnostics() {
  const d = client.diagnostics();
  const rows = {
    epoch: d.epoch ?? "-",
    cursor: d.cursor,
    "boot id": d.bootId ?? "-",
    storage: d.storage,
    host: d.host ? `${d.host.role}${d.host.attached ? ` (${d.host.attached} ${d.host.attached === 1 ? "tab" : "tabs"})` : ""}` : "page",
    ...d.counters,
  };
  $("diagnostics").replaceChildren(
    ...Object.entries(rows).flatMap(([k, v]) => [el("dt", "", k.replaceAll("_", " ")), el("dd", "mono", String(v))]),
  );
}

function renderNotices(notices) {
  $("notices").replaceChildren(
    ...notices.slice(-8).reverse().map((n) => el("li", "", `${new Date(n.at).toLocaleTimeString()} ${n.code}: ${n.message}`)),
  );
}

function render(view) {
  if (view === lastView) return;
  const previous = lastView;
  lastView = view;
  window.__replay && window.__replay.paints++;
  renderTranscript(view);
  // Parts keep their object while unchanged: rebuilding them anyway would
  // replace buttons under a person's pointer while an answer streams.
  if (view.live !== previous?.live) renderLive(view.live);
  if (view.pendingPrompts !== previous?.pendingPrompts) renderPrompts(view.pendingPrompts);
  if (view.tasks !== previous?.tasks) renderTasks(view.tasks);
  // Compared by value: a view from a worker is a new object each time, and a
  // rebuilt list would replace the Retry button under a person's pointer.
  const pending = JSON.stringify(view.pending);
  if (pending !== renderedPending) {
    renderedPending = pending;
    renderPending(view.pending);
  }
  if (JSON.stringify(view.session) !== JSON.stringify(previous?.session)) renderSession(view.session);
  renderStatus(view.status);
  renderNotices(view.notices);
  renderDiagnostics();
}

// ---- actions -------------------------------------------------------------

function showError(err) {
  const code = err instanceof ReplayError ? err.code : "error";
  $("fault-result").textContent = `${code}: ${err.message}`;
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("message").value.trim();
  // A client in a worker is there once it connected.
  if (!text || !client) return;
  $("message").value = "";
  client.send(text).catch(showError);
});
$("cancel").onclick = () => client?.cancel().catch(showError);
$("load-older").onclick = async () => {
  const button = $("load-older");
  if (!client || button.disabled) return;
  button.disabled = true;
  try {
    await client.loadOlder();
  } catch (err) {
    showError(err);
  } finally {
    button.disabled = false;
  }
};
$("new-session").onclick = async () => open(await createSession());
$("session-select").onchange = (e) => open(e.target.value);
$("reload").onclick = () => location.reload();
for (const chip of document.querySelectorAll("[data-insert]")) {
  chip.onclick = () => {
    $("message").value = chip.dataset.insert;
    $("message").focus();
  };
}

const FAULTS = {
  close_streams: {},
  cut_after_bytes: { bytes: 700, count: 1 },
  stall: { ms: 60000 },
  skip_durable: { count: 2 },
  duplicate: { count: 3 },
  fail_requests: { route: "stream", status: 503, count: 2, retry_after: 1 },
  restart_worker: {},
};
for (const button of document.querySelectorAll("[data-fault]")) {
  button.onclick = async () => {
    const kind = button.dataset.fault;
    try {
      await api("POST", "/v1/admin/faults", { kind, ...FAULTS[kind] });
      $("fault-result").textContent = `injected: ${kind}`;
    } catch (err) {
      $("fault-result").textContent = `fault failed: ${err.message}`;
    }
  };
}

// The runtime fails a session whose provider cannot be resumed at a
// restart: the session shows `failed` with its reason.
$("provider-fails").onclick = async () => {
  if (!sessionId) return;
  try {
    await api("POST", "/v1/admin/faults", { kind: "provider_resume_fails", session_id: sessionId });
    await api("POST", "/v1/admin/faults", { kind: "restart_worker" });
    $("fault-result").textContent = "injected: restart with this session's provider lost";
  } catch (err) {
    $("fault-result").textContent = `fault failed: ${err.message}`;
  }
};

// A team message to this session, and where each delivery is
// (`/v1/diagnostics/team-operations`).
let teamSent = 0;
$("team-message").onclick = async () => {
  if (!sessionId) return;
  try {
    // Polled only once a person used it: a deferred one moves on its own.
    if (teamSent++ === 0) setInterval(() => renderDeliveries().catch(() => {}), 2000);
    await api("POST", "/v1/admin/teams/demo/messages", { from: "teammate", to: sessionId, text: `teammate note ${teamSent}` });
    await renderDeliveries();
  } catch (err) {
    $("fault-result").textContent = `team message failed: ${err.message}`;
  }
};
async function renderDeliveries() {
  if (!sessionId) return;
  const { deliveries } = await api("GET", "/v1/diagnostics/team-operations");
  $("deliveries").replaceChildren(
    ...deliveries
      .filter((d) => d.to === sessionId)
      .slice(-5)
      .map((d) => {
        const li = el("li", "task " + d.state);
        li.append(el("span", "", d.text), el("span", "badge", d.reason ? `${d.state}: ${d.reason}` : d.state));
        return li;
      }),
  );
}


setInterval(() => client && renderStatus(client.status()), 500);

const fromHash = location.hash.slice(1);
open(fromHash || recentSessions()[0] || (await createSession()));
