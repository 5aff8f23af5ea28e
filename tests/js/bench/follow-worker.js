// The plain-JS follower of bench.js, moved into a dedicated worker: it
// reads, splits and parses the stream off the main thread and posts what
// changed at most once per frame (the worker's own animation frames). The
// page only applies the posts and renders. It measures how little main
// thread a follower can cost when the stream is not read there: the floor
// of any design that keeps the network and the parsing in a worker.
import { applyEvent, readEvents } from "./plain-follower.js";

// What changed since the last post, in the follower's own terms.
let pending = null;

const schedule =
  typeof requestAnimationFrame === "function" ? (f) => requestAnimationFrame(f) : (f) => setTimeout(f, 16);

function flush() {
  postMessage(pending);
  pending = null;
}

onmessage = async ({ data: { url } }) => {
  const res = await fetch(url, { headers: { Accept: "text/event-stream" } });
  await readEvents(res, (e) => {
    const first = pending === null;
    pending ??= { events: 0, cursor: 0, text: "", items: [] };
    applyEvent(pending, e);
    if (first) schedule(flush);
  });
};
