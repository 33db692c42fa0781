/**
 * Operating llmroute: /status, /metrics, the capacity wall, access keys, the admin
 * listener, logs (a router in this process: the subject is what it serves and logs), and
 * the lifecycle (SIGHUP reload, SIGTERM drain, state file) with a router process and real
 * signals. Sims run in this process.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, routerToml, startRouterInProcess, startRouterProc, startSimInProcess, until } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

afterEach(killAll);
afterAll(killAll);

const status = async (url: string, key?: string) =>
  (await (await fetch(`${url}/status`, { headers: key ? { authorization: `Bearer ${key}` } : {} })).json()) as StatusDocument;

function conversation(system: string) {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: system },
    { role: "user", content: "begin" },
  ];
  return {
    messages,
    grow(i: number) {
      messages.push({ role: "assistant", content: "ok" }, { role: "user", content: `turn ${i}` });
    },
  };
}

describe("visibility", () => {
  it("/status and /metrics report per replica what happened; the log has one line per request and no prompt text", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess(
      [
        { ...gpu0, extra: "kv_tokens = 4096\nmetrics = true\n" },
        { ...gpu1, extra: "kv_tokens = 4096\nmetrics = true\n" },
      ],
      { toml: `[health]\ninterval = "60s"\n` },
    );
    const client = router.client();
    const secret = `SECRET-PROMPT-${crypto.randomUUID()}`;
    const convo = conversation(`${secret} ${"context ".repeat(100)}`);
    for (let i = 0; i < 3; i++) {
      await client.chat.completions.create({ model: "sim-model", messages: convo.messages, max_tokens: 2 });
      convo.grow(i);
    }
    await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "one-shot" }], max_tokens: 2 });

    const s = await status(router.url);
    expect(s).toMatchObject({ policy: "hybrid", healthy: 2 });
    const served = Object.fromEntries(s.replicas.map((r) => [r.name, r.served]));
    expect(served.gpu0! + served.gpu1!).toBe(4);
    const owner = s.replicas.find((r) => r.served === 3)!;
    expect(owner).toMatchObject({ healthy: true, inflight: 0, failovers: 0, models: ["sim-model"], conversations: 1, kv_tokens: 4096 });
    expect(owner.working_set_tokens).toBeGreaterThan(200);
    expect(owner.cached_tokens).toBeGreaterThan(0);
    // the engine's own load signals, scraped from its /metrics (vLLM names)
    expect(owner.engine).toMatchObject({ family: "vllm", running: 0, waiting: 0, missing: [] });

    const metrics = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text());
    const requests = metrics.get("llmroute_requests_total")!;
    expect(requests.filter((r) => r.labels.route === "pin").reduce((n, r) => n + r.value, 0)).toBe(2);
    expect(metrics.get("llmroute_replica_up")!.map((r) => r.value)).toEqual([1, 1]);
    expect(metrics.get("llmroute_kv_budget_tokens")!.map((r) => r.value)).toEqual([4096, 4096]);
    expect(metrics.get("llmroute_cached_tokens_total")!.find((r) => r.labels.replica === owner.name)!.value).toBe(owner.cached_tokens);
    for (const name of ["llmroute_failovers_total", "llmroute_inflight", "llmroute_index_entries", "llmroute_working_set_tokens", "llmroute_prompt_tokens_total"]) {
      expect(metrics.has(name)).toBe(true);
    }

    const lines = logRecords(router, "request");
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatchObject({ endpoint: "chat", model: "sim-model", replica: owner.name, route: "pin", status: 200 });
    expect(lines[1]!.prompt_tokens).toBeGreaterThan(0);
    expect(lines[1]!.cached_tokens).toBeGreaterThan(0);
    expect(typeof lines[1]!.total_ms).toBe("number");
    expect(router.lines.join("\n")).not.toContain(secret);

    const cli = await runCli(["status", "--url", router.url]);
    expect(cli.code).toBe(0);
    expect(cli.stdout).toContain("policy hybrid");
    expect(cli.stdout).toMatch(new RegExp(`${owner.name}\\s+up\\s+0\\s+3\\s+0\\s+1\\s`));
  });

  it("the capacity wall: a working set over kv_tokens warns once, in the log, /status and /metrics", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([{ ...gpu0, extra: "kv_tokens = 1000\n" }]);
    const client = router.client();
    // one-shots, however long, are not a working set: they are never sent again
    for (let i = 0; i < 4; i++) {
      await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `one-shot ${i} ${"text ".repeat(500)}` }], max_tokens: 1 });
    }
    expect((await status(router.url)).warnings).toEqual([]);
    // three long conversations (two turns each), each ~600 tokens: far over a 1,000-token card
    for (let c = 0; c < 3; c++) {
      const family = conversation(`family ${c} ${"document ".repeat(270)}`);
      await client.chat.completions.create({ model: "sim-model", messages: family.messages, max_tokens: 1 });
      family.grow(1);
      await client.chat.completions.create({ model: "sim-model", messages: family.messages, max_tokens: 1 });
    }
    const s = await until(async () => {
      const doc = await status(router.url);
      return doc.warnings.length > 0 ? doc : undefined;
    }, "a capacity warning in /status");
    expect(s.warnings[0]).toContain("gpu0: working set ~");
    expect(s.warnings[0]).toContain("routing cannot fix this");
    // one short line; what helps is a detail beside it
    expect(s.warnings[0]!.length).toBeLessThanOrEqual(170);
    expect(s.replicas[0]!.capacity_advice).toContain("no placement fits it. Add a card, compact context client-side, or run fewer large contexts at once.");
    expect(s.fleet.kv_tokens).toBe(1000);
    expect(s.fleet.working_set_tokens).toBeGreaterThan(1000);
    expect(s.replicas[0]!.working_set_ratio).toBeGreaterThan(1);
    const warned = logRecords(router).filter((r) => r.level === "warn" && String(r.msg).startsWith("capacity:"));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ replica: "gpu0", kv_tokens: 1000 });
    const metrics = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text());
    expect(metrics.get("llmroute_capacity_exceeded")![0]!.value).toBe(1);
    expect(metrics.get("llmroute_capacity_warnings_total")![0]!.value).toBe(1);
    expect((await runCli(["status", "--url", router.url])).code).toBe(1);
  });
});

describe("access", () => {
  it("server.api_keys: 401 without a key on every route incl. /v1/models; upstream keys never shown", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([{ ...gpu0, extra: 'api_key = "env:UPSTREAM_KEY"\n' }], {
      toml: `[server]\napi_keys = ["env:CLIENT_KEY"]\n`,
      env: { CLIENT_KEY: "client-secret-1", UPSTREAM_KEY: "upstream-secret-2" },
    });
    for (const call of [
      () => router.client().models.list(),
      () => router.client({ apiKey: "wrong" }).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }] }),
    ]) {
      const error = await call().catch((e) => e);
      expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
      expect(error.error).toMatchObject({ type: "authentication_error", code: 401 });
    }
    expect((await fetch(`${router.url}/status`)).status).toBe(401);
    const ok = await router.client({ apiKey: "client-secret-1" }).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    expect(ok.choices).toHaveLength(1);
    const viaHeader = await fetch(`${router.url}/v1/models`, { headers: { "x-api-key": "client-secret-1" } });
    expect(viaHeader.status).toBe(200);
    const s = JSON.stringify(await status(router.url, "client-secret-1"));
    expect(s).not.toContain("upstream-secret-2");
    // every refusal is logged and counted, with its outcome
    const metrics = parsePrometheus(await (await fetch(`${router.url}/metrics`, { headers: { authorization: "Bearer client-secret-1" } })).text());
    const byOutcome = (outcome: string, status: string) =>
      metrics.get("llmroute_requests_total")!.filter((r) => r.labels.outcome === outcome && r.labels.status === status).reduce((n, r) => n + r.value, 0);
    expect([byOutcome("rejected", "401"), byOutcome("ok", "200")]).toEqual([3, 1]);
    expect(logRecords(router, "request").filter((r) => r.status === 401)).toHaveLength(3);
    expect(router.lines.join("\n")).not.toContain("upstream-secret-2");
    expect(router.lines.join("\n")).not.toContain("client-secret-1");
  });

  it("server.admin_listen moves /status and /metrics off the API port", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0], { toml: `[server]\nadmin_listen = "127.0.0.1:0"\n` });
    const [, admin] = await router.waitFor(/"admin":"(http:\/\/[^"]+)"/);
    expect((await fetch(`${router.url}/status`)).status).toBe(404);
    expect((await fetch(`${router.url}/metrics`)).status).toBe(404);
    expect((await fetch(`${admin}/status`)).status).toBe(200);
    expect((await fetch(`${admin}/metrics`)).status).toBe(200);
    expect((await fetch(`${admin}/v1/models`)).status).toBe(404);
  });
});

describe("lifecycle", () => {
  it("SIGHUP reloads: a replica added, the policy changed, pins of surviving replicas kept; an invalid file is rejected", async () => {
    const [gpu0, gpu1, gpu2] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1"), startSimInProcess("gpu2")]);
    const router = await startRouterProc([gpu0, gpu1]);
    const client = router.client();
    const convo = conversation("reload me");
    const first = await client.chat.completions.create({ model: "sim-model", messages: convo.messages, max_tokens: 1 }).withResponse();
    const owner = first.response.headers.get("x-llmroute-replica");

    await Bun.write(router.configPath, routerToml([gpu0, gpu1, gpu2], `[routing]\npolicy = "affinity"\n`));
    router.proc.kill("SIGHUP");
    await router.waitFor(/config reloaded/);
    const s = await status(router.url);
    expect(s.policy).toBe("affinity");
    expect(s.replicas.map((r) => [r.name, r.healthy])).toEqual([["gpu0", true], ["gpu1", true], ["gpu2", true]]);
    convo.grow(1);
    const next = await client.chat.completions.create({ model: "sim-model", messages: convo.messages, max_tokens: 1 }).withResponse();
    expect([next.response.headers.get("x-llmroute-replica"), next.response.headers.get("x-llmroute-route")]).toEqual([owner, "pin"]);

    await Bun.write(router.configPath, `[routing]\npolicy = "fastest"\n`);
    router.proc.kill("SIGHUP");
    const [rejected] = await router.waitFor(/reload rejected.*/);
    expect(rejected).toContain("routing.policy");
    expect((await status(router.url)).policy).toBe("affinity");
    expect((await client.models.list()).data).toHaveLength(1);
  });

  it("SIGTERM drains: the stream in flight finishes, new connections are refused, exit 0", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterProc([gpu0]);
    // held at the engine until the drain has begun, then let go
    await gpu0.faults({ stall_ms: 600_000, stall_next: 1 });
    const pending = router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "long" }], max_tokens: 60, stream: true });
    await until(async () => (await gpu0.state()).requests_total === 1, "the stream at the engine");
    router.proc.kill("SIGTERM");
    await router.waitFor(/draining/);
    const refused = await fetch(`${router.url}/health`).then(() => "accepted", () => "refused");
    await gpu0.faults({ stall_ms: 0 });
    const pieces: string[] = [];
    for await (const chunk of await pending) pieces.push(chunk.choices[0]?.delta?.content ?? "");
    expect(pieces.filter(Boolean)).toHaveLength(60);
    expect(refused).toBe("refused");
    expect(await router.exited).toBe(0);
  });

  it("routing.state_file keeps pins across a router restart", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const dir = await tempDir("llmroute-state-");
    const toml = `[routing]\nstate_file = "${dir}/index.json"\n`;
    const convo = conversation("survive a restart");
    const first = await startRouterProc([gpu0, gpu1], { toml });
    // make the conversation land on gpu1: one one-shot takes gpu0 first
    await first.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    const turn1 = await first.client().chat.completions.create({ model: "sim-model", messages: convo.messages, max_tokens: 1 }).withResponse();
    expect(turn1.response.headers.get("x-llmroute-replica")).toBe("gpu1");
    first.proc.kill("SIGTERM");
    expect(await first.exited).toBe(0);
    expect(logRecords(first, "saved routing state")[0]!.entries).toBeGreaterThan(0);

    // the successor reads the file at start: a process adds nothing here
    const second = await startRouterInProcess([gpu0, gpu1], { toml });
    expect(logRecords(second, "restored routing state")[0]!.entries).toBeGreaterThan(0);
    convo.grow(1);
    const turn2 = await second.client().chat.completions.create({ model: "sim-model", messages: convo.messages, max_tokens: 1 }).withResponse();
    expect([turn2.response.headers.get("x-llmroute-replica"), turn2.response.headers.get("x-llmroute-route")]).toEqual(["gpu1", "pin"]);
  });
});
