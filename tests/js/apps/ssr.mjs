// The React app's component rendered by react-dom/server in Node: importing
// the binding and rendering touch no browser global and no wasm.
import { createElement as h } from "react";
import { renderToString } from "react-dom/server";
import { Chat } from "./chat-react.js";

export function render() {
  const connect = () => {
    throw new Error("connect must not run on the server");
  };
  return renderToString(h(Chat, { baseUrl: "http://127.0.0.1:8787", sessionId: "ses_1", connect }));
}
