// The package's shared host, as an app's SharedWorker script calls it
// (README, "One connection per browser"), with the in-memory storage every
// bench client uses (a tab may not choose the host's storage), or the
// storage its URL's `storage` names (the reload paint: an app's default,
// IndexedDB). The bench pages follow through `SharedClient`.
// The glue's `init`, as the host itself calls it (the package entry would
// add two modules to the worker's start).
import init from "../pkg/web/replay_client.js";
import { serveShared } from "../pkg/web/shared.js";

const storage = new URL(import.meta.url).searchParams.get("storage") ?? "memory";
serveShared({ baseUrl: location.origin, storage });

// This worker's wasm linear memory, read by bench.mjs over CDP for the
// 10-tab memory figure (`init` returns the instance serveShared made).
globalThis.wasmMemoryBytes = async () => (await init()).memory.buffer.byteLength;
