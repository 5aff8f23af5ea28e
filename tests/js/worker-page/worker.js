// The README's worker half, literally (with the package's path on this site).
import { serve } from "../pkg/web/worker.js";

serve();
