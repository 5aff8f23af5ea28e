// Vue 3 bindings: `useReplay` follows a target in the current effect scope
// (a component's setup) and closes the client when the scope is disposed.
import { onScopeDispose, shallowRef, toValue, watch } from "vue";
import { openClient, targetKey } from "./connection.js";

export function useReplay(options, connect) {
  const client = shallowRef(null);
  const view = shallowRef(null);
  const error = shallowRef(null);
  let stop = () => {};
  watch(
    () => targetKey(toValue(options)),
    (key) => {
      stop();
      stop = () => {};
      client.value = null;
      view.value = null;
      error.value = null;
      if (key === null) return;
      let unsubscribe = () => {};
      const close = openClient(
        toValue(options),
        connect,
        (c) => {
          client.value = c;
          view.value = c.view();
          // A shallowRef triggers only when the view is a new object.
          unsubscribe = c.subscribe(() => {
            view.value = c.view();
          });
        },
        (err) => {
          error.value = err;
        },
      );
      stop = () => {
        unsubscribe();
        close();
      };
    },
    { immediate: true },
  );
  onScopeDispose(() => stop());
  return { client, view, error };
}
