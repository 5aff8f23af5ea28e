// The README's SharedWorker script (with the package's path on this site):
// the host's base URL is this origin. `?headers`: every request carries a
// header too, as a worker whose options add to its pages'.
import { serveShared } from "../pkg/web/shared.js";

serveShared({ baseUrl: location.origin, ...(location.search === "?headers" && { headers: { "X-Replay-Test": "1" } }) });

// Not the README's: a probe for the tests. The worker's unhandled
// rejections, sent to a port that posts `{ probe: "rejections" }` (the
// host refuses that unversioned message on the same port: the tab waits
// for the answer that has `rejections`).
const rejections = [];
addEventListener("unhandledrejection", (event) => rejections.push(String(event.reason)));
addEventListener("connect", ({ ports: [port] }) => {
  port.addEventListener("message", ({ data }) => {
    if (data?.probe === "rejections") port.postMessage({ rejections });
    // What this worker fetched itself (resource timing, URLs).
    if (data?.probe === "requests") port.postMessage({ requests: performance.getEntriesByType("resource").map((e) => e.name) });
    // The network lost and back, as the browser says it to a worker
    // (`online` follows an `offline`: navigator.onLine changed).
    if (data?.probe === "online") {
      dispatchEvent(new Event("offline"));
      dispatchEvent(new Event("online"));
      port.postMessage({ online: true });
    }
  });
});
