// The worker half for the apps' `?worker` mode (harness.js).
import { serve } from "replay-client/worker";

serve();
