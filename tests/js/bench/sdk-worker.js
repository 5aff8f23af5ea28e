// The package's worker half, as an app would start it (README, "Off the
// main thread"): the bench page follows through `WorkerClient`.
import { serve } from "../pkg/web/worker.js";

serve();
