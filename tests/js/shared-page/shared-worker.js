// The README's SharedWorker script, literally (with the package's path on
// this site): the host's base URL is this origin.
import { serveShared } from "../pkg/web/shared.js";

serveShared({ baseUrl: location.origin });
