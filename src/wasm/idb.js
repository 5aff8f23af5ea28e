// A minimal IndexedDB key-value store for the client's persisted value:
// database "replay-client", object store "kv", string values.
// Written in JS because the equivalent web-sys bindings cost more bytes.

let dbPromise = null;

function db() {
  if (!dbPromise) {
    dbPromise = new Promise((resolve, reject) => {
      if (typeof indexedDB === "undefined") {
        reject(new Error("indexedDB is not available"));
        return;
      }
      const req = indexedDB.open("replay-client", 1);
      req.onupgradeneeded = () => req.result.createObjectStore("kv");
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
    // A failed open may succeed later (e.g. after a private-mode prompt).
    dbPromise.catch(() => { dbPromise = null; });
  }
  return dbPromise;
}

function run(mode, fn) {
  return db().then((d) => new Promise((resolve, reject) => {
    const tx = d.transaction("kv", mode);
    const req = fn(tx.objectStore("kv"));
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error || new Error("transaction aborted"));
  }));
}

export function idbGet(key) {
  return run("readonly", (s) => s.get(key)).then((v) => (typeof v === "string" ? v : null));
}

export function idbSet(key, value) {
  return run("readwrite", (s) => s.put(value, key)).then(() => undefined);
}

export function idbRemove(key) {
  return run("readwrite", (s) => s.delete(key)).then(() => undefined);
}
