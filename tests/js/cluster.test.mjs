// The SDK on a cluster: the demo page with the client on the page
// (`?page`), in headless Chromium, served by two `replay-server` nodes on one
// Postgres behind a round-robin TCP proxy, as behind a load balancer: each
// new connection of the browser goes to the next node, so its reconnects
// land on either. The test starts the nodes and the proxy itself, so it can
// SIGKILL a node mid-turn and restart Postgres under load.
// `cargo xtask test` passes CLUSTER_SERVER (the replay-server binary),
// CLUSTER_SITE (the demo site), CLUSTER_POSTGRES (a database of its own on a
// throwaway Postgres), CLUSTER_POSTGRES_RESTART (the JSON argv that
// restarts that Postgres like a crash) and CLUSTER_REDIS (a throwaway
// Redis: the nodes' shared live tail, `--redis`); E2E_SEED replays a
// schedule.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import http from "node:http";
import readline from "node:readline";
import { api as call, launchChromium, openPage, sleep, until as waitUntil } from "./support.mjs";
import { clientState, converged, pageTranscript, rng, runSchedule, turnEnds, userTexts } from "./schedule.mjs";

const SERVER = process.env.CLUSTER_SERVER;
const SITE = process.env.CLUSTER_SITE;
const DB = process.env.CLUSTER_POSTGRES;
const RESTART = process.env.CLUSTER_POSTGRES_RESTART;
const REDIS = process.env.CLUSTER_REDIS;
const seed = Number(process.env.E2E_SEED ?? 20261203);
const TURNS = Number(process.env.CLUSTER_TURNS ?? 16);
const LEASE_MS = 1500;

const random = rng(seed);
const until = (what, predicate, timeoutMs = 30_000) =>
  waitUntil(what, predicate, { timeoutMs, describe: async () => ` (seed ${seed}); client: ${await clientState(page)}` });

/** A replay-server process on the shared database; resolves once it listens. */
function startNode() {
  const child = spawn(
    SERVER,
    [
      ...["--listen", "127.0.0.1:0", "--db", DB, "--faults", "--static", SITE],
      ...["--turn-lease-ms", String(LEASE_MS), "--heartbeat-ms", "500", "--delta-ms", "5"],
      ...(REDIS ? ["--redis", REDIS] : []),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const url = line.split("listening on ")[1];
      if (url) resolve({ url: url.trim(), child, port: Number(new URL(url.trim()).port) });
    });
    child.on("exit", (code) => reject(new Error(`replay-server exited (${code}) before it listened`)));
  });
}

/**
 * A round-robin HTTP proxy, as a load balancer: each request goes to the
 * next node, event streams and other requests each in their own turn, so
 * every reconnect of the page's stream lands on the other node. A node that
 * refuses the connection (killed) is skipped, as a health check would.
 * `streams[url]` counts the streams each node was given. `pin`, when set,
 * sends replays to `nodes[pin.replay]` and streams to `nodes[pin.stream]`;
 * `cutStreams()` ends every stream open through the proxy, as a balancer
 * that drops connections.
 */
function startProxy(nodes) {
  const streams = {};
  const open = new Set();
  const next = { stream: 0, other: 0 };
  const proxy = { streams, pin: null, cutStreams: () => open.forEach((res) => res.destroy()) };
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const kind = (req.headers.accept ?? "").includes("text/event-stream") ? "stream" : "other";
    if (kind === "stream") {
      open.add(res);
      res.on("close", () => open.delete(res));
    }
    const pinned = () => {
      if (!proxy.pin) return null;
      if (kind === "stream") return proxy.pin.stream;
      return req.url.includes("/replay") ? proxy.pin.replay : null;
    };
    const forward = (tries) => {
      const node = nodes[pinned() ?? next[kind]++ % nodes.length];
      const upstream = http.request(
        { host: "127.0.0.1", port: node.port, method: req.method, path: req.url, headers: req.headers, agent: false },
        (answer) => {
          if (kind === "stream") streams[node.url] = (streams[node.url] ?? 0) + 1;
          res.writeHead(answer.statusCode, answer.headers);
          answer.pipe(res);
          // A node that dies mid-answer (SIGKILL) ends the page's
          // connection too, as a load balancer does; else the page would
          // wait for its stall timeout.
          answer.on("close", () => {
            if (!answer.complete) res.destroy();
          });
        },
      );
      upstream.on("error", (e) => {
        if (e.code === "ECONNREFUSED" && !res.headersSent && tries > 1) forward(tries - 1);
        else res.destroy();
      });
      res.on("close", () => upstream.destroy());
      upstream.end(body);
    };
    forward(nodes.length + 1);
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve(Object.assign(proxy, { server, url: `http://127.0.0.1:${server.address().port}` })),
    ),
  );
}

