// The plain-JS follower of bench.js, moved into a dedicated worker: it
// reads, splits and parses the stream off the main thread and posts what
// changed at most once per frame (the worker's own animation frames). The
// page only applies the posts and renders. It measures how little main
// thread a follower can cost when the stream is not read there: the floor
// of any design that keeps the network and the parsing in a worker.
let pending = null;
let scheduled = false;

const schedule =
  typeof requestAnimationFrame === "function" ? (f) => requestAnimationFrame(f) : (f) => setTimeout(f, 16);

function flush() {
  scheduled = false;
  if (pending) postMessage(pending);
  pending = null;
}

function apply(frame) {
  const line = frame.split("\n").find((l) => l.startsWith("data:"));
  if (!line) return;
  const e = JSON.parse(line.slice(5));
  pending ??= { events: 0, cursor: 0, append: "", committed: [] };
  pending.events++;
  if (e.seq) pending.cursor = e.seq;
  const d = e.data;
  if (e.type === "turn.delta") pending.append += d.text;
  else if (e.type === "message.committed") {
    // What was appended before the commit belongs to the committed message.
    pending.committed.push({ kind: "message", message_id: d.message_id, role: d.role, text: d.text });
    pending.append = "";
  }
  if (!scheduled) {
    scheduled = true;
    schedule(flush);
  }
}

onmessage = async ({ data: { url } }) => {
  const res = await fetch(url, { headers: { Accept: "text/event-stream" } });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += value;
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      apply(buf.slice(0, at));
      buf = buf.slice(at + 2);
    }
  }
};
