// One client per browser: the shared host (`replay-client/shared` in a
// SharedWorker, `replay-client/shared-client` on each tab), in headless
// Chromium against a live replay-server over HTTP/1.1 on loopback. All tabs
// are pages of one browser context, so they share one SharedWorker.
// `page.route` does not see a SharedWorker's requests: the server's
// fault injection and its `/v1/diagnostics` stream count stand in.
// `cargo xtask test` serves tests/js/shared-page/ at /shared-page/.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { api as call, launchChromium, openPage, until } from "./support.mjs";

const url = process.env.E2E_URL;
const api = (method, path, body) => call(url, method, path, body);
// The server's open event streams (SSE bodies, scoped or multiplexed), and
// the scopes they carry (`streams` of its diagnostics counts those).
const comms = () => api("GET", "/v1/diagnostics/comms");
const streams = async () => (await comms()).streams_open;
const scopesFollowed = async () => (await comms()).streams;
const newSession = async (title) => (await api("POST", "/v1/sessions", { title })).session_id;

let browser;
let context;
const pageErrors = [];

before(async () => {
  assert.ok(url, "E2E_URL is set by cargo xtask test");
  browser = await launchChromium();
  context = await browser.newContext();
});

after(async () => {
  await browser?.close();
});

/** `n` tabs of the test page, each following what `options(i)` says. */
async function openTabs(n, options, query = "") {
  const tabs = [];
  for (let i = 0; i < n; i++) {
    const tab = await openPage(context, url + "/shared-page/" + query, pageErrors);
    await tab.waitForFunction(() => document.getElementById("out").textContent === "ready");
    await tab.evaluate((o) => window.t.connect(o), options(i));
    tabs.push(tab);
  }
  return tabs;
}

/** Every tab's view equal to the server's transcript of its session, the turn ended. */
function converged(tabs, sessionOf) {
  return until(
    "every tab to show the server's transcript",
    async () => {
      for (const [i, tab] of tabs.entries()) {
        const server = await api("GET", `/v1/sessions/${sessionOf(i)}/transcript`);
        const v = await tab.evaluate(() => window.t.state());
        const ended = server.items.some((x) => x.kind === "turn_end");
        if (!ended || v.state !== "live" || v.live !== null || v.cursor !== server.cursor) return false;
        if (JSON.stringify(v.items) !== JSON.stringify(server.items)) return false;
      }
      return true;
    },
    { timeoutMs: 30_000 },
  );
}

const allLive = (tabs) =>
  until("every tab live", async () => {
    for (const tab of tabs) if ((await tab.evaluate(() => window.t.state().state)) !== "live") return false;
    return true;
  });

// Streams of earlier tests (and files) ended: counts below are this test's.
const noStreams = () =>
  until("no stream open at the server", async () => (await streams()) === 0 && (await scopesFollowed()) === 0);

const closeAll = async (tabs) => {
  for (const tab of tabs) if (!tab.isClosed()) await tab.close();
};