let nodes = [];
let proxy;
let browser;
let page;
let sessionId;
const pageErrors = [];

const nodeApi = (node, method, path, body) => call(node.url, method, path, body);
// The truth: the log as a live node reads it (any node: they share it).
const serverTranscript = () => nodeApi(nodes.find((n) => !n.killed), "GET", `/v1/sessions/${sessionId}/transcript`);
const subscriptions = async (node) => (await nodeApi(node, "GET", "/v1/diagnostics/comms")).subscriptions_total;
const pageConverged = (timeoutMs = 60_000) =>
  until("the page to converge on the log", () => converged(page, serverTranscript), timeoutMs);

before(async () => {
  assert.ok(SERVER && SITE && DB, "CLUSTER_SERVER, CLUSTER_SITE and CLUSTER_POSTGRES are set by cargo xtask test");
  nodes = [await startNode(), await startNode()];
  proxy = await startProxy(nodes);
  browser = await launchChromium();
  page = await openPage(browser, proxy.url + "/?page", pageErrors);
  await until("the client to go live", () => page.evaluate(() => window.__replay?.client.status().state === "live"));
  sessionId = await page.evaluate(() => window.__replay.sessionId);
  console.log(`session ${sessionId}, seed ${seed}, nodes ${nodes.map((n) => n.url).join(", ")}, proxy ${proxy.url}`);
});

after(async () => {
  await browser?.close();
  proxy?.server.closeAllConnections();
  proxy?.server.close();
  for (const node of nodes) node.child.kill("SIGKILL");
});

test("a fault schedule whose reconnects land on either node ends equal to the log", async () => {
  // The node that served the page's stream after each turn (its boot id).
  const boots = [];
  const { faultsInjected, typed } = await runSchedule({
    page,
    turns: TURNS,
    random,
    serverTranscript,
    // Faults are per node; each goes to every node, as the one-server
    // schedule's are server-wide: a stream cut on one node is cut again on
    // the other after the reconnect, which the proxy sends there.
    injectFault: async (fault) => {
      for (const node of nodes) await nodeApi(node, "POST", "/v1/admin/faults", fault);
      return "every node";
    },
    until,
    afterTurn: async () => boots.push(await page.evaluate(() => window.__replay.client.diagnostics().bootId)),
  });
  for (const node of nodes) await nodeApi(node, "POST", "/v1/admin/faults", { kind: "clear" });
  const { server, client } = await pageConverged();
  assert.deepEqual(client.items, server.items);
  assert.ok(server.items.length >= TURNS * 2, "every turn left at least its messages");
  // Nothing typed was lost or committed twice, and nothing still waits.
  assert.deepEqual(userTexts(server), typed);
  assert.deepEqual(await page.evaluate(() => window.__replay.client.view().pending), []);
  // Both nodes read the same log: read together, until a pair of reads
  // falls between two changes of the last turn's background task (its
  // tasks snapshot moves on after the page converged: version 6 -> 7).
  await until("both nodes to read the same log", async () => {
    const [a, b] = await Promise.all(nodes.map((n) => nodeApi(n, "GET", `/v1/sessions/${sessionId}/transcript`)));
    return JSON.stringify(a) === JSON.stringify(b) && JSON.stringify(a.items) === JSON.stringify(server.items);
  });
  const diagnostics = await page.evaluate(() => window.__replay.client.diagnostics());
  // The nodes are this file's own: their counts are the page's streams since it opened.
  const served = await Promise.all(nodes.map(subscriptions));
  const switches = boots.filter((b, i) => i > 0 && b !== boots[i - 1]).length;
  console.log("faults:", faultsInjected.join(", "));
  console.log("counters:", JSON.stringify(diagnostics.counters));
  console.log(`subscriptions per node: ${served}; streams through the proxy: ${JSON.stringify(proxy.streams)}`);
  console.log(`boot ids after each turn: ${boots.length} samples, ${new Set(boots).size} distinct, ${switches} switches`);
  assert.ok(diagnostics.counters.reconnects > 0, "the schedule forced reconnects");
  for (const [i, n] of served.entries()) assert.ok(n >= 1, `node ${i} served the page's streams ${n} times`);
  if (REDIS) {
    // One shared live tail: every node serves its boot id (docs/protocol.md, Cluster).
    assert.equal(new Set(boots).size, 1, `one boot id for the whole cluster: ${boots}`);
  } else {
    assert.ok(new Set(boots).size >= 2, `the page saw its stream served by more than one boot: ${boots}`);
  }
  assert.deepEqual(pageErrors, []);
});

