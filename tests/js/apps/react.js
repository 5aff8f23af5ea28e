import { StrictMode, createElement as h } from "react";
import { createRoot } from "react-dom/client";
import { Chat } from "./chat-react.js";
import { connect, expose, mounted, rendered, sessionId } from "./harness.js";

const root = createRoot(document.getElementById("app"));
root.render(
  h(
    StrictMode,
    null,
    h(Chat, {
      baseUrl: location.origin,
      sessionId,
      connect,
      onClient: expose,
      onCommit: rendered,
      onMount: mounted,
    }),
  ),
);
window.t.unmount = () => root.unmount();
