/**
 * The real engine the system suite routes to: two llama.cpp `llama-server` replicas
 * (`npm run engine:llamacpp`), started through test/system/_llamacpp.ts, checked for what a
 * router relies on and reads nowhere else: capacity as slots × per-slot context, the
 * cached-token count in each response and in /metrics, and restart as a new
 * Process-Start-Time-Unix. Random weights make the text nonsense: nothing here reads it.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { BUILD_COMMAND, ENV_MODEL, ENV_SERVER } from "../../scripts/_llamacpp-engine.ts";
import { killAll } from "../helpers/proc.ts";
import { DEFAULT_LLAMA_FLAGS, requireLlamaEngine, startLlamaReplica, startLlamaReplicas, type LlamaReplica } from "./_llamacpp.ts";

/**
 * Two replicas share two cores with everything else on the machine: a 2,000-token prefill
 * took 0.2 s quiet and over 30 s under a load of 20.
 */
const TIMEOUT = 180_000;
/** -c 65536 --parallel 2 in DEFAULT_LLAMA_FLAGS. */
const SLOTS = 2;
const SLOT_CTX = 65536 / SLOTS;

let replicas: LlamaReplica[] = [];

beforeAll(async () => {
  expect(DEFAULT_LLAMA_FLAGS).toEqual(expect.arrayContaining(["-c", "65536", "--parallel", String(SLOTS)]));
  replicas = await startLlamaReplicas(2);
}, TIMEOUT);

afterAll(killAll);

