// The framework bindings' types, used the way an app would (tsc --strict):
// the on-page client and the worker client both fit them.
import init, { ReplayClient, type ConnectOptions, type View } from "replay-client";
import { WorkerClient } from "replay-client/worker-client";
import { useReplay, useReplayView, type ReplayClientLike } from "replay-client/react";
import { useReplay as useVueReplay } from "replay-client/vue";
import { replay, replayStore } from "replay-client/svelte";

const baseUrl = "http://127.0.0.1:8787";
const onPage = async (options: ConnectOptions) => {
  await init();
  return ReplayClient.connect(options);
};
const worker = new Worker(new URL("./replay.worker.ts", import.meta.url), { type: "module" });

export function reactChat(sessionId: string): string {
  const client: ReplayClient | null = useReplay({ baseUrl, sessionId }, onPage);
  const view: View | null = useReplayView(client);
  const count: number | null = useReplayView(client, (v) => v.items.length);
  const inWorker: WorkerClient | null = useReplay({ baseUrl, sessionId }, (o) => WorkerClient.connect(worker, o));
  const workerView: View | null = useReplayView(inWorker);
  const none: ReplayClientLike | null = useReplay(null, onPage);
  return `${view?.status.state} ${count} ${workerView?.cursor} ${none === null}`;
}

export function vueChat(sessionId: () => string): string {
  const { client, view, error } = useVueReplay(() => ({ baseUrl, sessionId: sessionId() }), onPage);
  const c: ReplayClient | null = client.value;
  return `${c === null} ${view.value?.status.state} ${String(error.value)}`;
}

export function svelteChat(sessionId: string, client: ReplayClient): string {
  const chat = replay({ baseUrl, sessionId }, (o) => WorkerClient.connect(worker, o));
  const c: WorkerClient | null = chat.client;
  const unsubscribe: () => void = replayStore(client).subscribe((view: View) => view.items.length);
  unsubscribe();
  return `${c === null} ${chat.view?.live?.text} ${String(chat.error)}`;
}
