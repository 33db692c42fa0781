/**
 * Failover: before the first byte a failed replica is demoted and the request retried on a
 * live one; after it, never. A real router and sims on loopback ports, in this process
 * (the routing is the subject); a replica that is killed is a process.
 */
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { logRecords, startRouterInProcess, startSimInProcess, startSimProc, until } from "../helpers/fleet.ts";
import { readStream } from "../helpers/conversation.ts";
import { killAll, stopAtEnd } from "../helpers/proc.ts";
import { rawResponse, startRawReplica } from "../helpers/raw-http.ts";

afterEach(killAll);
afterAll(killAll);

const ask = (content: string) => ({ model: "sim-model", messages: [{ role: "user" as const, content }], max_tokens: 2 });

/** A port nothing listens on. */
async function closedPort(): Promise<string> {
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const url = `http://127.0.0.1:${server.port}`;
  await server.stop(true);
  return url;
}

describe("before the first byte: demote and retry", () => {
  it("a replica killed mid-run: six sequential requests during the stop, six 200s, one logged failover", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimProc("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    const client = router.client();
    await client.chat.completions.create(ask("warm up")); // → gpu0 (counter 0)

    await gpu1.kill("SIGKILL");
    const results: { status: number; replica: string | null; route: string | null }[] = [];
    for (let i = 0; i < 6; i++) {
      const { response } = await client.chat.completions.create(ask(`during the stop ${i}`)).withResponse();
      results.push({ status: response.status, replica: response.headers.get("x-llmroute-replica"), route: response.headers.get("x-llmroute-route") });
    }
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(results.every((r) => r.replica === "gpu0")).toBe(true);
    expect(results.filter((r) => r.route?.endsWith(",failover"))).toHaveLength(1);
    const failovers = logRecords(router, "failover");
    expect(failovers).toHaveLength(1);
    expect(failovers[0]).toMatchObject({ replica: "gpu1", reason: "connection refused" });
    expect(logRecords(router, "replica down")).toHaveLength(1);
  });

  it("a 503 from the engine (e.g. a full queue) fails over; a pinned conversation moves and stays", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    const client = router.client();
    const messages = [
      { role: "user" as const, content: "a conversation" },
      { role: "assistant" as const, content: "ok" },
      { role: "user" as const, content: "turn 2" },
    ];
    const first = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 }).withResponse();
    const owner = first.response.headers.get("x-llmroute-replica")!;
    const [ownerSim, other] = owner === "gpu0" ? [gpu0, gpu1] : [gpu1, gpu0];

    await ownerSim.faults({ fail_next: 1, fail_status: 503 });
    messages.push({ role: "assistant", content: "ok" }, { role: "user", content: "turn 3" });
    const moved = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 }).withResponse();
    expect(moved.response.status).toBe(200);
    // the retry is a fresh decision among the others: the moved conversation is spread, then remembered
    expect(moved.response.headers.get("x-llmroute-route")).toBe("spread,failover");
    expect(moved.response.headers.get("x-llmroute-replica")).toBe(other.name);

    // the owner comes back (its next health check passes) but the conversation stays put
    await until(async () => ((await (await fetch(`${router.url}/health`)).json()) as { healthy: string[] }).healthy.length === 2, "the owner back up");
    messages.push({ role: "assistant", content: "ok" }, { role: "user", content: "turn 4" });
    const stays = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 }).withResponse();
    expect(stays.response.headers.get("x-llmroute-replica")).toBe(other.name);
    expect(stays.response.headers.get("x-llmroute-route")).toBe("pin");
  });
});

