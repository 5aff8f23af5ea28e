// The engine layer's page hook, loaded before the demo's module script (the
// WebKit drivers give no console logs): every uncaught error and unhandled
// rejection of this page, and those the workers' hook (worker-hook.js)
// broadcasts, are kept in `window.__engineErrors` for the driver to read.
(() => {
  const errors = (window.__engineErrors = []);
  // Firefox's stack leaves out the message: both, then.
  const text = (reason) => (reason instanceof Error ? `${reason.name}: ${reason.message} at ${reason.stack}` : String(reason));
  addEventListener("error", (e) => errors.push(`page: ${text(e.error ?? e.message)}`));
  addEventListener("unhandledrejection", (e) => errors.push(`page: unhandled rejection: ${text(e.reason)}`));
  const channel = new BroadcastChannel("engine-errors");
  channel.onmessage = (e) => {
    if (e.data.errors) for (const error of e.data.errors) if (!errors.includes(error)) errors.push(error);
  };
  // A worker that started before this page loaded sends what it recorded so far.
  channel.postMessage({ ask: true });
})();