/**
 * Starts sampling, in the page every 50 ms, what it shows of turn
 * `turnId`'s answer: the length of the live box's text while it shows that
 * turn, the committed reply's once it is in the transcript; the client's
 * state; and whether the turn is listed as interrupted.
 */
const startSampling = (turnId) =>
  page.evaluate((turnId) => {
    window.__samples = [];
    clearInterval(window.__sampler);
    window.__sampler = setInterval(() => {
      const view = window.__replay.client.view();
      const committed = view.items.find((i) => i.kind === "message" && i.role === "assistant" && i.turn_id === turnId);
      const box = document.getElementById("live");
      const live = !box.hidden && view.live?.turn_id === turnId;
      const text = document.getElementById("live-text").textContent;
      const shown = committed ? committed.text.length : live ? view.live.text_offset + text.length : 0;
      const interrupted = view.interrupted.some((i) => i.turn_id === turnId);
      window.__samples.push({ t: performance.now(), shown, live, committed: !!committed, state: view.status.state, interrupted });
    }, 50);
  }, turnId);

// The sampler ticks every 50 ms: it is stopped once it has seen the answer
// committed, which the caller has just seen in the view (stopped at once,
// its last tick could come before: no committed sample, nothing to measure).
const stopSampling = async () => {
  await until("a sample of the committed answer", () => page.evaluate(() => window.__samples.some((s) => s.committed)));
  return page.evaluate(() => {
    clearInterval(window.__sampler);
    return window.__samples;
  });
};

/**
 * Of the samples from the first shown character to the commit: the time
 * the page was live while its answer stood still, and all of it.
 */
function frozenWhileLive(samples) {
  const start = samples.findIndex((s) => s.shown > 0);
  const end = samples.findIndex((s) => s.committed);
  assert.ok(start >= 0 && end >= start, `samples from the first character to the commit: ${start}..${end} of ${samples.length}`);
  let frozen = 0;
  let waiting = 0;
  for (let i = Math.max(start, 1); i <= end; i++) {
    const [a, b] = [samples[i - 1], samples[i]];
    const dt = b.t - a.t;
    if (b.shown > a.shown) continue;
    if (a.state === "live" && b.state === "live") frozen += dt;
    else waiting += dt;
  }
  return { frozen, waiting, total: samples[end].t - samples[start].t };
}