const client = (replica: LlamaReplica) => new OpenAI({ baseURL: `${replica.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: TIMEOUT });

async function json(replica: LlamaReplica, path: string): Promise<any> {
  const res = await fetch(`${replica.url}${path}`);
  expect(res.status).toBe(200);
  return res.json();
}

async function metrics(replica: LlamaReplica): Promise<{ startTime: string | null; values: Map<string, number> }> {
  const res = await fetch(`${replica.url}/metrics`);
  expect(res.status).toBe(200);
  // Read with a line pattern, not the router's parser: this checks the engine's text itself.
  const values = new Map<string, number>();
  for (const [, name, value] of (await res.text()).matchAll(/^(llamacpp:\w+) (\S+)$/gm)) values.set(name!, Number(value));
  return { startTime: res.headers.get("process-start-time-unix"), values };
}

/** ~2,000 tokens (Qwen2 splits digits one by one) that no other test sends, so the first request finds nothing cached. */
function longPrompt(label: string): string {
  return [label, ...Array.from({ length: 100 }, (_, i) => `Line ${i}: replica ${i % 7} holds ${i * 13} tokens of the shared document.`)].join("\n");
}

describe("llama-server as the router sees it", () => {
  it("each replica listens on its own port, with 2 slots of 32,768 tokens in /props, /slots and /v1/models", async () => {
    expect(new Set(replicas.map((r) => r.port)).size).toBe(2);
    for (const replica of replicas) {
      // tools/server/server-context.cpp get_res_props: total_slots is --parallel, n_ctx the per-slot context.
      const props = await json(replica, "/props");
      expect(props.total_slots).toBe(SLOTS);
      expect(props.default_generation_settings.n_ctx).toBe(SLOT_CTX);

      const slots = (await json(replica, "/slots")) as { id: number; n_ctx: number }[];
      expect(slots.map((s) => s.n_ctx)).toEqual([SLOT_CTX, SLOT_CTX]);

      // get_res_model_info: meta.n_ctx is the slot's context too, not -c.
      const models = await client(replica).models.list();
      expect(models.data.map((m) => m.id)).toEqual(["tiny"]);
      expect((models.data[0] as any).meta.n_ctx).toBe(SLOT_CTX);
    }
  });

  it(
    "a repeated long prompt is served from the cache, and response and /metrics count the same cached tokens",
    async () => {
      const replica = replicas[1]!;
      const before = await metrics(replica);
      expect(before.values.has("llamacpp:prompt_tokens_cached_total")).toBe(true);

      const messages: OpenAI.ChatCompletionMessageParam[] = [
        { role: "system", content: longPrompt(crypto.randomUUID()) },
        { role: "user", content: "Summarise the document." },
      ];
      const ask = () => client(replica).chat.completions.create({ model: "tiny", messages, max_tokens: 1 });
      const cold = await ask();
      const warm = await ask();
      const cached = (r: OpenAI.ChatCompletion) => r.usage?.prompt_tokens_details?.cached_tokens;

      expect(cold.usage!.prompt_tokens).toBeGreaterThan(1_500);
      expect(warm.usage!.prompt_tokens).toBe(cold.usage!.prompt_tokens);
      expect(cached(cold)).toBe(0);
      // Everything but the last token: llama.cpp always evaluates at least one token of a
      // prompt to get logits (server-context.cpp, update_slots, [TAG_PROMPT_LOGITS]).
      expect(cached(warm)).toBe(warm.usage!.prompt_tokens - 1);
      // The same number, from the same slot.stats.n_prompt_cached, in llama.cpp's own timings.
      expect(cached(cold)).toBe((cold as any).timings.cache_n);
      expect(cached(warm)).toBe((warm as any).timings.cache_n);

      // server_metrics::add_prompt_cached adds that same n_past for every request.
      const after = await metrics(replica);
      const counted = after.values.get("llamacpp:prompt_tokens_cached_total")! - before.values.get("llamacpp:prompt_tokens_cached_total")!;
      expect(counted).toBe(cached(cold)! + cached(warm)!);
    },
    TIMEOUT,
  );

  it(
    "a restart shows as a new Process-Start-Time-Unix on /metrics, with the counters back at zero",
    async () => {
      const replica = replicas[0]!;
      // The same short chat twice, so the counters have something for the restart to reset.
      const chat = () => client(replica).chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Before the restart." }], max_tokens: 1 });
      await chat();
      await chat();
      const before = await metrics(replica);
      expect(before.startTime).toMatch(/^\d+$/);
      expect(before.values.get("llamacpp:prompt_tokens_cached_total")).toBeGreaterThan(0);

      await replica.restart();

      const after = await metrics(replica);
      // server_metrics::init sets t_start = ggml_time_us(), CLOCK_MONOTONIC microseconds
      // (ggml/src/ggml.c): despite the name it is not a Unix time, but on one machine a
      // later start always reads larger.
      expect(after.startTime).toMatch(/^\d+$/);
      expect(Number(after.startTime)).toBeGreaterThan(Number(before.startTime));
      expect(after.values.get("llamacpp:prompt_tokens_cached_total")).toBe(0);
      expect(after.values.get("llamacpp:prompt_tokens_total")).toBe(0);
    },
    TIMEOUT,
  );
});

describe("the launcher", () => {
  it("a replica that cannot start fails with the engine's own words", async () => {
    await expect(startLlamaReplica({ name: "bad", extraFlags: ["--no-such-flag"] })).rejects.toThrow(/llama-server bad .* exited with 1 .*\n.*invalid argument: --no-such-flag/s);
  });

  it("a missing engine fails with the command that makes it, never skips", () => {
    const env = { [ENV_SERVER]: "/nonexistent/llama-server", [ENV_MODEL]: "/nonexistent/model.gguf" };
    expect(() => requireLlamaEngine(env)).toThrow(`${ENV_SERVER}=/nonexistent/llama-server: no such file`);
    expect(() => requireLlamaEngine(env)).toThrow(`Run \`${BUILD_COMMAND}\``);
    expect(() => requireLlamaEngine({ LLMROUTE_ENGINE_CACHE: "/nonexistent/cache" })).toThrow(
      "/nonexistent/cache/llamacpp-80fb11a/llama-server does not exist",
    );
  });
});
