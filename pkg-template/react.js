// React bindings: `useReplay` owns a client's lifetime, `useReplayView`
// reads its view with useSyncExternalStore. See react.d.ts.
import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { openClient, targetKey } from "./connection.js";

export function useReplay(options, connect) {
  const key = targetKey(options);
  const [state, setState] = useState({ key: null, client: null });
  // The open connection of this component. StrictMode runs an effect, its
  // cleanup and the effect again on mount: the close is deferred to a task,
  // so the second run finds the same target and keeps the first client (one
  // stream, not a closed client plus a second one).
  const open = useRef(null);
  useEffect(() => {
    if (key === null) return undefined;
    let entry = open.current;
    if (entry !== null && entry.key === key && entry.closing !== null) {
      clearTimeout(entry.closing);
      entry.closing = null;
    } else {
      const close = openClient(
        options,
        connect,
        (client) => setState({ key, client }),
        (err) =>
          setState(() => {
            throw err; // to the nearest error boundary
          }),
      );
      entry = { key, close, closing: null };
      open.current = entry;
    }
    const mine = entry;
    return () => {
      mine.closing = setTimeout(() => {
        mine.close();
        if (open.current === mine) open.current = null;
      }, 0);
    };
    // Only the target decides: other options (getToken, storage) are read at connect.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);
  return state.key === key ? state.client : null;
}

const noSubscription = () => () => {};
const serverSnapshot = () => null;

export function useReplayView(client, selector) {
  const subscribe = useCallback(
    (listener) => (client == null ? noSubscription() : client.subscribe(listener)),
    [client],
  );
  // A selector's result is kept while the view and the selector are the
  // same, so useSyncExternalStore sees a stable snapshot.
  const memo = useRef({ view: undefined, selector: undefined, selected: null });
  const getSnapshot = () => {
    if (client == null) return null;
    const view = client.view();
    if (selector === undefined) return view;
    const m = memo.current;
    if (m.view !== view || m.selector !== selector) {
      m.view = view;
      m.selector = selector;
      m.selected = selector(view);
    }
    return m.selected;
  };
  return useSyncExternalStore(subscribe, getSnapshot, serverSnapshot);
}
