// The worker half of the README's "Off the main thread": bundled by Vite
// from `new Worker(new URL("./replay.worker.ts", import.meta.url), ...)`.
import { serve } from "replay-client/worker";

serve();
