/**
 * Feedback against a real engine whose cache is smaller than the router believes: the
 * router is told each card holds 100k tokens, the sim holds 4k. What the engine evicted
 * shows in cached_tokens; the router must stop believing it, count the miss, and explain
 * the hit rate (available / captured / delivered) in /metrics and /status.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { startRouterInProcess, startSimInProcess } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";
import { until } from "../helpers/wait.ts";

afterEach(killAll);
afterAll(killAll);

const metric = (text: string, name: string, labels: Record<string, string>) =>
  (parsePrometheus(text).get(name) ?? []).find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value ?? 0;

describe("feedback from cached_tokens", () => {
  it("a prefix the engine evicted is a counted miss, and the index forgets what the engine dropped", async () => {
    const sim = await startSimInProcess("gpu0");
    // Metrics off: the router has only the operator's (wrong) kv_tokens to start from.
    const router = await startRouterInProcess([{ ...sim, extra: "kv_tokens = 100000\nmetrics = false\n" }]);
    const client = router.client();
    const salt = crypto.randomUUID();
    // Four ~1,500-token documents (the sim's tokenizer: 4 characters a token) through one
    // card of 4,096 tokens: by the fourth, the first has been evicted (least recently used).
    const doc = (d: number, q: string) => [
      { role: "system" as const, content: `${salt} document ${d}: ${"lorem ipsum dolor sit amet ".repeat(220)}` },
      { role: "user" as const, content: q },
    ];
    const ask = (d: number, q: string) => client.chat.completions.create({ model: "sim-model", messages: doc(d, q), max_tokens: 2 });

    await ask(0, "first question");
    const warm = await ask(0, "second question"); // still cached: a hit
    expect(warm.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(1000);
    await ask(1, "first question");
    await ask(2, "first question");
    await ask(3, "first question");
    const evicted = await ask(0, "third question"); // the router believes gpu0 holds it; the engine does not
    expect(evicted.usage?.prompt_tokens_details?.cached_tokens ?? 0).toBeLessThan(200);

    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(metric(metrics, "llmroute_cache_predictions_total", { replica: "gpu0", verdict: "hit" })).toBe(1);
    expect(metric(metrics, "llmroute_cache_predictions_total", { replica: "gpu0", verdict: "miss" })).toBe(1);
    expect(metric(metrics, "llmroute_index_corrections_total", { replica: "gpu0" })).toBeGreaterThan(0);

    const status = (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    const hit = status.replicas[0]!.hit;
    expect(hit.predictions).toEqual({ hit: 1, miss: 1, template: 0, unexpected_hit: 0 });
    // available = captured here (one card); the engine delivered less than the index expected
    expect(hit.available_tokens).toBe(hit.captured_tokens);
    expect(hit.captured_tokens).toBeGreaterThan(hit.delivered_tokens);
    expect(hit.delivered_tokens).toBe(status.replicas[0]!.cached_tokens);
    // The eviction bounds the card: it holds less than three documents, not 100,000 tokens.
    const kv = status.replicas[0]!.kv;
    expect(kv.configured).toBe(100_000);
    expect(kv.evidence.upper_tokens).toBeGreaterThan(3_000);
    expect(kv.evidence.upper_tokens).toBeLessThan(8_000);
    expect(status.warnings.join("\n")).toMatch(/gpu0: kv_tokens 100,000 is more than this card holds: the engine evicted prefixes after ~[\d,]+ tokens of others/);
  });

  it("an engine that publishes its KV is believed over a kv_tokens six times too large: nothing mispredicted, and /status says both figures", async () => {
    const sim = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([{ ...sim, extra: "kv_tokens = 24576\n" }]);
    const client = router.client();
    const salt = crypto.randomUUID();
    const ask = (d: number) =>
      client.chat.completions.create({
        model: "sim-model",
        messages: [
          { role: "system", content: `${salt} document ${d}: ${"lorem ipsum dolor sit amet ".repeat(220)}` },
          { role: "user", content: "a question" },
        ],
        max_tokens: 2,
      });
    for (const d of [0, 1, 2, 3, 0]) await ask(d);
    const status = (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    const r = status.replicas[0]!;
    // the tiny profile's pool: 256 blocks of 16 tokens, from vllm:cache_config_info's kv_cache_size_tokens
    expect(r.kv).toMatchObject({ configured: 24_576, published: { tokens: 4_096, from: "vllm:cache_config_info kv_cache_size_tokens" }, believed: 4_096 });
    expect(r.hit.predictions.miss).toBe(0);
    expect(status.warnings.join("\n")).toMatch(/gpu0: kv_tokens 24,576 is more than the engine's own 4,096 \(vllm:cache_config_info kv_cache_size_tokens\); the router assumes 4,096/);
  });

  it("an engine with prefix caching off is not believed after eight misses, and /status says why", async () => {
    const sim = await startSimInProcess("gpu0", { prefixCache: false });
    const router = await startRouterInProcess([{ ...sim, extra: "kv_tokens = 100000\n" }]);
    const client = router.client();
    const salt = crypto.randomUUID();
    const messages = [
      { role: "system" as const, content: `${salt} ${"shared instructions for every request ".repeat(60)}` },
      { role: "user" as const, content: "go" },
    ];
    for (let i = 0; i < 10; i++) await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 });
    const status = (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    expect(status.replicas[0]!.hit.predictions.miss).toBe(9);
    expect(status.warnings.join("\n")).toMatch(/gpu0: reported no cached tokens on 9 requests the index expected cached: its prefix cache may be off/);
  });
});

describe("a replica that computed nothing is not believed to hold the prompt", () => {
  const metricsOf = async (url: string) => (await fetch(`${url}/metrics`)).text();
  const statusOf = async (url: string) => (await (await fetch(`${url}/status`)).json()) as StatusDocument;
  const document = (salt: string, q: string) => [
    { role: "system" as const, content: `${salt} manual: ${"lorem ipsum dolor sit amet ".repeat(200)}` },
    { role: "user" as const, content: q },
  ];

  it("a 503 before the first byte: the failed replica's commit is taken back, the one that answered keeps it", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await gpu0.faults({ fail_next: 1 });
    const { response } = await router
      .client()
      .chat.completions.create({ model: "sim-model", messages: document(crypto.randomUUID(), "q"), max_tokens: 2 })
      .withResponse();
    expect([response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]).toEqual(["gpu1", "spread,failover"]);
    const s = await statusOf(router.url);
    expect(s.replicas.map((r) => [r.name, r.index_entries > 0])).toEqual([
      ["gpu0", false],
      ["gpu1", true],
    ]);
  });

  it("an error answer (400: prompt + max_tokens over the context): nothing remembered, so the retry is cold, not a miss that drops the replica's conversations", async () => {
    const sim = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([sim]);
    const client = router.client();
    const salt = crypto.randomUUID();
    await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `${salt} a conversation` }], max_tokens: 2 });
    const before = (await statusOf(router.url)).replicas[0]!.index_entries;
    const tooLong = await client.chat.completions.create({ model: "sim-model", messages: document(salt, "q"), max_tokens: 4000 }).catch((e: { status: number }) => e);
    expect((tooLong as { status: number }).status).toBe(400);
    expect((await statusOf(router.url)).replicas[0]!.index_entries).toBe(before);
    await client.chat.completions.create({ model: "sim-model", messages: document(salt, "q"), max_tokens: 2 });
    const metrics = await metricsOf(router.url);
    expect(metric(metrics, "llmroute_cache_predictions_total", { replica: "gpu0", verdict: "miss" })).toBe(0);
    expect(metric(metrics, "llmroute_index_corrections_total", { replica: "gpu0" })).toBe(0);
    expect((await statusOf(router.url)).replicas[0]!.index_entries).toBeGreaterThan(before);
  });
});

describe("a first-come engine looks the prefix up when it starts the request", () => {
  it("a request sent while another still prefills its document finds it cached, and the router corrects nothing", async () => {
    // 1,000 prefill tokens a second in real time: a ~1,500-token document takes 1.5 s.
    const sim = await startSimInProcess("gpu0", { prefillTps: 1000, timeScale: 1 });
    const router = await startRouterInProcess([sim]);
    const status = async () => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    await until(async () => ((await status()).replicas[0]!.engine?.family === "vllm" ? true : undefined), "the router's discovery of gpu0's engine");
    const client = router.client();
    const salt = crypto.randomUUID();
    const messages = (q: string) => [
      { role: "system" as const, content: `${salt} document: ${"lorem ipsum dolor sit amet ".repeat(220)}` },
      { role: "user" as const, content: q },
    ];
    const first = client.chat.completions.create({ model: "sim-model", messages: messages("first question"), max_tokens: 2 });
    // The second is sent while the first is still prefilling (it has no first byte yet).
    await until(async () => ((await status()).replicas[0]!.inflight === 1 ? true : undefined), "the first request in flight");
    const second = await client.chat.completions.create({ model: "sim-model", messages: messages("second question"), max_tokens: 2 });
    await first;
    // vLLM V1 looks it up when it schedules it, after the first's prefill: a hit.
    expect(second.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(1000);
    // Sent while its prefix was still prefilling: not judged, and nothing dropped from the index.
    const after = await status();
    expect(after.replicas[0]!.hit.predictions).toEqual({ hit: 0, miss: 0, template: 0, unexpected_hit: 0 });
    expect(after.replicas[0]!.hit.delivered_tokens).toBeGreaterThan(1000);
  });
});
