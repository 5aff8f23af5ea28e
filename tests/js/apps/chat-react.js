// The React app's component, without JSX so that Node can render it too
// (`ssr.mjs`). Props: the target, the connect function and test hooks.
import { createElement as h, useEffect } from "react";
import { useReplay, useReplayView } from "replay-client/react";

export function Chat({ baseUrl, sessionId, connect, onClient, onCommit, onMount }) {
  const client = useReplay({ baseUrl, sessionId }, connect);
  const view = useReplayView(client);
  useEffect(() => onMount?.(), []);
  useEffect(() => onClient?.(client), [client]);
  useEffect(() => onCommit?.());
  if (view === null) return h("p", { id: "status" }, "connecting");
  return h(
    "div",
    null,
    h("p", { id: "status" }, view.status.state),
    h(
      "ul",
      { id: "items" },
      view.items.map((item, i) =>
        h("li", { key: i }, item.kind === "message" ? `${item.role}: ${item.text}` : item.kind),
      ),
    ),
    view.live ? h("p", { id: "live" }, view.live.text) : null,
  );
}
