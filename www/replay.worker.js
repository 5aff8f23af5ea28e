// The demo's client in a worker (`/?worker`): the package's worker half.
import { serve } from "./pkg/web/worker.js";

serve();
