// The engine layer's abort probe, a module SharedWorker: it runs the
// executor's `request` (src/wasm/browser.js, re-exported by xtask as
// `executor.js`) against the server's system stream and drops the request
// the moment its answer's head is read, as the wasm does when it lets go of
// a request whose answer has just come (a closing tab, a superseded stream).
// WebKit (WPE 2.38) reports an unhandled `AbortError: Fetch is aborted`
// when the body of a fetch aborted that late is piped afterwards; the hook
// (worker-hook.js) records it. Each port message runs it once and answers
// how the request settled.
import "./worker-hook.js";
import { abortRequest, request } from "./executor.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One request dropped in its head callback: "settled false" is the expected end. */
const dropOnHead = () =>
  new Promise((resolve) => {
    let ctl = null;
    const opened = () => {
      abortRequest(ctl);
      return true;
    };
    const to = [opened, () => true, (_, ended) => resolve(`settled ${ended}`), (_, kind) => resolve(`failed ${kind}`), () => {}];
    ctl = request([location.origin, [], null], to, 1, "GET", "/v1/system/events", "text/event-stream", null, null, true);
  });

onconnect = (e) => {
  const port = e.ports[0];
  port.onmessage = async () => {
    const outcome = await dropOnHead();
    // What the engine reports comes after the request's own end.
    await sleep(500);
    port.postMessage(outcome);
  };
};
