// The engine layer's worker hook: imported before the demo's worker script
// (the SharedWorker or the dedicated worker), it records the worker's
// uncaught errors and unhandled rejections and broadcasts them to the pages
// (error-hook.js), now and whenever a page asks.
const errors = [];
const where = typeof SharedWorkerGlobalScope === "function" && self instanceof SharedWorkerGlobalScope ? "shared worker" : "worker";
const channel = new BroadcastChannel("engine-errors");
// Firefox's stack leaves out the message: both, then.
const text = (reason) => (reason instanceof Error ? `${reason.name}: ${reason.message} at ${reason.stack}` : String(reason));
const record = (error) => {
  errors.push(`${where}: ${error}`);
  channel.postMessage({ errors });
};
self.addEventListener("error", (e) => record(text(e.error ?? e.message)));
self.addEventListener("unhandledrejection", (e) => record(`unhandled rejection: ${text(e.reason)}`));
channel.onmessage = (e) => {
  if (e.data.ask) channel.postMessage({ errors });
};
