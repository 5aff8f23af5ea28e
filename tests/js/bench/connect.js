// The bench pages' client for one session: in the shared host (`host` is
// "shared"; its SharedWorker named `name`), else on the page, in memory.
export async function connect(host, name, baseUrl, sessionId) {
  if (host === "shared") {
    const { SharedClient } = await import("../pkg/web/shared-client.js");
    const worker = () => new SharedWorker(new URL("./sdk-shared.js", import.meta.url), { type: "module", name });
    const client = await SharedClient.connect(worker, { baseUrl, sessionId });
    const role = client.diagnostics()?.host?.role;
    if (role !== "shared") throw new Error(`the client runs in "${role}", not the shared host`);
    return client;
  }
  const { default: init, ReplayClient } = await import("../pkg/web/index.js");
  await init();
  return ReplayClient.connect({ baseUrl, sessionId, storage: "memory" });
}
