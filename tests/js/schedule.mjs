// The seeded fault schedule that the demo page survives: turns typed into the
// page, each followed (70 % of the time) by a fault from the server's fault
// injection. `e2e.test.mjs` runs it against one server, `cluster.test.mjs`
// against two nodes behind a round-robin proxy.

/** mulberry32: a small seeded PRNG, so a failing schedule can be replayed. */
export function rng(state) {
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The faults a schedule picks from (`POST /v1/admin/faults` bodies). */
export const FAULTS = [
  { kind: "close_streams" },
  { kind: "cut_after_bytes", bytes: 300, count: 1 },
  { kind: "cut_after_bytes", bytes: 1111, count: 1 },
  { kind: "stall", ms: 4000 },
  { kind: "skip_durable", count: 2 },
  { kind: "duplicate", count: 3 },
  { kind: "fail_requests", route: "stream", status: 503, count: 1, retry_after: 1 },
  { kind: "fail_requests", route: "replay", status: 500, count: 1 },
  { kind: "restart_worker" },
];

/** What a turn's message asks of the scripted agent. */
export const DIRECTIVES = ["", "", "/tool", "/bg", "/ask", "/long 600", "/tool /long 300"];

export const turnEnds = (transcript) => transcript.items.filter((i) => i.kind === "turn_end").length;

/**
 * The turn the server gave the user's message `text` (`null` until it is
 * committed) and that turn's end (`null` while it runs). A schedule waits on
 * its own turn: counting every turn's end would let an earlier turn that
 * ends late stand in for it, and the schedule would then go on past a
 * question nobody answered.
 */
export function turnOfText(transcript, text) {
  const message = transcript.items.find((i) => i.kind === "message" && i.role === "user" && i.text === text);
  const end = message && transcript.items.find((i) => i.kind === "turn_end" && i.turn_id === message.turn_id);
  return { turnId: message?.turn_id ?? null, end: end ?? null };
}

/**
 * The demo page's (`window.__replay`) whole transcript: a session is read
 * newest first, so the pages before the one read first are asked for
 * (`loadOlder()` until `hasOlder` is false).
 */
export const pageTranscript = (page) =>
  page.evaluate(async () => {
    const client = window.__replay.client;
    while (client.view().hasOlder) await client.loadOlder();
    return client.transcript();
  });

/** For a timeout's message: the demo page client's diagnostics and last notices. */
export async function clientState(page) {
  const state = page
    ? await page
        .evaluate(() => ({
          diagnostics: window.__replay?.client.diagnostics(),
          notices: window.__replay?.client.view().notices.slice(-10),
        }))
        .catch((e) => String(e))
    : null;
  return JSON.stringify(state);
}

/**
 * The page's and the server's transcripts when they are equal (items and
 * cursor), else null.
 */
export async function converged(page, serverTranscript) {
  const [server, client] = await Promise.all([serverTranscript(), pageTranscript(page)]);
  return client.cursor === server.cursor && JSON.stringify(client.items) === JSON.stringify(server.items)
    ? { server, client }
    : null;
}

/**
 * A send refused for a moment (the runtime's `503` to the message's POST):
 * injected before a turn's message is typed, so that the outbox keeps it
 * queued and sends it again.
 */
export const SEND_FAULT = { kind: "fail_requests", route: "messages", status: 503, count: 1, retry_after: 1 };

/**
 * How long a turn (and its question) may take: a client that met refusals
 * and cuts in a row waits up to the stream backoff's cap (30 s, protocol
 * §6 rule 9) plus a refusal's floor before it comes back, as it should.
 */
const TURN_WAIT_MS = 45_000;

/**
 * Runs `turns` turns of the schedule on the demo `page`: types each message
 * (with `refuseSends`, sometimes into a refused send, `SEND_FAULT`), maybe injects a fault with
 * `injectFault(fault)`, answers questions through the page, and waits for
 * each turn's end on the server. `afterTurn(turn)` runs after each. Returns
 * the kinds of the faults injected and the messages typed, in order.
 */
export async function runSchedule({ page, turns, random, serverTranscript, injectFault, until, afterTurn, refuseSends = false }) {
  const pick = (list) => list[Math.floor(random() * list.length)];
  const faultsInjected = [];
  const typed = [];
  const answered = new Set();
  for (let turn = 0; turn < turns; turn++) {
    const directive = pick(DIRECTIVES);
    if (refuseSends && random() < 0.2) {
      const where = await injectFault(SEND_FAULT);
      faultsInjected.push("refused_send");
      console.log(`turn ${turn}: its send refused once${where ? ` on ${where}` : ""}`);
    }
    console.log(`turn ${turn}: "${directive}"`);
    const text = `turn ${turn} ${directive}`.trim();
    typed.push(text);
    const ended = async () => turnOfText(await serverTranscript(), text).end !== null;
    await page.fill("#message", text);
    await page.click("#composer button[type=submit]");
    if (random() < 0.7) {
      await new Promise((r) => setTimeout(r, Math.floor(random() * 200)));
      const fault = pick(FAULTS);
      const where = await injectFault(fault);
      faultsInjected.push(fault.kind);
      console.log(`turn ${turn}: fault ${JSON.stringify(fault)}${where ? ` on ${where}` : ""}`);
    }
    if (directive.includes("/ask")) {
      // Answer through the page once the question shows (live or persisted);
      // a worker restart may decline it first, which ends the turn anyway.
      await until("the question or the turn's end", async () => {
        const open = await page.evaluate(() => window.__replay.client.view().pendingPrompts.map((p) => p.question_id));
        const fresh = open.find((id) => !answered.has(id));
        // Click inside the page, atomically with finding the button.
        const clicked =
          fresh &&
          (await page.evaluate((id) => {
            const button = document.querySelector(`.prompt[data-question-id="${id}"] button`);
            button?.click();
            return Boolean(button);
          }, fresh));
        if (clicked) {
          answered.add(fresh);
          return true;
        }
        return ended();
      }, TURN_WAIT_MS);
    }
    await until(`turn ${turn} to end on the server`, ended, TURN_WAIT_MS).catch(async (err) => {
      const t = await serverTranscript();
      const turns = t.items
        .filter((i) => i.kind === "turn_end" || (i.kind === "message" && i.role === "user"))
        .map((i) => (i.kind === "turn_end" ? `${i.turn_id} ended ${i.outcome}` : `${i.turn_id} "${i.text}"`));
      console.log("server turns:", JSON.stringify(turns), "prompts:", JSON.stringify(t.pending_prompts));
      throw err;
    });
    const { turnId, end } = turnOfText(await serverTranscript(), text);
    console.log(`turn ${turn}: ${turnId} ended ${end.outcome}`);
    await afterTurn?.(turn);
  }
  return { faultsInjected, typed };
}

/**
 * The texts of the user's messages in a transcript, in order: each message
 * typed once is there once, whatever the faults did to its sends.
 */
export const userTexts = (transcript) =>
  transcript.items.filter((i) => i.kind === "message" && i.role === "user").map((i) => i.text);
