/**
 * Health that tells a blip from a death, with real sims and a real router on loopback
 * ports (in this process: what is tested is routing, not a process): a failed request counts,
 * only a refused connection, a failed active check or `health.failures` in a row demote;
 * a demoted replica comes back through one trial request (half-open); an all-down pool is
 * routed to anyway (panic mode); prefixes are forgotten only on evidence that the cache
 * is gone.
 */
import { afterAll, describe, expect, it } from "bun:test";
import type OpenAI from "openai";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, startRouterInProcess, startSimInProcess, until, WATCHED_HEALTH, type LocalSim, type Router } from "../helpers/fleet.ts";
import { conversation } from "../helpers/conversation.ts";
import { killAll, stopAtEnd } from "../helpers/proc.ts";
import { startRecorder } from "../helpers/recorder.ts";

// Each test starts its own fleet and they run concurrently (mostly waiting on health
// checks), so everything is stopped once, at the end.
afterAll(killAll);

const status = async (router: Router) => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
const replicaStatus = async (router: Router, name: string) => (await status(router)).replicas.find((r) => r.name === name)!;
const metric = async (router: Router, name: string) => parsePrometheus(await (await fetch(`${router.url}/metrics`)).text()).get(name) ?? [];


const oneShot = (client: OpenAI, i: number) =>
  client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `one-shot ${i} ${crypto.randomUUID()}` }], max_tokens: 1 }).withResponse();

describe.concurrent("a blip is not a death", () => {
  it("one 503 fails the request over but leaves the replica up, and its ten pinned conversations stay where their cache is", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    const client = router.client();
    const conversations = Array.from({ length: 10 }, (_, i) => conversation(`c${i}`));
    const home = new Map<number, string>();
    for (const [i, c] of conversations.entries()) home.set(i, (await c.turn(client)).replica);
    const onGpu0 = [...home].filter(([, r]) => r === "gpu0").map(([i]) => i);
    expect(onGpu0).toHaveLength(5);
    const before = await replicaStatus(router, "gpu0");

    await gpu0.faults({ fail_next: 1, fail_status: 503 });
    // an unrelated one-shot meets the 503 (the counter's next pick is gpu0) and fails over
    const blip = await oneShot(client, 0);
    expect([blip.response.status, blip.response.headers.get("x-llmroute-route")]).toEqual([200, "spread,failover"]);
    const after = await replicaStatus(router, "gpu0");
    expect(after).toMatchObject({ state: "up", consecutive_failures: 1 });
    expect(after.conversations).toBeGreaterThanOrEqual(before.conversations);

    for (const [i, c] of conversations.entries()) {
      const t = await c.turn(client);
      expect([t.replica, t.route]).toEqual([home.get(i)!, "pin"]);
      expect(t.cached).toBeGreaterThan(0);
    }
    expect(await replicaStatus(router, "gpu0")).toMatchObject({ state: "up", consecutive_failures: 0 });
    expect(logRecords(router, "replica down")).toHaveLength(0);
    expect(logRecords(router, "replica cache lost: forgetting its prefixes")).toHaveLength(0);
  });

  it("one 503 on each replica: that request gets 503, the next ones are served at once", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await Promise.all([gpu0.faults({ fail_next: 1 }), gpu1.faults({ fail_next: 1 })]);
    const client = router.client();
    expect(await oneShot(client, 0).catch((e) => e.status)).toBe(503);
    for (let i = 1; i <= 4; i++) expect((await oneShot(client, i)).response.status).toBe(200);
    expect((await status(router)).healthy).toBe(2);
  });

  it("health.failures 502/503/504 in a row demote; the client never sees them", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1], { toml: `[health]\ninterval = "60s"\nfailures = 3\n` });
    await gpu0.faults({ fail_next: 3, fail_status: 502 });
    const client = router.client();
    const faulted = async () => (await gpu0.state()).faulted_total as number;
    for (let i = 0; (await faulted()) < 3; i++) {
      expect((await oneShot(client, i)).response.status).toBe(200);
      const failedThere = await faulted();
      expect((await replicaStatus(router, "gpu0")).state).toBe(failedThere < 3 ? "up" : "down");
    }
    const down = logRecords(router, "replica down");
    expect(down).toHaveLength(1);
    expect(down[0]!.reason).toBe("3 failures in a row, the last: HTTP 502");
  });
});

