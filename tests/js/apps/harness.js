// What the binding apps share with the test (`bindings.test.mjs`): the
// session from `?session=`, a connect function that counts its calls, and
// renders counted per animation frame. All on `window.t`.
import init, { ReplayClient } from "replay-client";
import { WorkerClient } from "replay-client/worker-client";
import { SharedClient } from "replay-client/shared-client";

const params = new URLSearchParams(location.search);
export const sessionId = params.get("session");

let connects = 0;
let mounts = 0;
let worker = null;
/**
 * The on-page client, with `?worker` a `WorkerClient`, or with `?shared` a
 * `SharedClient` (the bindings take any), in memory: each test session is new.
 */
export async function connect(options) {
  connects += 1;
  let client;
  if (params.has("shared")) {
    const start = () => new SharedWorker(new URL("./replay.shared.js", import.meta.url), { type: "module", name: "replay-apps" });
    client = await SharedClient.connect(start, options);
  } else if (params.has("worker")) {
    worker ??= new Worker(new URL("./replay.worker.js", import.meta.url), { type: "module" });
    client = await WorkerClient.connect(worker, { ...options, storage: "memory" });
  } else {
    await init();
    client = ReplayClient.connect({ ...options, storage: "memory" });
  }
  return countSubscribes(client);
}

let subscribes = 0;
/** Counts the binding's `subscribe` calls (a subscribe made per render would show). */
function countSubscribes(client) {
  const subscribe = client.subscribe.bind(client);
  client.subscribe = (listener) => {
    subscribes += 1;
    return subscribe(listener);
  };
  return client;
}

let frame = 0;
(function tick() {
  frame += 1;
  requestAnimationFrame(tick);
})();
const perFrame = new Map();

/** Called by an app each time it rendered (React: committed) its view. */
export function rendered() {
  perFrame.set(frame, (perFrame.get(frame) ?? 0) + 1);
}

/** Called by an app's mount effect. */
export function mounted() {
  mounts += 1;
}

window.t = {
  client: null,
  unmount: null,
  connects: () => connects,
  mounts: () => mounts,
  subscribes: () => subscribes,
  send: (text) => window.t.client.send(text).then(() => true),
  resetRenders: () => perFrame.clear(),
  renders: () => {
    const counts = [...perFrame.values()];
    return { total: counts.reduce((a, b) => a + b, 0), maxPerFrame: Math.max(0, ...counts) };
  },
};

/** The app's client, for `t.send`. */
export function expose(client) {
  window.t.client = client;
}
