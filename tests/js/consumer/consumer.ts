// Compiled with `tsc --noEmit --strict` against the packed package: the
// README quickstart, plus every public type used the way an app would.
import init, {
  ReplayClient,
  ReplayError,
  type ConnectOptions,
  type Diagnostics,
  type Status,
  type Transcript,
  type TranscriptItem,
  type View,
} from "replay-client";

await init();

const options: ConnectOptions = {
  baseUrl: "http://127.0.0.1:8787",
  sessionId: "ses_123",
  getToken: async () => "my-token",
  storage: "local",
  notify: "frame",
  prefetchDepth: 2,
};
const client = ReplayClient.connect(options);

function describe(item: TranscriptItem): string {
  switch (item.kind) {
    case "message":
      return `${item.role}: ${item.text}`;
    case "tool":
      return `${item.name} ${JSON.stringify(item.input ?? null)} ${item.status} ${item.output ?? ""}`;
    case "question":
      return `${item.prompt} ${item.outcome === "answered" ? `-> ${item.answer ?? ""}` : `declined (${item.reason ?? ""})`}`;
    case "turn_end":
      return `${item.outcome}${item.reason ? ` (${item.reason})` : ""}`;
  }
}

function render(view: View): string {
  const lines = view.items.map(describe);
  if (view.live) lines.push(`typing: ${view.live.text} stale=${view.live.stale}`);
  for (const prompt of view.pendingPrompts) lines.push(`${prompt.prompt} ${prompt.options.join("/")}`);
  for (const task of view.tasks.tasks) lines.push(`${task.title}: ${task.state}`);
  if (view.session) {
    const state: "open" | "closed" | "failed" = view.session.state;
    lines.push(`${view.session.title}: ${state} ${view.session.reason ?? ""}`);
  }
  for (const extra of view.extras) lines.push(`${extra.seq} ${extra.type} ${JSON.stringify(extra.data)}`);
  const status: Status = view.status;
  lines.push(status.state, String(status.nextRetryAt ?? ""), status.lastError?.code ?? "");
  return lines.join("\n");
}

const unsubscribe: () => void = client.subscribe(() => render(client.view()));
const diagnostics: Diagnostics = client.diagnostics();
const transcript: Transcript = client.transcript();
console.log(diagnostics.counters.reconnects, transcript.cursor);

try {
  const { turnId } = await client.send("hello");
  console.log(turnId);
  await client.answer("q1", "yes");
  await client.cancel();
} catch (err) {
  if (err instanceof ReplayError) {
    const code: string = err.code;
    console.error(code, err.status, err.message);
  }
}

// The unions a switch can be exhaustive over.
for (const turn of client.view().interrupted) {
  const why: "worker_restart" | "boot_changed" = turn.reason;
  console.log(why);
}
// `free()` is not part of the API: `close()` ends a client.
// @ts-expect-error: not declared
client.free;

unsubscribe();
client.close();

// A custom storage adapter, sync or async.
ReplayClient.connect({
  baseUrl: "http://127.0.0.1:8787",
  scope: "process",
  scopeId: "proc_42",
  storage: {
    get: async (key: string) => sessionStorage.getItem(key),
    set: (key: string, value: string) => sessionStorage.setItem(key, value),
    remove: (key: string) => sessionStorage.removeItem(key),
  },
}).close();

// Cookies and your own fetch (README): the global fetch fits the option.
ReplayClient.connect({ baseUrl: "http://localhost:8787", sessionId: "ses_123", credentials: "include", fetch }).close();
ReplayClient.connect({
  baseUrl: "http://localhost:8787",
  sessionId: "ses_123",
  credentials: "omit",
  fetch: (input, init) => fetch(input, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), traceparent: "00-1-2-01" } }),
}).close();
// @ts-expect-error: fetch's credentials modes only
ReplayClient.connect({ baseUrl: "http://localhost:8787", sessionId: "ses_123", credentials: "cookies" });

// Off the main thread (README): the worker half and the page half, typed.
import { serve } from "replay-client/worker";
import { WorkerClient, type WorkerConnectOptions } from "replay-client/worker-client";

serve({ getToken: async () => "my-token", credentials: "include", fetch });
// @ts-expect-error: a function does not cross to the worker; give it to serve()
const workerFetch: WorkerConnectOptions = { baseUrl: "http://127.0.0.1:8787", sessionId: "ses_123", fetch };
const workerCookies: WorkerConnectOptions = { baseUrl: "http://127.0.0.1:8787", sessionId: "ses_123", credentials: "include" };
console.log(workerFetch, workerCookies);

const workerOptions: WorkerConnectOptions = { baseUrl: "http://127.0.0.1:8787", sessionId: "ses_123" };
const worker = new Worker(new URL("./replay.worker.ts", import.meta.url), { type: "module" });
const inWorker: WorkerClient = await WorkerClient.connect(worker, workerOptions);
const stopWorkerRender: () => void = inWorker.subscribe(() => render(inWorker.view()));
const workerStatus: Status = inWorker.status();
const workerDiagnostics: Diagnostics = inWorker.diagnostics();
const workerTranscript: Transcript = await inWorker.transcript();
console.log(workerStatus.state, workerDiagnostics.storage, workerTranscript.cursor);
try {
  const { turnId } = await inWorker.send("hello", "m-1");
  await inWorker.answer("q1", "yes");
  await inWorker.cancel(turnId);
} catch (err) {
  if (err instanceof ReplayError) console.error(err.code, err.status);
}
stopWorkerRender();
inWorker.close();

// One connection per browser (README): the SharedWorker half and each tab's half, typed.
import { serveShared, type SharedHost } from "replay-client/shared";
import { SharedClient, type HostInfo, type SharedConnectOptions } from "replay-client/shared-client";

const sharedHost: SharedHost = await serveShared({ baseUrl: "http://127.0.0.1:8787", getToken: async () => "my-token" });
console.log(sharedHost.counts.scopes, sharedHost.counts.attachments);
const sharedOptions: SharedConnectOptions = { baseUrl: "http://127.0.0.1:8787", sessionId: "ses_123" };
// @ts-expect-error: the host's credentials are serveShared()'s
const sharedCookies: SharedConnectOptions = { ...sharedOptions, credentials: "include" };
console.log(sharedCookies);
const shared: SharedClient = await SharedClient.connect(
  () => new SharedWorker(new URL("./replay.shared.ts", import.meta.url), { type: "module", name: "replay" }),
  sharedOptions,
  { storage: "local", getToken: async () => "my-token" },
);
const stopSharedRender: () => void = shared.subscribe(() => render(shared.view()));
const host: HostInfo = shared.diagnostics().host;
const sharedTranscript: Transcript = await shared.transcript();
console.log(host.role, host.instance, host.fallback?.code, shared.status().state, sharedTranscript.cursor);
try {
  const { turnId } = await shared.send("hello");
  await shared.answer("q1", "yes");
  await shared.cancel(turnId);
} catch (err) {
  if (err instanceof ReplayError && err.code === "schema_mismatch") console.error(err.message);
}
stopSharedRender();
shared.close();