describe.concurrent("panic mode", () => {
  it("every replica down (a health path that 404s): requests go to all of them, counted; the startup log says why each is down", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([
      { ...gpu0, extra: `health_path = "/nope"\n` },
      { ...gpu1, extra: `health_path = "/nope"\n` },
    ]);
    const startup = logRecords(router, "replica down");
    expect(startup.map((r) => [r.level, r.replica, r.reason]).sort()).toEqual([
      ["warn", "gpu0", "health check: HTTP 404 at /nope"],
      ["warn", "gpu1", "health check: HTTP 404 at /nope"],
    ]);
    const client = router.client();
    const served = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const { response } = await oneShot(client, i);
      expect(response.status).toBe(200);
      served.add(response.headers.get("x-llmroute-replica")!);
    }
    expect(served).toEqual(new Set(["gpu0", "gpu1"]));
    expect((await metric(router, "llmroute_panic_routes_total"))[0]!.value).toBe(4);
    expect((await status(router)).panic).toBe(true);
    expect(logRecords(router).filter((r) => String(r.msg).startsWith("panic mode:"))).toHaveLength(1);
  });
});

describe.concurrent("an engine without /health", () => {
  it("Ollama with nothing set: its /health is a 404, so once it says it is Ollama it is checked at /api/version, up from the start and serving", async () => {
    const [ollama, vllm] = await Promise.all([startSimInProcess("ollama0", { engine: "ollama" }), startSimInProcess("vllm0")]);
    const seen = startRecorder(ollama.url);
    stopAtEnd(() => seen.stop());
    const router = await startRouterInProcess([{ name: "ollama0", url: seen.url }, vllm], { toml: WATCHED_HEALTH });
    expect(logRecords(router, "replica down")).toEqual([]);
    const learnt = logRecords(router, "health checked where the engine answers");
    expect(learnt.map((r) => [r.replica, r.family, r.path, r.reason])).toEqual([["ollama0", "ollama", "/api/version", "/health answered 404"]]);
    // The checks that follow ask /api/version, and pass: /health was asked once (discovery
    // asked /api/version once too).
    await until(() => seen.to("/api/version").length >= 4, "three checks of ollama0 after it was recognised");
    expect(seen.to("/health").map((e) => e.status)).toEqual([404]);
    expect((await status(router)).replicas.map((r) => [r.name, r.state, r.health_path])).toEqual([
      ["ollama0", "up", "/api/version"],
      ["vllm0", "up", "/health"],
    ]);
    const served = new Set<string>();
    const client = router.client();
    for (let i = 0; i < 4; i++) {
      const { response } = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `spread ${i} ${crypto.randomUUID()}` }], max_tokens: 1 }).withResponse();
      served.add(response.headers.get("x-llmroute-replica")!);
    }
    expect([...served].sort()).toEqual(["ollama0", "vllm0"]);
  });

  it("the engine behind the URL changes: a gateway's 404 until Ollama is there, then vLLM in its place — each checked where it answers, none left down", async () => {
    const [ollama, vllm] = await Promise.all([startSimInProcess("ollama2", { engine: "ollama" }), startSimInProcess("vllm2")]);
    // A gateway that answers gin's 404 to everything until its backend is there (as one that
    // hides a container until it is healthy does), then forwards to whichever engine is set.
    let backend: string | undefined;
    const gateway = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: async (req) => {
        if (!backend) return new Response("404 page not found", { status: 404 });
        const url = new URL(req.url);
        return fetch(`${backend}${url.pathname}${url.search}`, { method: req.method, headers: req.headers, body: req.method === "GET" ? undefined : await req.arrayBuffer() });
      },
    });
    stopAtEnd(async () => void gateway.stop(true));
    const router = await startRouterInProcess([{ name: "gw", url: `http://127.0.0.1:${gateway.port}` }], { toml: WATCHED_HEALTH });
    expect(logRecords(router, "replica down").map((r) => r.reason)).toEqual(["health check: HTTP 404 at /health"]);

    backend = ollama.url;
    await until(async () => (await replicaStatus(router, "gw")).state === "up", "gw up once Ollama answers behind it");
    expect(await replicaStatus(router, "gw")).toMatchObject({ health_path: "/api/version", facts: { family: "ollama" } });

    backend = vllm.url;
    await until(async () => (await replicaStatus(router, "gw")).facts?.family === "vllm", "gw recognised as vLLM");
    expect(await replicaStatus(router, "gw")).toMatchObject({ state: "up", health_path: "/health" });
    expect(logRecords(router, "health checked where the engine answers").map((r) => [r.family, r.path, r.reason])).toEqual([
      ["ollama", "/api/version", "/health answered 404"],
      ["vllm", "/health", "/api/version answered 404"],
    ]);
    // One down episode: the gateway's, before any engine was there.
    expect(logRecords(router, "replica down")).toHaveLength(1);
  });

  it("a health_path the operator set is kept even when it answers 404: the replica is down and says why", async () => {
    const ollama = await startSimInProcess("ollama1", { engine: "ollama" });
    const router = await startRouterInProcess([{ ...ollama, extra: `health_path = "/health"\n` }]);
    expect(logRecords(router, "replica down").map((r) => [r.replica, r.reason])).toEqual([["ollama1", "health check: HTTP 404 at /health"]]);
    expect(logRecords(router, "health checked where the engine answers")).toEqual([]);
  });
});

