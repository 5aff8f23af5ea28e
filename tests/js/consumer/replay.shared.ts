// The SharedWorker half of the README's "One connection per browser":
// bundled by Vite from `new SharedWorker(new URL("./replay.shared.ts", import.meta.url), ...)`.
import { serveShared } from "replay-client/shared";

serveShared({ baseUrl: location.origin });