describe("an answer llama.cpp's chat parser rejects", () => {
  it("a 500 after the prompt was computed: passed on as the engine's, the card stays up, and the same request sent again goes where its prompt is cached", async () => {
    const llama = { engine: "llamacpp", kvTokens: 16_384 } as const;
    const sims = await Promise.all([startSimInProcess("gpu0", llama), startSimInProcess("gpu1", llama)]);
    const router = await startRouterInProcess(sims);
    const status = async () => (await (await fetch(`${router.url}/status`)).json()) as { replicas: { name: string; state: string; engine?: { family?: string } }[] };
    await until(async () => ((await status()).replicas.every((r) => r.engine?.family === "llamacpp") ? true : undefined), "the router's discovery of both llama.cpp engines");
    await Promise.all(sims.map((s) => s.faults({ unparsable_next: 1 })));

    const body = JSON.stringify({ model: "sim-model", messages: [{ role: "system", content: `${crypto.randomUUID()} ${"lorem ipsum dolor sit amet ".repeat(200)}` }, { role: "user", content: "a question" }], max_tokens: 4 });
    const send = () => fetch(`${router.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const failed = await send();
    expect(failed.status).toBe(500);
    expect(await failed.json()).toEqual({ error: { code: 500, message: "The model produced output that does not match the expected peg-native format", type: "server_error" } });
    const owner = failed.headers.get("x-llmroute-replica")!;
    // The other card still fails its next answer: had the resend gone there, it would be a 500 too.

    const again = await send();
    expect(again.status).toBe(200);
    expect(again.headers.get("x-llmroute-replica")).toBe(owner);
    expect(again.headers.get("x-llmroute-route")).not.toBe("spread");
    const usage = ((await again.json()) as { usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } }).usage;
    expect(usage.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThanOrEqual(usage.prompt_tokens - 1);
    // The engine's verdict on an answer, not on the card's health.
    expect(logRecords(router, "replica down")).toHaveLength(0);
    expect((await status()).replicas.map((r) => r.state)).toEqual(["up", "up"]);
  });
});

describe("an Ollama whose scheduler queue is full", () => {
  it("503 'server busy': the request fails over, and however many follow, the card is not demoted (busy is no death)", async () => {
    const ollama = { engine: "ollama" } as const;
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", ollama), startSimInProcess("gpu1", ollama)]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    // More turned away in a row than health.failures (3): a 503 of another kind would demote it.
    await gpu0.faults({ queue_full_next: 4 });
    // Until gpu0 has turned 4 away and then served one itself (the spread sends it one in two).
    const answers: [number, string | null, string | null][] = [];
    while (answers.length < 40 && !answers.some(([, replica, route]) => replica === "gpu0" && route === "spread" && answers.filter(([, , r]) => String(r).endsWith(",failover")).length === 4)) {
      const { response } = await router.client().chat.completions.create({ ...ask(`busy ${answers.length} ${crypto.randomUUID()}`) }).withResponse();
      answers.push([response.status, response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]);
    }
    expect(answers.at(-1)).toEqual([200, "gpu0", "spread"]);
    const failedOver = answers.filter(([, , route]) => String(route).endsWith(",failover"));
    expect(failedOver).toHaveLength(4);
    expect(failedOver.every(([status, replica]) => status === 200 && replica === "gpu1")).toBe(true);
    expect(logRecords(router, "failover").map((r) => [r.replica, r.reason])).toEqual(Array(4).fill(["gpu0", 'its queue is full (HTTP 503: the engine turned it away before computing anything)']));
    expect(logRecords(router, "replica down")).toHaveLength(0);
    const replicas = ((await (await fetch(`${router.url}/status`)).json()) as { replicas: { name: string; state: string; busy: number; consecutive_failures: number }[] }).replicas;
    expect(replicas.map((r) => [r.name, r.state, r.busy, r.consecutive_failures])).toEqual([
      ["gpu0", "up", 4, 0],
      ["gpu1", "up", 0, 0],
    ]);
    expect(await (await fetch(`${router.url}/metrics`)).text()).toContain('llmroute_engine_busy_total{replica="gpu0"} 4');
  });
});

describe("an Ollama whose 503 is not its queue's", () => {
  it("a 503 with another body still counts: health.failures (3) in a row demote the card", async () => {
    const ollama = { engine: "ollama" } as const;
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", ollama), startSimInProcess("gpu1", ollama)]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await gpu0.faults({ fail_next: 3, fail_status: 503 });
    // Until gpu0 has failed 3 requests (the spread sends it one in two).
    for (let i = 0; i < 40 && logRecords(router, "replica down").length === 0; i++) {
      const { response } = await router.client().chat.completions.create({ ...ask(`plain 503 ${i} ${crypto.randomUUID()}`) }).withResponse();
      expect(response.status).toBe(200);
    }
    expect(logRecords(router, "replica down").map((r) => [r.replica, r.reason])).toEqual([["gpu0", "3 failures in a row, the last: HTTP 503"]]);
  });

  it("the queue's 503 streamed without a Content-Length (a proxy in front re-chunks it) is still read as busy", async () => {
    const sim = await startSimInProcess("gpu0", { engine: "ollama" });
    const other = await startSimInProcess("gpu1", { engine: "ollama" });
    const proxy = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: async (req) => {
        const url = new URL(req.url);
        const upstream = await fetch(`${sim.url}${url.pathname}${url.search}`, { method: req.method, headers: req.headers, body: req.method === "GET" ? undefined : await req.arrayBuffer() });
        const headers = new Headers(upstream.headers);
        headers.delete("content-length");
        return new Response(upstream.body, { status: upstream.status, headers });
      },
    });
    stopAtEnd(async () => void proxy.stop(true));
    const router = await startRouterInProcess([{ name: "gpu0", url: `http://127.0.0.1:${proxy.port}` }, other]);
    await sim.faults({ queue_full_next: 4 });
    for (let i = 0; i < 40 && logRecords(router, "failover").length < 4; i++) {
      const { response } = await router.client().chat.completions.create({ ...ask(`chunked ${i} ${crypto.randomUUID()}`) }).withResponse();
      expect(response.status).toBe(200);
    }
    expect(logRecords(router, "failover").map((r) => r.reason)).toEqual(Array(4).fill('its queue is full (HTTP 503: the engine turned it away before computing anything)'));
    expect(logRecords(router, "replica down")).toHaveLength(0);
  });
});

describe("a llama.cpp card whose KV is full", () => {
  it("turns concurrent requests away ('Context size has been exceeded.'): they fail over, the card stays up, then takes them one at a time", async () => {
    // Two llama-servers at their default: 4 slots sharing one KV of 4,096 tokens, which two
    // 2,500-token prompts overflow together. A 1-second prefill each: the two arrive at a card
    // while both are still prefilling, however slow the machine.
    const llama = { engine: "llamacpp", kvTokens: 4_096, prefillTps: 2_500 } as const;
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", llama), startSimInProcess("gpu1", llama)]);
    // affinity: both requests share their first message, so both go to the card it hashes to.
    const router = await startRouterInProcess([gpu0, gpu1], { toml: '[routing]\npolicy = "affinity"\n' });
    const status = async () => (await (await fetch(`${router.url}/status`)).json()) as { replicas: { name: string; state: string; kv_full: number; warnings: string[]; engine?: { family?: string } }[] };
    await until(async () => ((await status()).replicas.every((r) => r.engine?.family === "llamacpp") ? true : undefined), "the router's discovery of both llama.cpp engines");

    const system = `${crypto.randomUUID()} ${"lorem ipsum dolor sit amet ".repeat(300)}`; // ~2,000 tokens
    const ask = (question: string) =>
      router
        .client()
        .chat.completions.create({ model: "sim-model", messages: [{ role: "system", content: system }, { role: "user", content: `${question} ${"why ".repeat(500)}` }], max_tokens: 4 })
        .withResponse();
    const answers = await Promise.all([ask("first"), ask("second")]);
    expect(answers.map((a) => a.response.status)).toEqual([200, 200]);
    expect(answers.every((a) => a.data.choices[0]!.message.content!.length > 0)).toBe(true);
    expect(answers.every((a) => a.response.headers.get("x-llmroute-route")!.endsWith(",failover"))).toBe(true);

    // One overflow turned both away; after it the card they hash to took them one after the other.
    expect(answers[0]!.response.headers.get("x-llmroute-replica")).toBe(answers[1]!.response.headers.get("x-llmroute-replica"));
    const turnedAway = logRecords(router, "failover");
    expect(turnedAway).toHaveLength(2);
    expect(turnedAway.every((r) => /its KV is full \("Context size has been exceeded\." with ~[\d,]+ prompt tokens in flight there/.test(r.reason))).toBe(true);
    // Full is a verdict on the card's load, not its health.
    expect(logRecords(router, "replica down")).toHaveLength(0);
    const after = await status();
    expect(after.replicas.map((r) => r.state)).toEqual(["up", "up"]);
    expect(after.replicas.reduce((n, r) => n + r.kv_full, 0)).toBe(turnedAway.length);
    // The card says why its requests take turns.
    const card = after.replicas.find((r) => r.name === answers[0]!.response.headers.get("x-llmroute-replica"))!;
    expect(card.warnings.join("\n")).toMatch(/its KV turned requests away as full with ~[\d,]+ prompt tokens in flight \(llama\.cpp: "Context size has been exceeded\."\): requests there take turns below that until /);
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(metrics).toContain("# TYPE llmroute_kv_full_total counter");
  });

  it("two conversations taking turns at its wall while the other card idles: one moves there once the waits pay for its prefill (wall), once", async () => {
    // 4,096 tokens of unified KV each; conversations of ~2,300 tokens: two overflow one card.
    // 40 tokens an answer at 100 a second: a turn that waits for the other's turn waits ~0.4 s,
    // and moving costs ~2,400 tokens of prefill (~1 s at 2,500 a second): some turns of waiting.
    const llama = { engine: "llamacpp", kvTokens: 4_096, prefillTps: 2_500, decodeTps: 100 } as const;
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", llama), startSimInProcess("gpu1", llama)]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    const status = async () => (await (await fetch(`${router.url}/status`)).json()) as { replicas: { engine?: { family?: string } }[] };
    await until(async () => ((await status()).replicas.every((r) => r.engine?.family === "llamacpp") ? true : undefined), "the router's discovery of both llama.cpp engines");

    type Msg = { role: "system" | "user" | "assistant"; content: string };
    const family = (name: string): Msg[] => [{ role: "system", content: `${name} ${crypto.randomUUID()} ${"lorem ipsum dolor sit amet ".repeat(340)}` }, { role: "user", content: `${name}: start` }];
    const turn = async (messages: Msg[], i: number) => {
      const { data, response } = await router.client().chat.completions.create({ model: "sim-model", messages, max_tokens: 40, stream: true }).withResponse();
      const { received, error } = await readStream(data);
      expect(error).toBeUndefined();
      messages.push({ role: "assistant", content: received.join("") }, { role: "user", content: `tool output ${i} ${"ok ".repeat(40)}` });
      return `${response.headers.get("x-llmroute-replica")} ${response.headers.get("x-llmroute-route")}`;
    };
    const [a, b, c] = [family("a"), family("b"), family("c")];
    // The counter spreads the first turns: a and c on gpu0, b on gpu1 (b is done after it).
    expect([await turn(a, 1), await turn(b, 1), await turn(c, 1)]).toEqual(["gpu0 spread", "gpu1 spread", "gpu0 spread"]);
    // a and c then work at once, turn after turn.
    const routes: [string, string][] = [];
    for (let i = 2; i <= 9; i++) routes.push(await Promise.all([turn(a, i), turn(c, i)]));
    const moves = routes.flat().filter((r) => r.endsWith(" wall"));
    expect(moves).toEqual(["gpu1 wall"]);
    // Whichever moved stays on gpu1; the other stays on gpu0; neither leaves again.
    const last = routes.at(-1)!;
    expect([...last].sort()).toEqual(["gpu0 pin", "gpu1 pin"]);
    const moved = routes.findIndex((pair) => pair.some((r) => r === "gpu1 wall"));
    expect(moved).toBeGreaterThan(0); // a wall costs waits before it moves anything
    for (const pair of routes.slice(moved + 1)) expect([...pair].sort()).toEqual(["gpu0 pin", "gpu1 pin"]);
    // /status says why gpu0's requests took turns, and what the running policy does about it;
    // the move paid what waiting there had cost, and no one has waited there since.
    const doc = (await (await fetch(`${router.url}/status`)).json()) as {
      findings: { replica: string; line: string; details: string | null }[];
      replicas: { name: string; kv_wall: { tokens: number; waited_s: number } | null }[];
    };
    const wall = doc.findings.find((f) => f.replica === "gpu0" && f.line.startsWith("KV full"))!;
    expect(wall.details).toContain("The running policy, hybrid, can move a conversation whose turns wait here to a card where it fits beside what runs");
    expect(doc.replicas.find((r) => r.name === "gpu0")!.kv_wall).toMatchObject({ waited_s: 0 });
    expect(doc.replicas.find((r) => r.name === "gpu0")!.kv_wall!.tokens).toBeGreaterThan(4_000);
  });
});

describe("after the first byte: never retried; a client that leaves stops the engine", () => {
  it("an upstream that breaks mid-stream ends the client's stream with an error event, and no other replica is asked", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await gpu0.faults({ close_after_chunks: 2 });
    const stream = await router.client().chat.completions.create({ ...ask("break me"), max_tokens: 20, stream: true });
    const { received, error } = await readStream(stream);
    expect(received.length).toBeGreaterThanOrEqual(1);
    expect(received.length).toBeLessThan(20);
    expect(error).toBeInstanceOf(Error);
    expect(String(error.message)).toContain("gpu0 failed mid-stream");
    expect((await gpu1.state()).requests_total).toBe(0);
    expect(logRecords(router, "failover")).toHaveLength(0);
    expect(logRecords(router, "upstream failed mid-response")).toHaveLength(1);
  });

  it("a client that disconnects aborts the upstream request: the engine stops and frees the KV", async () => {
    const gpu0 = await startSimInProcess("gpu0", { decodeTps: 50 });
    const router = await startRouterInProcess([gpu0]);
    const abort = new AbortController();
    const stream = await router.client().chat.completions.create({ ...ask("a long answer"), max_tokens: 2000, stream: true }, { signal: abort.signal });
    for await (const _ of stream) break; // first chunk arrived: generation is running
    abort.abort();
    const state = await until(async () => {
      const s = await gpu0.state();
      return s.cancelled_total === 1 && s.running === 0 ? s : undefined;
    }, "the sim to see the cancel");
    expect(state.completed_total).toBe(0);
    expect(await until(() => logRecords(router, "request").find((r) => r.outcome === "client_cancelled"), "the cancelled request's log line")).toMatchObject({ replica: "gpu0" });
  });


  it("a client that leaves before the first byte (during a long prefill) aborts the upstream request too", async () => {
    // 3090 profile at 0.5: a 40k-token prompt prefills for ~5 s real
    const gpu0 = await startSimInProcess("gpu0", { profile: "3090", timeScale: 0.5 });
    const router = await startRouterInProcess([gpu0]);
    const abort = new AbortController();
    const pending = router
      .client()
      .chat.completions.create({ ...ask("x".repeat(160_000)), stream: true }, { signal: abort.signal })
      .catch((e) => e);
    await until(async () => (await gpu0.state()).running === 1, "the prefill to start");
    abort.abort();
    expect(await pending).toBeInstanceOf(Error);
    const state = await until(async () => {
      const s = await gpu0.state();
      return s.cancelled_total === 1 && s.running === 0 ? s : undefined;
    }, "the sim to see the cancel");
    expect(state.completed_total).toBe(0);
  });
});

describe("a kept-alive connection the engine closed", () => {
  it("a reset before the first byte is sent again once, on a fresh connection, to the same replica: no failover, no health failure, the conversation stays", async () => {
    // As llama-server does after a streamed answer (cpp-httplib ends the connection although its
    // headers said keep-alive), here after every answer: a connection that carried one is dead,
    // and a request sent on it is reset before a byte of answer — every time, not only when the
    // close loses the race with the reuse.
    const sse = (n: number) => {
      const events = [`data: {"choices":[{"index":0,"delta":{"content":"turn ${n}"}}]}\n\n`, "data: [DONE]\n\n"];
      return `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n${events.map((e) => `${Buffer.byteLength(e).toString(16)}\r\n${e}\r\n`).join("")}0\r\n\r\n`;
    };
    /** What became of each chat request the engines received: "reset", or "fresh"/"reused" (the connection it was answered on). */
    const chats: string[] = [];
    const engine = () => {
      const dead = new Set<number>();
      return startRawReplica((req) => {
        if (dead.has(req.connection)) {
          if (req.method === "POST") chats.push("reset");
          return null;
        }
        dead.add(req.connection);
        if (req.method === "GET") return rawResponse(req.path === "/health" ? "200 OK" : "404 Not Found", ["Content-Type: application/json"], "{}");
        chats.push(req.reused ? "reused" : "fresh");
        return sse(chats.length);
      });
    };
    const [gpu0, gpu1] = [engine(), engine()];
    stopAtEnd(async () => {
      gpu0.stop();
      gpu1.stop();
    });
    const router = await startRouterInProcess([
      { name: "gpu0", url: gpu0.url },
      { name: "gpu1", url: gpu1.url },
    ]);
    const messages: { role: "user" | "assistant"; content: string }[] = [{ role: "user", content: `begin ${crypto.randomUUID()}` }];
    const turns: string[] = [];
    for (let i = 0; i < 6; i++) {
      const { data, response } = await router.client().chat.completions.create({ model: "m", messages, stream: true }).withResponse();
      const { received, error } = await readStream(data);
      expect(error).toBeUndefined();
      turns.push(`${response.headers.get("x-llmroute-replica")} ${response.headers.get("x-llmroute-route")}`);
      messages.push({ role: "assistant", content: received.join("") }, { role: "user", content: `next ${i}` });
    }
    const first = turns[0]!.split(" ")[0]!;
    expect(turns).toEqual([`${first} spread`, ...Array(5).fill(`${first} pin`)]);
    // A turn that met a pooled connection, dead, went again once on a fresh one; the first met
    // one of the connections the router's health check and discovery left in the pool.
    expect(chats[0]).toBe("reset");
    expect(chats.filter((c) => c !== "reset")).toEqual(Array(6).fill("fresh"));
    chats.forEach((c, i) => c === "reset" && expect(chats[i + 1]).toBe("fresh"));
    expect(logRecords(router, "failover")).toHaveLength(0);
    expect(logRecords(router, "replica down")).toHaveLength(0);
    const status = (await (await fetch(`${router.url}/status`)).json()) as { replicas: { state: string; consecutive_failures: number; failovers: number; last_error: unknown }[] };
    for (const r of status.replicas) expect(r).toMatchObject({ state: "up", consecutive_failures: 0, failovers: 0, last_error: null });
  });
});

describe("no live replica", () => {
  it("→ 503 in OpenAI error JSON, Anthropic error JSON on /v1/messages, and /health 503", async () => {
    const router = await startRouterInProcess([{ name: "gone", url: await closedPort() }]);
    const error = await router.client().chat.completions.create(ask("anyone?")).catch((e) => e);
    expect(error.status).toBe(503);
    expect(error.error).toMatchObject({ type: "unavailable_error", code: 503 });
    const anthropic = new Anthropic({ baseURL: router.url, apiKey: "unused", maxRetries: 0 });
    const aerr = await anthropic.messages.create({ model: "sim-model", max_tokens: 1, messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(aerr.status).toBe(503);
    expect(aerr.error).toMatchObject({ type: "error", error: { type: "overloaded_error" } });
    expect((await fetch(`${router.url}/health`)).status).toBe(503);
  });

  it("when every replica fails before the first byte, the 503 names each failure", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await Promise.all([gpu0.faults({ fail_next: 1 }), gpu1.faults({ fail_next: 1 })]);
    const error = await router.client().chat.completions.create(ask("unlucky")).catch((e) => e);
    expect(error.status).toBe(503);
    expect(error.error.message).toContain("gpu0: HTTP 503");
    expect(error.error.message).toContain("gpu1: HTTP 503");
  });
});