test("10 tabs of one session: one stream at the server; a reply sent from one shows in all", async () => {
  await noStreams();
  const sessionId = await newSession("shared ten tabs");
  const tabs = await openTabs(10, () => ({ sessionId }));
  await allLive(tabs);
  const hosts = await Promise.all(tabs.map((t) => t.evaluate(() => window.t.state().host)));
  assert.ok(hosts.every((h) => h.role === "shared" && h.instance === hosts[0].instance), JSON.stringify(hosts));
  assert.equal(hosts.at(-1).attached, 10, "the tenth tab shares the client of the nine before it");
  await until("one stream at the server", async () => (await streams()) === 1, {
    describe: async () => `: ${await streams()} open`,
  });

  const { turnId } = await tabs[3].evaluate(() => window.t.client.send("/tool from tab 3"));
  assert.ok(turnId);
  await converged(tabs, () => sessionId);
  assert.equal(await streams(), 1, "still one stream for ten tabs");
  for (const tab of tabs) assert.equal(await tab.evaluate(() => window.t.wasmLoadedHere()), false, "no wasm in a tab");
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("a long answer's live text on every tab is always a head of the committed answer, whenever the tab attached", async () => {
  await noStreams();
  const sessionId = await newSession("shared live text");
  const tabs = await openTabs(1, () => ({ sessionId }));
  await allLive(tabs);
  await tabs[0].evaluate(() => window.t.client.send("/long 6000 every tab sees the same words"));
  await until("the answer to stream", () => tabs[0].evaluate(() => (window.t.state().live?.text.length ?? 0) > 500));
  // Attached mid-answer: its first view has the live text whole, the next
  // ones what the text gained (`Machine::page_update`).
  tabs.push(...(await openTabs(1, () => ({ sessionId }))));
  await converged(tabs, () => sessionId);
  const answer = (await api("GET", `/v1/sessions/${sessionId}/transcript`)).items.find(
    (item) => item.kind === "message" && item.role === "assistant",
  );
  assert.ok(answer && answer.text.length >= 6000, "the answer committed whole");
  for (const [i, tab] of tabs.entries()) {
    const texts = await tab.evaluate(() => window.t.views.flatMap((v) => (v.live ? [[v.live.text_offset, v.live.text]] : [])));
    assert.ok(texts.length >= 5, `tab ${i} saw the answer grow (${texts.length} live views)`);
    for (const [offset, text] of texts) {
      const head = answer.text.slice(offset, offset + text.length);
      assert.ok(text === head, `tab ${i}: a live text of ${text.length} at ${offset} is not the answer's (…${text.slice(-40)})`);
    }
    const lengths = texts.map(([, text]) => text.length);
    assert.ok(lengths.at(-1) > 1000, `tab ${i} followed the answer to its end (${lengths.at(-1)})`);
  }
  await closeAll(tabs);
  assert.deepEqual(pageErrors, []);
});

/** Every replay, events and stream request fails with 503 (50 each, counted down), until cleared. */
async function failHostRequests() {
  await api("POST", "/v1/admin/faults", { kind: "clear" });
  for (const route of ["replay", "events", "stream"]) {
    await api("POST", "/v1/admin/faults", { kind: "fail_requests", route, status: 503, count: 50 });
  }
}

test("the session's title and end and a runtime's own event type reach every tab, as parts of the view", async () => {
  await noStreams();
  const sessionId = await newSession("shared said");
  const tabs = await openTabs(2, () => ({ sessionId }));
  await allLive(tabs);
  await tabs[0].evaluate(() => window.t.client.send("/plan /tool /close"));
  await converged(tabs, () => sessionId);
  for (const tab of tabs) {
    const v = await until("the session closed on the tab", async () => {
      const s = await tab.evaluate(() => window.t.state());
      return s.session?.state === "closed" ? s : null;
    });
    assert.deepEqual(v.session, { title: "shared said", state: "closed" });
    assert.equal(v.extras.length, 1, JSON.stringify(v.extras));
    assert.equal(v.extras[0].type, "plan.updated");
    assert.deepEqual(v.extras[0].data.steps, ["read", "answer"]);
    const tool = v.items.find((i) => i.kind === "tool");
    assert.equal(typeof tool.input.command, "string", JSON.stringify(tool));
  }
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("a second tab on a followed session paints from the worker's memory, without a request", async () => {
  await noStreams();
  const sessionId = await newSession("shared second tab");
  await api("POST", `/v1/sessions/${sessionId}/messages`, { message_id: "m_second", text: "/tool before" });
  const [first] = await openTabs(1, () => ({ sessionId }));
  await converged([first], () => sessionId);
  // Any request the worker made for the second tab would fail, and be counted.
  await failHostRequests();
  try {
    const [second] = await openTabs(1, () => ({ sessionId }));
    const painted = await second.evaluate(() => {
      const view = window.t.views[0];
      return { state: view.status.state, items: view.items, cursor: view.cursor };
    });
    const server = await api("GET", `/v1/sessions/${sessionId}/transcript`);
    assert.equal(painted.state, "live", "the first view the second tab got is already live");
    assert.equal(painted.cursor, server.cursor);
    assert.equal(JSON.stringify(painted.items), JSON.stringify(server.items));
    const { faults } = await api("GET", "/v1/admin/faults");
    assert.deepEqual(
      faults.map((f) => f.count),
      [50, 50, 50],
      "no request of the second tab reached the server",
    );
    await closeAll([first, second]);
  } finally {
    await api("POST", "/v1/admin/faults", { kind: "clear" });
  }
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("a reload paints the stored transcript before the host answers, then goes live equal to the server", async () => {
  await noStreams();
  const sessionId = await newSession("shared reload paint");
  await api("POST", `/v1/sessions/${sessionId}/messages`, { message_id: "m_paint", text: "/tool before the reload" });
  const [tab] = await openTabs(1, () => ({ sessionId }));
  await converged([tab], () => sessionId);
  const server = await api("GET", `/v1/sessions/${sessionId}/transcript`);
  // Every request of the host after the reload fails: what the reload
  // paints first cannot have come from the server.
  await failHostRequests();
  try {
    await tab.reload();
    await tab.waitForFunction(() => document.getElementById("out").textContent === "ready");
    await tab.evaluate((sessionId) => window.t.connect({ sessionId }), sessionId);
    const painted = await tab.evaluate(() => {
      const view = window.t.views[0];
      return { stored: view.stored, state: view.status.state, items: view.items, cursor: view.cursor };
    });
    assert.equal(painted.stored, true, "the first view is the stored paint snapshot");
    assert.equal(painted.state, "restoring");
    assert.equal(painted.cursor, server.cursor);
    assert.equal(JSON.stringify(painted.items), JSON.stringify(server.items));
    assert.equal(await tab.evaluate(() => window.t.wasmLoadedHere()), false, "painted without the wasm");
  } finally {
    await api("POST", "/v1/admin/faults", { kind: "clear" });
  }
  await converged([tab], () => sessionId);
  const { shrank, storedAgain, shown } = await tab.evaluate(() => {
    const views = window.t.views;
    const hosts = views.findIndex((v) => !v.stored);
    return {
      shrank: views.some((v) => v.items.length < views[0].items.length),
      storedAgain: views.slice(hosts).some((v) => v.stored),
      // What each view showed, for a failure's message.
      shown: views.map((v) => `${v.stored ? "stored " : ""}${v.status.state} cursor ${v.cursor} items ${v.items.length}`),
    };
  });
  assert.equal(shrank, false, `the host's view replaced the stored one without showing fewer items: ${shown.join("; ")}`);
  assert.equal(storedAgain, false, "once replaced, the stored paint does not come back");
  await closeAll([tab]);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("9 tabs closed and one crashed: within 2 s the worker follows only what the remaining tab wants", async () => {
  await noStreams();
  const keep = await newSession("shared keep");
  const others = [await newSession("shared a"), await newSession("shared b")];
  const crashed = await newSession("shared crashed");
  // Tab 0 keeps `keep`; tabs 1-9 follow a and b; tab 10 alone follows
  // `crashed`. One stream carrying four scopes.
  const sessionOf = (i) => (i === 0 ? keep : i === 10 ? crashed : others[i % 2]);
  const tabs = await openTabs(11, (i) => ({ sessionId: sessionOf(i) }));
  await allLive(tabs);
  await until("one stream carrying four scopes", async () => (await streams()) === 1 && (await scopesFollowed()) === 4);

  for (const tab of tabs.slice(1, 10)) await tab.close();
  // A renderer that dies says nothing: only its Web Lock going tells the worker.
  const cdp = await context.newCDPSession(tabs[10]);
  cdp.send("Page.crash").catch(() => {});
  // A scope whose last client closed leaves the connection at once (no
  // linger): the hub opens the new set, then closes the old (§4.6).
  await until(
    "the worker's stream to follow only the remaining tab's session",
    async () => (await streams()) === 1 && (await scopesFollowed()) === 1,
    { timeoutMs: 2_000, describe: async () => `: ${await streams()} streams, ${await scopesFollowed()} scopes` },
  );
  assert.equal((await tabs[0].evaluate(() => window.t.state().host)).attached, 1);
  // The remaining tab still follows.
  await api("POST", `/v1/sessions/${keep}/messages`, { message_id: "m_keep", text: "/tool still here" });
  await converged([tabs[0]], () => keep);
  await closeAll(tabs);
  await noStreams();
  assert.ok(
    pageErrors.every((e) => /crash/i.test(e)),
    JSON.stringify(pageErrors),
  );
  pageErrors.length = 0;
});

test("the SharedWorker killed mid-answer: every tab attaches to a new one and ends equal to the server", async () => {
  await noStreams();
  const sessionId = await newSession("shared killed");
  const tabs = await openTabs(3, () => ({ sessionId }));
  await allLive(tabs);
  const before = (await tabs[0].evaluate(() => window.t.state().host)).instance;
  await tabs[1].evaluate(() => window.t.client.send("/long 4000 killed mid-answer"));
  await until("the answer to stream", () => tabs[2].evaluate(() => (window.t.state().live?.text.length ?? 0) > 200));

  const cdp = await browser.newBrowserCDPSession();
  const { targetInfos } = await cdp.send("Target.getTargets");
  const workers = targetInfos.filter((t) => t.type === "shared_worker");
  assert.equal(workers.length, 1, JSON.stringify(targetInfos.map((t) => t.type)));
  // A send the worker dies with: its request held at the server (a delay
  // fault) when the worker is killed, so no reply ever comes from it; the
  // tab sends it again to the new worker, with the same message id.
  await api("POST", "/v1/admin/faults", { kind: "delay", ms: 1_000, count: 1, route: "messages" });
  const racing = tabs[0].evaluate(() => window.t.client.send("/tool racing the kill"));
  await until("the send to reach the server", async () => {
    const { faults } = await api("GET", "/v1/admin/faults");
    return !faults.some((f) => f.kind === "delay");
  });
  await cdp.send("Target.closeTarget", { targetId: workers[0].targetId });

  await until("every tab on a new worker", async () => {
    for (const tab of tabs) {
      const host = await tab.evaluate(() => window.t.state().host);
      if (host.instance === before) return false;
    }
    return true;
  });
  let timer;
  const unanswered = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error("the send the worker died with never resolved")), 30_000);
  });
  try {
    assert.ok((await Promise.race([racing, unanswered])).turnId, "the send the worker died with resolved");
  } finally {
    clearTimeout(timer);
  }
  await converged(tabs, () => sessionId);
  const hosts = await Promise.all(tabs.map((t) => t.evaluate(() => window.t.state().host)));
  assert.ok(hosts.every((h) => h.instance === hosts[0].instance && h.attached === 3), JSON.stringify(hosts));
  // A write after the restart goes through the new worker; no duplicate.
  await tabs[0].evaluate(() => window.t.client.send("/tool after the restart"));
  await converged(tabs, () => sessionId);
  await until("one stream", async () => (await streams()) === 1);
  const { items } = await api("GET", `/v1/sessions/${sessionId}/transcript`);
  const said = (text) => items.filter((i) => i.kind === "message" && i.role === "user" && i.text === text).length;
  assert.deepEqual(
    [said("/long 4000 killed mid-answer"), said("/tool racing the kill"), said("/tool after the restart")],
    [1, 1, 1],
    "every message once: nothing lost, nothing duplicated",
  );
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("a long session newest first through the shared host: loadOlder() brings every older item once", async () => {
  const session = await newSession("newest first");
  for (let k = 0; k < 12; k++) {
    const { turn_id } = await api("POST", `/v1/sessions/${session}/messages`, { message_id: `m${k}`, text: `q${k}` });
    await until(`turn ${k} to end`, async () => {
      const { items } = await api("GET", `/v1/sessions/${session}/transcript`);
      return items.some((x) => x.kind === "turn_end" && x.turn_id === turn_id);
    });
  }
  const server = await api("GET", `/v1/sessions/${session}/transcript`);
  const [tab] = await openTabs(1, () => ({ sessionId: session, tail: 3 }));
  await allLive([tab]);
  const first = await tab.evaluate(() => ({ items: window.t.client.view().items, hasOlder: window.t.client.view().hasOlder }));
  assert.equal(first.hasOlder, true);
  assert.ok(first.items.length < server.items.length / 4, `${first.items.length} items of ${server.items.length}`);
  assert.deepEqual(first.items, server.items.slice(-first.items.length));
  let loads = 0;
  while (await tab.evaluate(() => window.t.client.view().hasOlder)) {
    await tab.evaluate(() => window.t.client.loadOlder());
    loads += 1;
  }
  assert.ok(loads >= 4, `${loads} older pages`);
  await tab.evaluate(() => window.t.client.loadOlder());
  assert.deepEqual(await tab.evaluate(() => window.t.client.view().items), server.items);
  await closeAll([tab]);
});

test("two tabs naming one scopeId but different sessions get a client each", async () => {
  await noStreams();
  const [a, b] = [await newSession("target a"), await newSession("target b")];
  const tabs = await openTabs(2, (i) => ({ sessionId: [a, b][i], scopeId: "x" }));
  await allLive(tabs);
  for (const [i, tab] of tabs.entries()) {
    const { scopeId, attached } = await tab.evaluate(() => ({
      scopeId: window.t.client.view().scopeId,
      attached: window.t.state().host.attached,
    }));
    assert.deepEqual([scopeId, attached], [[a, b][i], 1], "the sessionId wins, as on the page");
  }
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

// WPE 2.38 (Safari 16's engine) reported an unhandled `AbortError: Fetch is
// aborted` in the worker here: a stream aborted from inside a body's pipeTo
// write callback (the hub's old connection, closed when the new one's
// hellos arrive, or a dropped stream). Chromium may not show it; the probe
// counts what it does show.
test("a reload mid-answer in shared mode leaves no unhandled rejection in the worker", async () => {
  await noStreams();
  const [a, b] = [await newSession("reload a"), await newSession("reload b")];
  const tabs = await openTabs(2, (i) => ({ sessionId: [a, b][i] }));
  await allLive(tabs);
  await tabs[0].evaluate(() => window.t.client.send("/tool beside the reload"));
  await tabs[1].evaluate(() => window.t.client.send("/long 4000 reloaded mid-answer"));
  await until("the answer to stream", () => tabs[1].evaluate(() => (window.t.state().live?.text.length ?? 0) > 200));
  await tabs[1].reload();
  await tabs[1].waitForFunction(() => document.getElementById("out").textContent === "ready");
  await tabs[1].evaluate((sessionId) => window.t.connect({ sessionId }), b);
  await converged(tabs, (i) => [a, b][i]);
  await until("one stream", async () => (await streams()) === 1);
  assert.deepEqual(await tabs[0].evaluate(() => window.t.rejections()), []);
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

// The host posts on a 16 ms timer (a SharedWorker runs no frames); the
// page half calls the tab's subscribers once per animation frame of the
// tab whatever it is posted.
test("a tab's subscribers are called at most once per animation frame while a long answer streams", async () => {
  await noStreams();
  const sessionId = await newSession("shared per frame");
  const [tab] = await openTabs(1, () => ({ sessionId }));
  await allLive([tab]);
  await tab.evaluate(() => {
    const s = (window.perFrame = { calls: 0, most: 0, total: 0 });
    window.t.client.subscribe(() => {
      s.calls++;
      s.total++;
    });
    const frame = () => {
      s.most = Math.max(s.most, s.calls);
      s.calls = 0;
      requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  });
  await tab.evaluate(() => window.t.client.send("/long 4000 counted per frame"));
  await converged([tab], () => sessionId);
  const { most, total } = await tab.evaluate(() => window.perFrame);
  assert.ok(total >= 20, `the answer reached the subscriber in steps: ${total} calls`);
  assert.ok(most <= 1, `subscriber calls in one animation frame: at most ${most}, of ${total}`);
  await closeAll([tab]);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

// Headless Chromium does not freeze a visible page (CDP
// `Page.setWebLifecycleState` fires nothing there): the tab is sent the
// `freeze` and `resume` events the browser would fire, and keeps running,
// so what it is posted meanwhile can be counted.
test("a frozen tab keeps its subscription but is posted nothing until it resumes, then the whole view", async () => {
  await noStreams();
  const sessionId = await newSession("shared frozen");
  const [active, frozen] = await openTabs(2, () => ({ sessionId }));
  await allLive([active, frozen]);
  try {
    await frozen.evaluate(() => document.dispatchEvent(new Event("freeze")));
    // A view the host posted before it read the pause may still be on its
    // way (and is shown at the tab's next frame): counted from once none is.
    const settled = () => frozen.evaluate(() => new Promise((r) => setTimeout(() => r(window.t.views.length), 300)));
    let before = await settled();
    for (let again = await settled(); again !== before; again = await settled()) before = again;
    await active.evaluate(() => window.t.client.send("/long 1500 while the other tab is frozen"));
    await converged([active], () => sessionId);
    assert.equal((await active.evaluate(() => window.t.state().host)).attached, 2, "the frozen tab stays attached");
    assert.equal(await frozen.evaluate(() => window.t.views.length), before, "no view while frozen");
    await frozen.evaluate(() => document.dispatchEvent(new Event("resume")));
    await converged([frozen], () => sessionId);
    // Dozens of views streamed meanwhile; the frozen tab got the whole view once.
    const added = (await frozen.evaluate(() => window.t.views.length)) - before;
    assert.equal(added, 1, "views posted to the tab: none while frozen, the whole view once on resume");
  } finally {
    // Closed whatever happened: a tab left open holds the stream the next
    // tests wait to see gone.
    await closeAll([active, frozen]);
  }
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("a fault schedule with 3 tabs: nothing lost, nothing duplicated, every tab equal to the server", async () => {
  await noStreams();
  const sessionId = await newSession("shared faults");
  const tabs = await openTabs(3, () => ({ sessionId }));
  await allLive(tabs);
  // The worker's requests are not visible to page.route: the server injects.
  const schedule = [
    { kind: "close_streams" },
    { kind: "cut_after_bytes", bytes: 500, count: 1 },
    { kind: "fail_requests", route: "stream", status: 503, count: 2, retry_after: 1 },
    { kind: "duplicate", count: 3 },
    { kind: "skip_durable", count: 2 },
    { kind: "fail_requests", route: "replay", status: 500, count: 1 },
    { kind: "restart_worker" },
    { kind: "close_streams" },
  ];
  const sent = [];
  for (const [i, fault] of schedule.entries()) {
    const text = i % 2 ? `/long 400 turn ${i}` : `/tool turn ${i}`;
    const tab = tabs[i % 3];
    const outcome = await tab.evaluate((t) => window.t.client.send(t).then(() => "sent", (e) => e.code), text);
    sent.push({ text, outcome });
    await api("POST", "/v1/admin/faults", fault);
    await until("the turn to end at the server", async () => {
      const { items } = await api("GET", `/v1/sessions/${sessionId}/transcript`);
      return items.filter((x) => x.kind === "turn_end").length >= sent.filter((x) => x.outcome === "sent").length;
    });
  }
  await api("POST", "/v1/admin/faults", { kind: "clear" });
  await converged(tabs, () => sessionId);
  const { items } = await api("GET", `/v1/sessions/${sessionId}/transcript`);
  for (const { text, outcome } of sent) {
    const times = items.filter((x) => x.kind === "message" && x.role === "user" && x.text === text).length;
    // A send that resolved is there once; one that rejected at most once.
    assert.ok(outcome === "sent" ? times === 1 : times <= 1, `${text} (${outcome}): ${times} times`);
  }
  assert.ok(sent.filter((x) => x.outcome === "sent").length >= 6, JSON.stringify(sent));
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("with SharedWorker removed from the page's global, the same call runs the client on the page", async () => {
  const sessionId = await newSession("shared fallback");
  const [tab] = await openTabs(1, () => ({ sessionId }), "?noshared");
  const host = await tab.evaluate(() => window.t.state().host);
  assert.equal(host.role, "page");
  assert.equal(host.fallback.code, "network", host.fallback.message);
  await allLive([tab]);
  await tab.evaluate(() => window.t.client.send("/tool on the page"));
  await converged([tab], () => sessionId);
  const asked = await tab.evaluate(() => window.t.client.transcript());
  const server = await api("GET", `/v1/sessions/${sessionId}/transcript`);
  assert.equal(JSON.stringify(asked.items), JSON.stringify(server.items));
  assert.equal(await tab.evaluate(() => window.t.wasmLoadedHere()), true, "the fallback loads the wasm here");
  await closeAll([tab]);
  assert.deepEqual(pageErrors, []);
});

test("the host refuses another schema version and a tab's credentials with clear codes", async () => {
  const tab = await openPage(context, url + "/shared-page/", pageErrors);
  await tab.waitForFunction(() => document.getElementById("out").textContent === "ready");
  const old = await tab.evaluate(() => window.t.ask({ type: "attach", options: {} }));
  assert.equal(old.type, "failed");
  assert.equal(old.error.code, "schema_mismatch", old.error.message);
  const newer = await tab.evaluate(() => window.t.ask({ v: 99, type: "attach", options: {} }));
  assert.equal(newer.error.code, "schema_mismatch", newer.error.message);
  // A tab cannot widen what the host sends: headers and storage are the worker script's.
  const widened = await tab.evaluate(() =>
    window.t.rejects(() => window.t.connect({ sessionId: "ses_x", headers: { authorization: "Bearer stolen" } })),
  );
  assert.deepEqual([widened.isReplayError, widened.code], [true, "invalid_options"], widened.message);
  // So is whether cookies go (the tabs of one log share its client).
  const cookies = await tab.evaluate(() =>
    window.t.rejects(() => window.t.connect({ sessionId: "ses_x", credentials: "include" })),
  );
  assert.deepEqual([cookies.code, /serveShared\(\)/.test(cookies.message)], ["invalid_options", true], cookies.message);
  const elsewhere = await tab.evaluate(() =>
    window.t.rejects(() => window.t.connect({ sessionId: "ses_x", baseUrl: "http://127.0.0.2:9" })),
  );
  assert.equal(elsewhere.code, "invalid_options", elsewhere.message);
  await tab.close();
  assert.deepEqual(pageErrors, []);
});

/** Within 5 s the server holds exactly one stream. */
async function oneStream(what) {
  await until(what, async () => (await streams()) === 1, {
    timeoutMs: 5_000,
    describe: async () => `: ${await streams()} streams open`,
  });
}

/** Ten demo tabs (the default mode: the shared host); `sessionOf(i)` says which session tab `i` shows. */
async function tenDemoTabs(sessionOf) {
  const demos = [];
  for (let i = 0; i < 10; i++) {
    const demo = await openPage(context, `${url}/#${sessionOf(i)}`, pageErrors);
    await until("the demo's client to go live", () =>
      demo.evaluate(() => window.__replay?.client.status().state === "live"),
    );
    assert.equal(await demo.textContent("#mode"), "client in a SharedWorker");
    demos.push(demo);
  }
  return demos;
}

/** Every demo tab shows its session as the server has it, the turn ended. */
async function demosConverged(demos, sessionOf) {
  for (const [i, demo] of demos.entries()) {
    await until("the demo tab to converge", async () => {
      const server = await api("GET", `/v1/sessions/${sessionOf(i)}/transcript`);
      const client = await demo.evaluate(() => window.__replay.client.transcript());
      const shown = await demo.evaluate(() => document.querySelectorAll("#transcript > li").length);
      return server.items.some((x) => x.kind === "turn_end") &&
        JSON.stringify(client.items) === JSON.stringify(server.items) &&
        shown === server.items.length;
    });
  }
}

test("ten demo tabs of ten sessions (default mode) over HTTP/1.1: each shows its reply, over one stream", async () => {
  await noStreams();
  const sessions = [];
  for (let i = 0; i < 10; i++) sessions.push(await newSession(`shared demo ${i}`));
  const sessionOf = (i) => sessions[i];
  const demos = await tenDemoTabs(sessionOf);
  for (const [i, demo] of demos.entries()) {
    await demo.fill("#message", `/tool hello from demo tab ${i}`);
    await demo.click("#composer button[type=submit]");
  }
  await demosConverged(demos, sessionOf);
  // A stream closed a moment ago counts until the server notices (seen
  // once on a loaded machine): the steady state is what is asserted.
  await oneStream("ten demo tabs of ten sessions, one stream");
  assert.equal(await scopesFollowed(), 10);
  await closeAll(demos);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("ten tabs of the demo page (default mode) over HTTP/1.1: all show the reply, over one stream", async () => {
  await noStreams();
  const sessionId = await newSession("shared demo");
  const demos = await tenDemoTabs(() => sessionId);
  await demos[7].fill("#message", "/tool hello from the eighth demo tab");
  await demos[7].click("#composer button[type=submit]");
  await demosConverged(demos, () => sessionId);
  // A stream closed a moment ago counts until the server notices (seen
  // once on a loaded machine): the steady state is what is asserted.
  await oneStream("ten demo tabs, one stream");
  const wasmOnPage = await demos[0].evaluate(() =>
    performance.getEntriesByType("resource").some((e) => e.name.endsWith(".wasm")),
  );
  assert.equal(wasmOnPage, false, "the demo page loads no wasm");
  await closeAll(demos);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});

test("10 tabs of 10 sessions: every tab shows its reply over one stream at the server", async () => {
  await noStreams();
  const sessions = [];
  for (let i = 0; i < 10; i++) sessions.push(await newSession(`shared mux ${i}`));
  const tabs = await openTabs(10, (i) => ({ sessionId: sessions[i] }));
  await allLive(tabs);
  for (const [i, tab] of tabs.entries()) await tab.evaluate((i) => window.t.client.send(`/tool tab ${i}`), i);
  await converged(tabs, (i) => sessions[i]);
  // A stream closed a moment ago counts until the server notices (seen
  // once on a loaded machine): the steady state is what is asserted.
  await oneStream("one multiplexed stream for ten sessions");
  assert.equal(await scopesFollowed(), 10, "carrying the ten sessions");
  await closeAll(tabs);
  await noStreams();
  assert.deepEqual(pageErrors, []);
});
