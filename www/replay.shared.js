// The demo's shared host (the default mode): one client per browser for
// every tab of the demo, in a SharedWorker. The server is this origin.
import { serveShared } from "./pkg/web/shared.js";

serveShared({ baseUrl: location.origin });
