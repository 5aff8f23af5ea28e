// A worker whose host sends every request through a `fetch` of the app's
// (functions stay in the worker script: they cannot cross from the page)
// and omits cookies unless the page says otherwise (`credentials` crosses).
// Each request is reported to the page on a BroadcastChannel.
import { serve } from "../pkg/web/worker.js";

const seen = new BroadcastChannel("replay-fetch-worker");
serve({
  credentials: "omit",
  fetch: (url, init) => {
    const accept = new Headers(init.headers).get("accept") ?? "";
    seen.postMessage({ path: new URL(url).pathname, accept, method: init.method, credentials: init.credentials });
    return fetch(url, init);
  },
});