test("a long answer through reconnects every 1.5 s to either node: the shown answer only grows, and a reload split across nodes shows it live", async (t) => {
  if (!REDIS) return t.skip("CLUSTER_REDIS is not set: live tails stay on their node");
  const ends = turnEnds(await serverTranscript());
  await page.fill("#message", "/long 6000 a long answer through reconnects");
  await page.click("#composer button[type=submit]");
  const turnId = await until("the turn to start on the page", () =>
    page.evaluate(() => window.__replay.client.view().live?.turn_id),
  );
  await startSampling(turnId);
  // A balancer dropping the page's stream every 1.5 s: each reconnect goes
  // to the other node, whichever runs the turn.
  const cutter = setInterval(() => proxy.cutStreams(), 1500);
  await until("the answer to be committed on the page", () =>
    page.evaluate((turnId) => window.__replay.client.view().items.some((i) => i.turn_id === turnId && i.kind === "turn_end"), turnId),
  );
  clearInterval(cutter);
  const samples = await stopSampling();
  const shrinks = samples.filter((s, i) => i > 0 && s.shown < samples[i - 1].shown);
  const { frozen, waiting, total } = frozenWhileLive(samples);
  const reconnects = samples.filter((s, i) => i > 0 && s.state !== "live" && samples[i - 1].state === "live").length;
  console.log(
    `answer: ${total.toFixed(0)} ms, ${reconnects} reconnects; frozen while live ${frozen.toFixed(0)} ms ` +
      `(${((100 * frozen) / total).toFixed(1)} %), reconnect waits ${waiting.toFixed(0)} ms; streams per node ${JSON.stringify(proxy.streams)}`,
  );
  assert.ok(reconnects >= 2, `the stream was cut and moved: ${reconnects} reconnects`);
  assert.deepEqual(shrinks, [], "the shown answer never shrinks");
  assert.ok(frozen <= total * 0.1, `frozen while live ${frozen.toFixed(0)} of ${total.toFixed(0)} ms`);
  assert.ok(!samples.some((s) => s.interrupted), "never shown as interrupted");
  await until("the page to count the new turn", async () => turnEnds(await serverTranscript()) > ends);

  // A reload mid-answer whose replay and stream go to different nodes: the
  // turn runs on node 0, the replay reads node 0, the stream node 1.
  const { turn_id: reloaded } = await nodeApi(nodes[0], "POST", `/v1/sessions/${sessionId}/messages`, {
    message_id: `reload-${seed}`,
    text: "/long 6000 an answer across a reload",
  });
  await until("the turn to run on node 0", async () => {
    const replay = await nodeApi(nodes[0], "GET", `/v1/sessions/${sessionId}/replay`);
    return replay.live_turn?.turn_id === reloaded;
  });
  await until("the page to show it live", () =>
    page.evaluate((turnId) => window.__replay.client.view().live?.turn_id === turnId, reloaded),
  );
  proxy.pin = { replay: 0, stream: 1 };
  try {
    await page.reload();
    await until("the reloaded client to go live", () =>
      page.evaluate(() => window.__replay?.client.status().state === "live"),
    );
    await startSampling(reloaded);
    await until("the reloaded page to show the answer growing", async () => {
      const s = await page.evaluate(() => window.__samples);
      return s.length > 4 && s.at(-1).live && s.at(-1).shown > s.find((x) => x.live)?.shown;
    });
    await until("the answer to be committed on the reloaded page", () =>
      page.evaluate((turnId) => window.__replay.client.view().items.some((i) => i.turn_id === turnId && i.kind === "turn_end"), reloaded),
    );
  } finally {
    proxy.pin = null;
  }
  const after = await stopSampling();
  assert.ok(!after.some((s) => s.interrupted), "the reloaded page never shows the healthy turn as interrupted");
  assert.deepEqual(after.filter((s, i) => i > 0 && s.shown < after[i - 1].shown), [], "nor loses text it showed");
  await pageConverged();
  assert.deepEqual(pageErrors, []);
});

