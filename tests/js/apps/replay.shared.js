// The SharedWorker half for the apps' `?shared` mode (harness.js): every
// tab's client in one worker, in memory (each test session is new).
import { serveShared } from "replay-client/shared";

serveShared({ storage: "memory" });