describe.concurrent("Ollama's loaded model (/api/ps)", () => {
  it("Ollama idle past its keep_alive unloads the model and its KV: the router reads /api/ps, forgets that replica's prefixes once, and learnt its context from the same list", async () => {
    const [ollama, other] = await Promise.all([startSimInProcess("ollama3", { engine: "ollama", keepAlive: 1.5 }), startSimInProcess("ollama4", { engine: "ollama", keepAlive: 1.5 })]);
    const router = await startRouterInProcess([ollama, other], { toml: WATCHED_HEALTH });
    // Nothing is loaded before a request: no context known yet.
    expect((await status(router)).replicas.map((r) => r.facts?.capacity)).toEqual([null, null]);
    const client = router.client();
    const chat = conversation("unloaded");
    const first = await chat.turn(client);
    const home = first.replica;
    const second = await chat.turn(client);
    expect([second.replica, second.route]).toEqual([home, "pin"]);
    await until(() => logRecords(router, "engine capacity learnt").some((r) => r.replica === home), `${home}'s context learnt from /api/ps`);
    expect((await replicaStatus(router, home)).facts?.capacity).toEqual({ kvTokens: 4096, blockTokens: 1, source: "/api/ps context_length" });
    const lost = await until(() => logRecords(router, "replica cache lost: forgetting its prefixes").find((r) => r.replica === home), `${home} unloaded and forgotten`);
    expect(lost.reason).toBe("Ollama unloaded sim-model:latest: /api/ps lists it no more (idle past its keep_alive, or its memory went to another model), and its KV went with it");
    const [sims, away] = [{ ollama3: ollama, ollama4: other }, home === "ollama3" ? "ollama4" : "ollama3"];
    expect(await sims[home as keyof typeof sims].state()).toMatchObject({ model_loads: 1, model_unloads: 1 });
    // The other was never loaded (no request went there): nothing to lose.
    expect(await sims[away as keyof typeof sims].state()).toMatchObject({ model_loads: 0, model_unloads: 0 });
    expect(Object.fromEntries((await status(router)).replicas.map((r) => [r.name, r.cache_losses]))).toEqual({ [home]: 1, [away]: 0 });
    // The next turn is not pinned to a prefix the router believed cached there.
    expect((await chat.turn(client)).route).not.toBe("pin");
  });

  it("a prompt longer than the context Ollama cuts it to: answered (Ollama drops the oldest messages), counted, and said once with the setting to raise", async () => {
    const ollama = await startSimInProcess("ollama5", { engine: "ollama" });
    const router = await startRouterInProcess([ollama], { toml: WATCHED_HEALTH });
    const client = router.client();
    await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "load it" }], max_tokens: 1 });
    await until(() => logRecords(router, "engine capacity learnt").length > 0, "ollama5's context learnt from /api/ps");
    const charsPerToken = (await replicaStatus(router, "ollama5")).chars_per_token;
    // tiny: a context of 4,096 tokens; this chat is about 6,000.
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: "long chat" }];
    for (let i = 0; i < 10; i++) messages.push({ role: "user", content: `${i} ${"word ".repeat(240)}` }, { role: "assistant", content: `${i} ${"word ".repeat(240)}` });
    messages.push({ role: "user", content: "and now?" });
    for (let i = 0; i < 2; i++) {
      const answer = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 });
      expect(answer.usage!.prompt_tokens).toBeLessThan(4096);
    }
    expect(await ollama.state()).toMatchObject({ prompts_cut: 2 });
    const said = logRecords(router, "prompt longer than ollama5's context: raise OLLAMA_CONTEXT_LENGTH, or the model's num_ctx");
    expect(said.map((r) => [r.level, r.context_tokens, r.context_from])).toEqual([["warn", 4096, "/api/ps context_length"]]);
    expect(said[0]!.prompt_tokens).toBeGreaterThan(5000);
    expect((await replicaStatus(router, "ollama5")).over_context).toBe(2);
    // Their usage counted what Ollama kept (under 4,096 of ~6,000): not learnt as the engine's tokenisation.
    expect((await replicaStatus(router, "ollama5")).chars_per_token).toBe(charsPerToken);
    expect(await metric(router, "llmroute_prompts_over_context_total")).toMatchObject([{ labels: { replica: "ollama5" }, value: 2 }]);
  });
});

