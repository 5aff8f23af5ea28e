// One tab of an app that shows one session, for the proxy part of
// bench.mjs: loaded through a proxy that mutes event streams, it connects at
// once (`host=shared`: `SharedClient` and the bench's SharedWorker,
// `host=page`: `ReplayClient` on this page) to `session` and keeps, for
// every view it is given, when it came and what of the answer it shows: the
// live text's end and last characters, the last assistant message's last
// characters (not whole views: an answer's every poll would copy it).
import { connect } from "./connect.js";
const query = new URLSearchParams(location.search);
const sessionId = query.get("session");
const baseUrl = location.origin;
const TAIL = 64;

/** `{ at (Date.now()), liveEnd, liveTail, answerTail }` per view. */
window.views = [];
window.client = null;

function record(view) {
  const answer = view.items.findLast((item) => item.kind === "message" && item.role === "assistant");
  window.views.push({
    at: Date.now(),
    liveEnd: view.live ? view.live.text_offset + view.live.text.length : null,
    liveTail: view.live ? view.live.text.slice(-TAIL) : null,
    answerTail: answer ? answer.text.slice(-TAIL) : null,
  });
}


try {
  const client = await connect(query.get("host"), "bench-proxy", baseUrl, sessionId);
  window.client = client;
  record(client.view());
  client.subscribe(() => record(client.view()));
  document.getElementById("out").textContent = "connected";
} catch (err) {
  window.connectError = String(err?.stack ?? err);
}
