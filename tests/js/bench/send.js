// A chat page's composer, for the send figures of bench.mjs: `host=shared`
// (the shared host, `SharedClient`), `host=page` (`ReplayClient` on the
// page) render the view's `pending` as bubbles from `subscribe`, as an app
// does with no optimistic bubble of its own; `host=plain` is a hand-written
// page that appends its own bubble, then POSTs the message (and keeps it).
// `window.measureSend(text, delayMs)`: sends `text` `delayMs` after a
// frame's start (a click comes anywhere in a frame) and resolves `{ frames,
// ms }`: the frame that paints its bubble, counted from the first frame
// painted after the send (1: that one, as for the hand-written page's own
// append), and the time from the send to that frame's start.
import { connect } from "./connect.js";
const query = new URLSearchParams(location.search);
const host = query.get("host");
const sessionId = query.get("session");
const baseUrl = location.origin;
const list = document.getElementById("bubbles");

function bubble(id, text) {
  const li = document.createElement("li");
  li.dataset.id = id;
  li.textContent = text;
  return li;
}

/**
 * The user's messages as bubbles keyed by `message_id`, each made once:
 * pending ones, then the same bubble once committed (the commit may come
 * before the next frame on loopback).
 */
const shown = new Set();
let itemsSeen = 0;
function render(view) {
  const add = (id, text) => {
    if (!shown.has(id)) {
      shown.add(id);
      list.append(bubble(id, text));
    }
  };
  for (const item of view.items.slice(itemsSeen)) if (item.kind === "message" && item.role === "user") add(item.message_id, item.text);
  itemsSeen = view.items.length;
  for (const p of view.pending) add(p.message_id, p.text);
}


let n = 0;
/** Sends `text`; its bubble's id. */
let send;
if (host === "plain") {
  send = (text) => {
    const id = `plain_${Date.now()}_${n++}`;
    list.append(bubble(id, text));
    fetch(`${baseUrl}/v1/sessions/${sessionId}/messages`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ message_id: id, text }),
    });
    return id;
  };
} else {
  const client = await connect(host, "bench-send", baseUrl, sessionId);
  client.subscribe(() => render(client.view()));
  render(client.view());
  send = (text) => {
    const id = `${host}_${Date.now()}_${n++}`;
    client.send(text, id).catch((err) => (window.sendError = String(err)));
    return id;
  };
}

// The frames: `frameNo` counts animation frames, at the start of each
// one's callbacks (this loop's callback was asked for first); `inFrame` is
// true from there until the first task after the frame's rendering (a
// message posted from its callbacks). A bubble added while `inFrame` (an
// SDK's notification comes in a frame's callbacks) is painted in that
// frame, one added in a task in the next.
let frameNo = 0;
let inFrame = false;
const after = new MessageChannel();
after.port1.onmessage = () => (inFrame = false);
const loop = () => {
  frameNo += 1;
  inFrame = true;
  after.port2.postMessage(0);
  requestAnimationFrame(loop);
};
requestAnimationFrame(loop);
const paintingFrame = () => (inFrame ? frameNo : frameNo + 1);

window.measureSend = (text, delayMs) =>
  new Promise((resolve) => {
    // `delayMs` after a frame's start, as a click comes anywhere in a frame.
    requestAnimationFrame(() =>
      setTimeout(() => {
        const next = paintingFrame();
        const start = performance.now();
        const id = send(text);
        const shown = (frame) => {
          // The time to the start of the frame that paints it.
          if (frame === frameNo && inFrame) return resolve({ frames: frame - next + 1, ms: performance.now() - start });
          requestAnimationFrame(() => resolve({ frames: frame - next + 1, ms: performance.now() - start }));
        };
        if (list.querySelector(`[data-id="${id}"]`)) return shown(paintingFrame());
        const watch = new MutationObserver(() => {
          if (list.querySelector(`[data-id="${id}"]`)) {
            watch.disconnect();
            shown(paintingFrame());
          }
        });
        watch.observe(list, { childList: true });
        setTimeout(() => {
          watch.disconnect();
          resolve({ frames: frameNo - next + 1, ms: NaN });
        }, 2_000);
      }, delayMs),
    );
  });
window.ready = true;
