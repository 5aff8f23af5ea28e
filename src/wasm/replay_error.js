// The one error class of the JS API. Rust builds every thrown or rejected
// value through `makeReplayError`, so `instanceof ReplayError` always holds.
// A module of its own: the page halves of the hosted clients
// (`shared-client.js`, `worker-client.js`) load this class and no other part
// of the browser layer.

/** An error of the replay client; `code` is stable, `status` is the HTTP status when there was one. */
export class ReplayError extends Error {
  // Kept through minification (`ReplayError.name`).
  static name = "ReplayError";
  constructor(code, message, status) {
    super(message);
    this.name = "ReplayError";
    this.code = code;
    if (typeof status === "number") this.status = status;
  }
}

export function makeReplayError(code, message, status) {
  return new ReplayError(code, message, status);
}
