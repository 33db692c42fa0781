/**
 * Engine facts as a router meets them: a real router in front of sims that publish and answer
 * what the engines' current source does (src/sim/profiles), driven by the official client.
 * vLLM's admission control is busy, not broken; a vLLM without prefix caching is named at
 * discovery; SGLang's /server_info and page size are read; a template that renders tools late
 * does not make conversations that share only their tools look alike.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import type OpenAI from "openai";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, startRouterInProcess, startSimInProcess } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

afterEach(killAll);
afterAll(killAll);

const ask = (content: string) => ({ model: "sim-model", messages: [{ role: "user" as const, content }], max_tokens: 2 });
const status = async (url: string) => (await (await fetch(`${url}/status`)).json()) as StatusDocument;

describe("vLLM's admission control (--max-num-queued-reqs) at its limit", () => {
  it("503 'The engine is currently busy': the request fails over, the card is not demoted however many follow, and each is counted busy", async () => {
    const vllm = { engine: "vllm-details" } as const;
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", vllm), startSimInProcess("gpu1", vllm)]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    // More refused in a row than health.failures (3): a 503 of another kind would demote it.
    await gpu0.faults({ queue_full_next: 4 });
    const answers: [number, string | null, string | null][] = [];
    // Until gpu0 has refused 4 and then served one itself (the spread sends it one in two).
    while (answers.length < 40 && !(answers.at(-1)?.[1] === "gpu0" && answers.filter(([, , route]) => String(route).endsWith(",failover")).length === 4)) {
      const { response } = await router.client().chat.completions.create(ask(`admission ${answers.length} ${crypto.randomUUID()}`)).withResponse();
      answers.push([response.status, response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]);
    }
    expect(answers.at(-1)).toEqual([200, "gpu0", "spread"]);
    const failedOver = answers.filter(([, , route]) => String(route).endsWith(",failover"));
    expect(failedOver).toHaveLength(4);
    expect(failedOver.every(([code, replica]) => code === 200 && replica === "gpu1")).toBe(true);
    expect(logRecords(router, "failover").map((r) => r.replica)).toEqual(["gpu0", "gpu0", "gpu0", "gpu0"]);
    expect(logRecords(router, "replica down")).toHaveLength(0);
    expect((await status(router.url)).replicas.map((r) => [r.name, r.state, r.busy, r.consecutive_failures])).toEqual([
      ["gpu0", "up", 4, 0],
      ["gpu1", "up", 0, 0],
    ]);
    expect(await (await fetch(`${router.url}/metrics`)).text()).toContain('llmroute_engine_busy_total{replica="gpu0"} 4');
  });
});

describe("what discovery says of an engine", () => {
  it("vLLM with prefix caching off: a warning at discovery, and /status lists it first among what is missing", async () => {
    const sim = await startSimInProcess("gpu0", { engine: "vllm-details", prefixCache: false });
    const router = await startRouterInProcess([sim]);
    expect(logRecords(router, "replica's prefix cache is off: no request can hit it").map((r) => [r.replica, r.evidence, r.fix])).toEqual([
      ["gpu0", 'vllm:cache_config_info enable_prefix_caching="False"', "start vLLM without --no-enable-prefix-caching (on by default)"],
    ]);
    const missing = (await status(router.url)).replicas[0]!.facts!.missing as { what: string }[];
    expect(missing[0]!.what).toBe('prefix caching is off (vllm:cache_config_info enable_prefix_caching="False"): no request can hit this replica\'s cache, whatever the router does');
  });

  it("SGLang: its version from /server_info, its KV and page size from /metrics (sglang:page_size)", async () => {
    const sim = await startSimInProcess("gpu0", { engine: "sglang", blockTokens: 64 });
    const router = await startRouterInProcess([sim]);
    const facts = (await status(router.url)).replicas[0]!.facts!;
    expect(facts).toMatchObject({ family: "sglang", version: "0.5.9", capacity: { blockTokens: 64, source: "sglang:max_total_num_tokens" } });
  });
});

describe("a template that renders tools late (Mistral 3)", () => {
  it("a second conversation that shares only the first one's tools is not sent to the first one's card", async () => {
    const mistral = { template: "mistral3-tools" } as const;
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", mistral), startSimInProcess("gpu1", mistral)]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    const client = router.client();
    // Tools far longer than the system prompts: a match on them alone outweighs the spread.
    const tools = [{ type: "function", function: { name: "lookup", description: "Look a thing up. ".repeat(200), parameters: { type: "object", properties: { q: { type: "string" } } } } }];
    const first = async (label: string) => {
      const messages = [
        { role: "system", content: `${label} ${crypto.randomUUID()} ${"context ".repeat(30)}` },
        { role: "user", content: `hello ${label}` },
      ] as OpenAI.ChatCompletionMessageParam[];
      const { data, response } = await client.chat.completions.create({ model: "sim-model", messages, tools: tools as OpenAI.ChatCompletionTool[], max_tokens: 2 }).withResponse();
      return { replica: response.headers.get("x-llmroute-replica"), route: response.headers.get("x-llmroute-route"), cached: data.usage?.prompt_tokens_details?.cached_tokens };
    };
    const a = await first("alpha");
    const b = await first("beta");
    // [AVAILABLE_TOOLS] comes just before the last user message: the two prompts share only
    // "<s>[SYSTEM_PROMPT]", so nothing is cached for b anywhere, and the counter spreads it.
    expect(b).toEqual({ replica: a.replica === "gpu0" ? "gpu1" : "gpu0", route: "spread", cached: 0 });
    const s = await status(router.url);
    expect(s.replicas.map((r) => r.hit.predictions.miss)).toEqual([0, 0]);
  });
});
