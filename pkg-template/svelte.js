// Svelte 5 bindings: `replay` connects when its fields are first read in an
// effect (a component's template) and closes when nothing reads them any
// more; `replayStore` is a store of a client's view (`$view`).
import { createSubscriber } from "svelte/reactivity";
import { openClient } from "./connection.js";

export function replay(options, connect) {
  let client = null;
  let error = null;
  const track = createSubscriber((update) => {
    let unsubscribe = () => {};
    const close = openClient(
      options,
      connect,
      (c) => {
        client = c;
        unsubscribe = c.subscribe(update);
        update();
      },
      (err) => {
        error = err;
        update();
      },
    );
    return () => {
      unsubscribe();
      close();
      client = null;
    };
  });
  return {
    get client() {
      track();
      return client;
    },
    get view() {
      track();
      return client === null ? null : client.view();
    },
    get error() {
      track();
      return error;
    },
  };
}

export function replayStore(client) {
  return {
    subscribe(run) {
      run(client.view());
      return client.subscribe(() => run(client.view()));
    },
  };
}
