// The smallest Vite app: proves the package bundles (wasm asset included),
// on the page, in a worker (`replay.worker.ts`) and in a SharedWorker
// (`replay.shared.ts`).
import init, { ReplayClient } from "replay-client";
import { WorkerClient } from "replay-client/worker-client";
import { SharedClient } from "replay-client/shared-client";

await init();
const client = ReplayClient.connect({ baseUrl: location.origin, sessionId: "ses_vite", storage: "memory" });
client.subscribe(() => {
  document.body.textContent = client.view().status.state;
});

const worker = new Worker(new URL("./replay.worker.ts", import.meta.url), { type: "module" });
const inWorker = await WorkerClient.connect(worker, { baseUrl: location.origin, sessionId: "ses_vite_worker" });
inWorker.subscribe(() => {
  document.title = inWorker.view().status.state;
});

const shared = await SharedClient.connect(
  () => new SharedWorker(new URL("./replay.shared.ts", import.meta.url), { type: "module", name: "replay" }),
  { baseUrl: location.origin, sessionId: "ses_vite_shared" },
);
shared.subscribe(() => {
  document.title = shared.view().status.state;
});
