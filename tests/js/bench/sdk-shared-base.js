// The shared host of an earlier build (`BENCH_BASE_PKG`, served at
// ../pkg-base/), as sdk-shared.js runs this one: the shared part's
// before/after within one run.
import { serveShared } from "../pkg-base/web/shared.js";

serveShared({ baseUrl: location.origin, storage: "memory" });
