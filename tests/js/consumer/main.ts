// The smallest Vite app: proves the package bundles (wasm asset included).
import init, { ReplayClient } from "replay-client";

await init();
const client = ReplayClient.connect({ baseUrl: location.origin, sessionId: "ses_vite", storage: "memory" });
client.subscribe(() => {
  document.body.textContent = client.view().status.state;
});