describe.concurrent("half-open recovery", () => {
  const flap = `${WATCHED_HEALTH}failures = 1\n`;

  async function demotedByRequests(router: Router, sim: LocalSim) {
    // One request answered 502 demotes it (health.failures = 1). Its /health passed all
    // along, so a passing check cannot clear it: it is half-open, for a trial request.
    // (A replica its check demoted is up at its next passing check: test/router/recovery.test.ts.)
    await sim.faults({ fail_next: 1, fail_status: 502 });
    const client = router.client();
    for (let i = 100; (await sim.state()).faulted_total === 0; i++) await oneShot(client, i);
    await until(async () => (await replicaStatus(router, sim.name)).state === "half-open", `${sim.name} half-open`);
  }

  it("a replica demoted by failed requests whose check passes gets one trial request; while it runs, others go elsewhere; its success brings the replica back", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1], { toml: flap });
    const client = router.client();
    const pinned = conversation("pinned");
    expect((await pinned.turn(client)).replica).toBe("gpu0");
    await demotedByRequests(router, gpu0);

    // the trial: the pinned conversation goes back to gpu0 (its prefixes were not forgotten),
    // and is held there until the others have been routed
    await gpu0.faults({ stall_ms: 600_000, stall_next: 1 });
    const trial = pinned.turn(client);
    await until(async () => (await replicaStatus(router, "gpu0")).inflight === 1, "the trial in flight");
    const others = await Promise.all([1, 2, 3].map((i) => oneShot(client, i)));
    expect(others.map((o) => o.response.headers.get("x-llmroute-replica"))).toEqual(["gpu1", "gpu1", "gpu1"]);
    await gpu0.faults({ stall_ms: 0 });
    expect(await trial).toMatchObject({ replica: "gpu0", route: "pin" });
    expect((await trial).cached).toBeGreaterThan(0);
    expect(await replicaStatus(router, "gpu0")).toMatchObject({ state: "up", conversations: 1 });
    expect(logRecords(router, "replica up again: trial request succeeded")).toHaveLength(1);
  });

  it("a failed trial sends the replica back down at once; the request itself fails over", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1], { toml: flap });
    const client = router.client();
    const pinned = conversation("pinned");
    await pinned.turn(client);
    await demotedByRequests(router, gpu0);
    await gpu0.faults({ fail_next: 1, fail_status: 503 });
    expect(await pinned.turn(client)).toMatchObject({ replica: "gpu1", route: "spread,failover" });
    const down = logRecords(router, "replica down");
    expect(down.at(-1)).toMatchObject({ replica: "gpu0", reason: "trial request failed: HTTP 503" });
  });
});

describe.concurrent("a replica's prefixes are forgotten only on evidence its cache is gone", () => {
  it("its engine's counters went back (a restart between two checks): forgotten, and its conversations start afresh", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess(
      [
        { ...gpu0, extra: "metrics = true\n" },
        { ...gpu1, extra: "metrics = true\n" },
      ],
      { toml: WATCHED_HEALTH },
    );
    const client = router.client();
    const c = conversation("restart");
    expect((await c.turn(client)).replica).toBe("gpu0");
    const served = new Date().toISOString();
    await until(async () => String((await replicaStatus(router, "gpu0")).engine?.at) > served, "a scrape after the request");
    // the engine loses its cache and its counters, as a restarted process does
    await fetch(`${gpu0.url}/sim/reset`, { method: "POST" });
    const lost = await until(() => logRecords(router, "replica cache lost: forgetting its prefixes")[0], "the restart noticed");
    expect(lost.reason).toMatch(/^engine restarted: vllm:prefix_cache_queries_total went back from \d+ to 0$/);
    expect(await replicaStatus(router, "gpu0")).toMatchObject({ state: "up", conversations: 0, cache_losses: 1 });
    expect((await c.turn(client)).route).toBe("spread");
  });

  it("a process start time that changed counts too (vLLM and SGLang export process_start_time_seconds)", async () => {
    let start = 1_700_000_000;
    let prompt = 10;
    const engine = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (req) =>
        new URL(req.url).pathname === "/metrics"
          ? new Response(`process_start_time_seconds ${start}\nvllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\nvllm:prompt_tokens_total ${(prompt += 10)}\n`)
          : Response.json({ status: "ok" }),
    });
    try {
      const router = await startRouterInProcess([{ name: "vllm0", url: `http://127.0.0.1:${engine.port}`, extra: `models = ["m"]\nmetrics = true\n` }], {
        toml: WATCHED_HEALTH,
      });
      await until(async () => (await replicaStatus(router, "vllm0")).engine?.at !== undefined, "a scrape");
      expect(logRecords(router, "replica cache lost: forgetting its prefixes")).toHaveLength(0);
      start += 60;
      const lost = await until(() => logRecords(router, "replica cache lost: forgetting its prefixes")[0], "the restart noticed");
      expect(lost.reason).toBe(`engine restarted: process_start_time_seconds ${start - 60} → ${start}`);
    } finally {
      engine.stop(true);
    }
  });
});