test("a node killed mid-turn: another writes the turn's interrupted end once, and the page shows it", async () => {
  const [victim, survivor] = nodes;
  const ends = turnEnds(await serverTranscript());
  // A slow turn accepted (and so run) by the victim.
  const { turn_id: turnId } = await nodeApi(victim, "POST", `/v1/sessions/${sessionId}/messages`, {
    message_id: `kill-${seed}`,
    text: "/slow /long 3000 a turn its node will not finish",
  });
  await until("the turn to be running on the victim", async () => {
    const replay = await nodeApi(victim, "GET", `/v1/sessions/${sessionId}/replay?after_seq=0`);
    return replay.live_turn?.turn_id === turnId;
  });
  await sleep(300);
  victim.child.kill("SIGKILL");
  victim.killed = true;
  const killedAt = Date.now();
  await until(
    "another node to end the killed node's turn",
    async () => turnEnds(await nodeApi(survivor, "GET", `/v1/sessions/${sessionId}/transcript`)) > ends,
  );
  const took = Date.now() - killedAt;
  const { client } = await pageConverged();
  console.log(`the page converged ${Date.now() - killedAt} ms after the kill`);
  const turnItems = client.items.filter((i) => i.turn_id === turnId && i.kind === "turn_end");
  console.log(`ended ${took} ms after the kill: ${JSON.stringify(turnItems)}`);
  assert.equal(turnItems.length, 1, "the turn ends once");
  assert.equal(turnItems[0].reason, "worker_restart", "the honest boundary");
  assert.ok(took < LEASE_MS * 2 + 2000, `ended ${took} ms after the kill`);
  // Two more leases: still one end, and the page keeps it.
  await sleep(LEASE_MS * 2);
  const later = await pageConverged();
  assert.equal(later.client.items.filter((i) => i.turn_id === turnId && i.kind === "turn_end").length, 1);
  const view = await page.evaluate(() => window.__replay.client.view());
  assert.equal(view.live, null, "no live overlay is left of the killed node's turn");
  // The node comes back (a new process) and the page goes on through it.
  nodes[0] = await startNode();
  const before = turnEnds(later.server);
  await page.fill("#message", "after the kill");
  await page.click("#composer button[type=submit]");
  await until("the next turn to end", async () => turnEnds(await serverTranscript()) > before);
  console.log(`the next turn ended ${Date.now() - killedAt} ms after the kill`);
  await pageConverged();
  assert.deepEqual(pageErrors, []);
});

test("Postgres restarted under load: the nodes reconnect, the page resumes, nothing acknowledged is lost", async (t) => {
  if (!RESTART) return t.skip("CLUSTER_POSTGRES_RESTART is not set");
  const acknowledged = [];
  let writing = true;
  // A writer posting through the proxy (so through either node) meanwhile.
  const writer = (async () => {
    for (let i = 0; writing; i++) {
      const id = `load-${seed}-${i}`;
      try {
        await call(proxy.url, "POST", `/v1/sessions/${sessionId}/messages`, { message_id: id, text: `load ${i} /burst` });
        acknowledged.push(id);
      } catch {
        // Refused while Postgres is down: not acknowledged, so not owed.
      }
      await sleep(250);
    }
  })();
  await sleep(1000);
  const restartedAt = Date.now();
  const [program, ...args] = JSON.parse(RESTART);
  execFileSync(program, args, { stdio: "ignore" });
  console.log(`Postgres restarted in ${Date.now() - restartedAt} ms`);
  const ackedBefore = acknowledged.length;
  await until("writes to be acknowledged again", () => acknowledged.length > ackedBefore + 3, 30_000);
  console.log(`writes acknowledged again ${Date.now() - restartedAt} ms after the restart began`);
  writing = false;
  await writer;
  const { server } = await pageConverged(90_000);
  const ids = new Set(server.items.filter((i) => i.kind === "message" && i.role === "user").map((i) => i.message_id));
  const lost = acknowledged.filter((id) => !ids.has(id));
  console.log(`${acknowledged.length} acknowledged, ${lost.length} lost`);
  assert.deepEqual(lost, [], "every acknowledged message is in the log and on the page");
  assert.deepEqual(pageErrors, []);
});
