// A page's origin in front of a replay-server that a test can stop and
// start: the site's files, and `/v1/` forwarded to the runtime, so the page
// still loads and reloads while the runtime is down. The front counts, per
// `message_id`, the sends the runtime accepted (and per `question_id` the
// answers), and can hold or refuse a send, or hold an answer. Used by the
// demo's outbox tests (Chromium, and every engine).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import readline from "node:readline";

const TYPES = {
  ".html": "text/html",
  ".js": "text/javascript",
  ".mjs": "text/javascript",
  ".wasm": "application/wasm",
  ".css": "text/css",
  ".json": "application/json",
};

/** The file of `site` at `urlPath`, or 404. */
async function serveFile(site, urlPath, res) {
  const file = path.join(site, decodeURIComponent(urlPath === "/" ? "/index.html" : urlPath));
  if (!file.startsWith(site + path.sep)) return res.writeHead(404).end();
  try {
    const body = await fs.readFile(file);
    res.writeHead(200, { "Content-Type": TYPES[path.extname(file)] ?? "application/octet-stream", "Cache-Control": "no-store" });
    res.end(body);
  } catch {
    res.writeHead(404).end();
  }
}

/**
 * The page's origin, serving `site`. `/v1/` goes to the runtime on
 * `front.port`; with no runtime (`port` null) the connection is cut, as a
 * stopped server's. A message the runtime accepted counts in
 * `accepted[message_id]`, an answer it accepted in `answered[question_id]`.
 * While `holdSends` (`holdAnswers`) is set a send (an answer) is kept,
 * unanswered and not forwarded, in `held` (`{ messageId | questionId,
 * aborted }`); while `rejectSends` (`{ status, error }`) is set a send is
 * answered with it.
 */
export function startFront(site) {
  const state = {
    port: null,
    runtime: null,
    accepted: {},
    answered: {},
    holdSends: false,
    holdAnswers: false,
    held: [],
    rejectSends: null,
  };
  const server = http.createServer(async (req, res) => {
    const urlPath = new URL(req.url, "http://front").pathname;
    if (!urlPath.startsWith("/v1/")) return serveFile(site, urlPath, res);
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const isSend = req.method === "POST" && urlPath.endsWith("/messages");
    const questionId = req.method === "POST" ? urlPath.match(/\/questions\/([^/]+)\/answer$/)?.[1] : undefined;
    const isWrite = isSend || questionId !== undefined;
    if (isSend && state.rejectSends) {
      const { status, error } = state.rejectSends;
      res.writeHead(status, { "Content-Type": "application/json" });
      return res.end(JSON.stringify({ error, message: "refused by the test's front" }));
    }
    if ((isSend && state.holdSends) || (questionId !== undefined && state.holdAnswers)) {
      const of = isSend ? { messageId: JSON.parse(body).message_id } : { questionId: decodeURIComponent(questionId) };
      const entry = { ...of, aborted: false, res };
      res.on("close", () => (entry.aborted = true));
      state.held.push(entry);
      return;
    }
    if (state.port === null) return res.destroy();
    const upstream = http.request(
      { host: "127.0.0.1", port: state.port, method: req.method, path: req.url, headers: req.headers, agent: false },
      (answer) => {
        if (isSend && answer.statusCode < 300) {
          const id = JSON.parse(body).message_id;
          state.accepted[id] = (state.accepted[id] ?? 0) + 1;
        }
        if (questionId !== undefined && answer.statusCode < 300) {
          const id = decodeURIComponent(questionId);
          state.answered[id] = (state.answered[id] ?? 0) + 1;
        }
        // The page dropped it (its commit came first on the stream).
        if (res.destroyed) return answer.resume();
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
        // A runtime killed mid-answer ends the page's connection too.
        answer.on("close", () => {
          if (!answer.complete) res.destroy();
        });
      },
    );
    upstream.on("error", () => res.destroy());
    // A write the page dropped still reaches the runtime: its reply is
    // counted all the same.
    res.on("close", () => isWrite || upstream.destroy());
    upstream.end(body);
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve(Object.assign(state, { server, url: `http://127.0.0.1:${server.address().port}` })),
    ),
  );
}

/** Starts `binary` (replay-server) on the SQLite file `db`, behind `front` once it listens. */
export async function startRuntime(front, binary, db) {
  const child = spawn(
    binary,
    [...["--listen", "127.0.0.1:0", "--db", db], ...["--heartbeat-ms", "500", "--delta-ms", "5", "--faults"]],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const port = await new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const url = line.split("listening on ")[1];
      if (url) resolve(Number(new URL(url.trim()).port));
    });
    child.on("exit", (code) => reject(new Error(`replay-server exited (${code}) before it listened`)));
  });
  front.runtime = child;
  front.port = port;
}

/** Kills the runtime behind `front` (as a crash): the front cuts every connection to it. */
export async function stopRuntime(front) {
  front.port = null;
  const child = front.runtime;
  front.runtime = null;
  child.kill("SIGKILL");
  if (child.exitCode === null && child.signalCode === null) await once(child, "exit");
}

/** Stops the runtime, if running, and the front. */
export async function closeFront(front) {
  if (front?.runtime) await stopRuntime(front);
  front?.server.closeAllConnections();
  front?.server.close();
}

/** The runtime's `message.committed` events of `sessionId`, as `message_id -> count`. */
export async function commits(front, sessionId) {
  const res = await fetch(`${front.url}/v1/sessions/${sessionId}/replay?after_cursor=0`);
  assert.ok(res.ok, `replay: ${res.status}`);
  const page = await res.json();
  assert.equal(page.has_more, false, "one page holds the session");
  const counts = {};
  for (const event of page.history) {
    if (event.type === "message.committed") counts[event.data.message_id] = (counts[event.data.message_id] ?? 0) + 1;
  }
  return counts;
}

/** The user messages' ids of the runtime's transcript of `sessionId`, in order. */
export async function committedOrder(front, sessionId) {
  const res = await fetch(`${front.url}/v1/sessions/${sessionId}/transcript`);
  assert.ok(res.ok, `transcript: ${res.status}`);
  const t = await res.json();
  return t.items.filter((i) => i.kind === "message" && i.role === "user").map((i) => i.message_id);
}
