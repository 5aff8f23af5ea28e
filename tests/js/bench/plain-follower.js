// The plain-JS follower's own work, as an app developer would write it:
// fetch the stream, `TextDecoderStream`, split on blank lines, `JSON.parse`,
// append deltas. Run on the page (`jsFollow` in bench.js) and in a worker
// (`follow-worker.js`).

/** Reads `res`'s SSE body to its end, calling `onEvent` with each parsed event. */
export async function readEvents(res, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += value;
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const line = buf
        .slice(0, at)
        .split("\n")
        .find((l) => l.startsWith("data:"));
      buf = buf.slice(at + 2);
      if (line) onEvent(JSON.parse(line.slice(5)));
    }
  }
}

/**
 * Folds one event into `st` (`{cursor, events, text, items}`); true when
 * what a render shows changed. A committed message replaces the text
 * streamed before it.
 */
export function applyEvent(st, e) {
  st.events++;
  if (e.seq) st.cursor = e.seq;
  const d = e.data;
  if (e.type === "turn.delta") st.text += d.text;
  else if (e.type === "message.committed") {
    st.items.push({ kind: "message", message_id: d.message_id, role: d.role, text: d.text });
    st.text = "";
  } else return e.type === "heartbeat" || e.type === "hello";
  return true;
}
