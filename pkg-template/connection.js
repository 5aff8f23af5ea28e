// What the framework bindings (react.js, vue.js, svelte.js) share: which
// target a set of options follows, and a connection that may be closed before
// its (possibly asynchronous) connect resolved. Loads no wasm, touches no
// browser global: importing a binding on a server is safe.

// The one target rule of the package's JS halves (messages.js): the
// bindings reconnect when it changes, the shared host keys its clients by it.
export { logKey, targetKey } from "./messages.js";

/**
 * Calls `connect(options)` (a client, or a Promise of one), then `onClient`
 * with it, or `onError` with why it failed. Returns `close`: it closes the
 * client, also one that arrives after `close` was called.
 */
export function openClient(options, connect, onClient, onError) {
  let client = null;
  let closed = false;
  Promise.resolve()
    .then(() => connect(options))
    .then(
      (c) => {
        if (closed) c.close();
        else {
          client = c;
          onClient(c);
        }
      },
      (err) => {
        if (!closed) onError(err);
      },
    );
  return () => {
    if (closed) return;
    closed = true;
    client?.close();
    client = null;
  };
}
