import { StrictMode, createElement as h, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { Chat } from "./chat-react.js";
import { connect, expose, mounted, rendered, sessionId } from "./harness.js";

// The session is state, so the test can switch it (`t.setSession`).
function App() {
  const [session, setSession] = useState(sessionId);
  useEffect(() => {
    window.t.setSession = setSession;
  }, []);
  return h(Chat, {
    baseUrl: location.origin,
    sessionId: session,
    connect,
    onClient: expose,
    onCommit: rendered,
    onMount: mounted,
  });
}

const root = createRoot(document.getElementById("app"));
root.render(h(StrictMode, null, h(App)));
window.t.unmount = () => root.unmount();
