// The smallest Vite app: proves the package bundles (wasm asset included),
// on the page and in a worker (`replay.worker.ts`).
import init, { ReplayClient } from "replay-client";
import { WorkerClient } from "replay-client/worker-client";

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
