/**
 * What the router learns of an engine without configuration, from answers shaped as each
 * engine's source writes them (src/engines/<family>.ts cite where): the family, the KV
 * capacity, the counters, the start token, what a response's cached tokens mean, and what
 * is missing with the flag that would add it.
 */
import { describe, expect, it } from "bun:test";
import { discoverEngine, missingFacts, type EngineFacts } from "../../src/engines/discover.ts";
import { detectFamily, PROFILES } from "../../src/engines/index.ts";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import { renderEngineReport, reportEngine } from "../../src/engines/report.ts";
import { reportedCachedTokens } from "../../src/engines/usage.ts";
import { checkExposition } from "../helpers/exposition.ts";

/** A fake engine: path → answer (status 404 when absent). */
function engine(routes: Record<string, { body: string | object; headers?: Record<string, string>; status?: number }>) {
  const asked: string[] = [];
  const fetch = async (input: string | URL | Request) => {
    const path = new URL(String(input)).pathname;
    asked.push(path);
    const r = routes[path];
    if (!r) return new Response("not found", { status: 404 });
    return new Response(typeof r.body === "string" ? r.body : JSON.stringify(r.body), { status: r.status ?? 200, headers: r.headers });
  };
  return { fetch, asked };
}

const VLLM_METRICS = `vllm:num_requests_running{engine="0",model_name="m"} 0
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 400
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",num_gpu_blocks="7664"} 1
process_start_time_seconds 1700000000
`;

describe("the family, from what the engine shows", () => {
  it.each([
    ["vLLM's metric names", { metrics: parsePrometheus(VLLM_METRICS) }, "vllm"],
    ["SGLang's metric names", { metrics: parsePrometheus("sglang:num_running_reqs 0\n") }, "sglang"],
    ["llama.cpp's metric names", { metrics: parsePrometheus("llamacpp:requests_processing 0\n") }, "llamacpp"],
    ["vLLM's owned_by", { ownedBy: ["vllm"] }, "vllm"],
    ["SGLang's owned_by", { ownedBy: ["sglang"] }, "sglang"],
    ["llama.cpp's owned_by", { ownedBy: ["llamacpp"] }, "llamacpp"],
    ["Ollama's default namespace as owned_by", { ownedBy: ["library"] }, "ollama"],
    ["llama.cpp's Server header", { server: "llama.cpp" }, "llamacpp"],
    ["Ollama's /api/version", { ollamaVersion: true }, "ollama"],
  ] as const)("%s", (_what, evidence, family) => {
    expect(detectFamily(evidence)?.family).toBe(family);
  });

  it("nothing telling: no family, never a guess", () => {
    expect(detectFamily({ ownedBy: ["openai"], metrics: parsePrometheus("go_goroutines 12\n") })).toBeUndefined();
  });
});

describe("discovery, per family", () => {
  it("vLLM: KV and block size from vllm:cache_config_info, its cache counters, its start time, its version", async () => {
    const e = engine({
      "/v1/models": { body: { data: [{ id: "m", owned_by: "vllm", max_model_len: 32768 }] } },
      "/metrics": { body: VLLM_METRICS },
      "/version": { body: { version: "0.11.2" } },
    });
    const d = await discoverEngine({ url: "http://vllm", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts).toMatchObject({ family: "vllm", version: "0.11.2", capacity: { kvTokens: 7664 * 16, blockTokens: 16, source: "vllm:cache_config_info num_gpu_blocks × block_size" }, cacheCounters: true });
    expect(d.startToken).toBe("process_start_time_seconds 1700000000");
    expect(d.cards?.map((c) => c.id)).toEqual(["m"]);
  });

  it("vLLM on a hybrid model: the KV is kv_cache_size_tokens, not num_gpu_blocks × block_size; a hit lands on prefix_match_unit", async () => {
    // Labels as CacheConfig.metrics_info writes them (str() of every field), one series per
    // data-parallel engine; a hybrid model's 784-token blocks, and a group-aware pool smaller
    // than their product.
    const info = (engine: number) =>
      `vllm:cache_config_info{block_size="784",cache_dtype="auto",enable_prefix_caching="True",engine="${engine}",gpu_memory_utilization="0.9",kv_cache_max_concurrency="2.21",kv_cache_size_tokens="145280",kv_offloading_backend="native",kv_offloading_size="None",num_cpu_blocks="None",num_gpu_blocks="320",prefix_match_unit="16"} 1.0`;
    const text = [
      "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
      "# TYPE vllm:cache_config_info gauge",
      info(0),
      info(1),
      "# HELP vllm:num_requests_running Number of requests in model execution batches.",
      "# TYPE vllm:num_requests_running gauge",
      'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
      'vllm:num_requests_running{engine="1",model_name="m"} 0.0',
      "",
    ].join("\n");
    expect(checkExposition(text)).toEqual([]);
    const e = engine({ "/v1/models": { body: { data: [{ id: "m", owned_by: "vllm" }] } }, "/metrics": { body: text }, "/version": { body: { version: "0.29.0" } } });
    const d = await discoverEngine({ url: "http://vllm", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    // Two engines of 145,280 tokens each; 320 × 784 would have said 250,880 each.
    expect(d.facts.capacity).toEqual({ kvTokens: 2 * 145_280, blockTokens: 16, source: "vllm:cache_config_info kv_cache_size_tokens" });
    expect(d.facts.prefixCacheOff).toBeUndefined();
  });

  it("vLLM before kv_cache_size_tokens (or with it unset, \"None\"): the product, and the source says so", () => {
    const text = `vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",kv_cache_size_tokens="None",num_gpu_blocks="7664",prefix_match_unit="None"} 1.0\n`;
    expect(PROFILES.vllm.capacityFromMetrics!(parsePrometheus(text))).toEqual({ kvTokens: 7664 * 16, blockTokens: 16, source: "vllm:cache_config_info num_gpu_blocks × block_size" });
  });

  it("vLLM with prefix caching off: discovery, llmroute check and /status say no request can hit its cache", async () => {
    const text = [
      "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
      "# TYPE vllm:cache_config_info gauge",
      'vllm:cache_config_info{block_size="16",enable_prefix_caching="False",engine="0",kv_cache_size_tokens="122624",num_gpu_blocks="7664"} 1.0',
      "",
    ].join("\n");
    expect(checkExposition(text)).toEqual([]);
    const e = engine({ "/v1/models": { body: { data: [{ id: "m", owned_by: "vllm" }] } }, "/metrics": { body: text }, "/health": { body: "" } });
    const d = await discoverEngine({ url: "http://vllm", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts.prefixCacheOff).toEqual({ evidence: 'vllm:cache_config_info enable_prefix_caching="False"', fix: "start vLLM without --no-enable-prefix-caching (on by default)" });
    expect(missingFacts(d.facts, { kvTokens: 0 })[0]).toEqual({
      what: 'prefix caching is off (vllm:cache_config_info enable_prefix_caching="False"): no request can hit this replica\'s cache, whatever the router does',
      fix: "start vLLM without --no-enable-prefix-caching (on by default)",
    });
    const report = await reportEngine({ name: "gpu0", url: "http://vllm", headers: {}, metricsPath: "/metrics", kvTokens: 0, health: { path: "/health", own: false } }, e.fetch, 1000, false);
    expect(renderEngineReport(report).join("\n")).toContain(
      "  missing    prefix caching is off (vllm:cache_config_info enable_prefix_caching=\"False\"): no request can hit this replica's cache, whatever the router does\n             → start vLLM without --no-enable-prefix-caching (on by default)",
    );
  });

  it("SGLang: /server_info first (/get_server_info is its deprecated alias); without --enable-metrics its KV and page size from there", async () => {
    const e = engine({
      "/v1/models": { body: { data: [{ id: "m", owned_by: "sglang" }] } },
      "/server_info": { body: { version: "0.5.11", max_total_num_tokens: 250_000, page_size: 64 } },
      "/get_server_info": { body: { version: "0.5.11", max_total_num_tokens: 250_000, page_size: 64 } },
    });
    const d = await discoverEngine({ url: "http://sglang", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts).toMatchObject({ family: "sglang", version: "0.5.11", capacity: { kvTokens: 250_000, blockTokens: 64, source: "/server_info" } });
    expect(e.asked).toContain("/server_info");
    expect(e.asked).not.toContain("/get_server_info");
  });

  it("SGLang before /server_info: its KV from /get_server_info, and what is missing says which flag adds it", async () => {
    const e = engine({
      "/v1/models": { body: { data: [{ id: "m", owned_by: "sglang" }] } },
      "/get_server_info": { body: { version: "0.5.4", max_total_num_tokens: 250_000 } },
    });
    const d = await discoverEngine({ url: "http://sglang", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts).toMatchObject({ family: "sglang", version: "0.5.4", capacity: { kvTokens: 250_000, source: "/get_server_info" }, metrics: { state: "absent" } });
    expect(missingFacts(d.facts, { kvTokens: 0 })).toEqual([
      expect.objectContaining({ fix: "start SGLang with --enable-metrics" }),
      expect.objectContaining({ what: "no per-request cached tokens seen yet", fix: "start SGLang with --enable-cache-report" }),
    ]);
  });

  it("llama.cpp: slots × per-slot context from /props, its build, and the start header on /metrics (n_tokens_max is no capacity)", async () => {
    const e = engine({
      "/v1/models": { body: { object: "list", data: [{ id: "tiny", owned_by: "llamacpp", meta: { n_ctx: 32768 } }] } },
      "/metrics": { body: "llamacpp:requests_processing 0\nllamacpp:prompt_tokens_total 10\nllamacpp:prompt_tokens_cached_total 5\nllamacpp:n_tokens_max 13148\n", headers: { "Process-Start-Time-Unix": "674007588" } },
      "/props": { body: { total_slots: 2, default_generation_settings: { n_ctx: 32768 }, build_info: "b1-80fb11a" } },
    });
    const d = await discoverEngine({ url: "http://llama", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts).toMatchObject({ family: "llamacpp", version: "b1-80fb11a", capacity: { kvTokens: 65536, slots: 2, blockTokens: 1, source: "/props" }, cacheCounters: true });
    expect(d.startToken).toBe("process-start-time-unix 674007588");
    expect(PROFILES.llamacpp.cacheCounters(parsePrometheus("llamacpp:prompt_tokens_total 10\nllamacpp:prompt_tokens_cached_total 5\n"))).toMatchObject({ hits: 5, queries: 15 });
  });

  it("Ollama: no /metrics, no cached tokens; known by /api/version; the advice says there is nothing to turn on", async () => {
    const e = engine({
      "/v1/models": { body: { data: [{ id: "qwen3:latest", owned_by: "someone" }] } },
      "/api/version": { body: { version: "0.12.3" } },
    });
    const d = await discoverEngine({ url: "http://ollama", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts).toMatchObject({ family: "ollama", version: "0.12.3", familyFrom: "/api/version" });
    // No model loaded yet (/api/ps not answered here): its context is not known.
    expect(missingFacts(d.facts, { kvTokens: 0 }).map((m) => m.fix)).toEqual([
      "none: the router relies on its own index and the time to first token",
      "Ollama lists a model's context in /api/ps once a request has loaded it (the router reads it then); or set kv_tokens",
    ]);
    // "qwen3" reaches "qwen3:latest"
    expect(PROFILES.ollama.sameModel!("qwen3", "qwen3:latest")).toBe(true);
  });

  it("Ollama with a model loaded: its context from /api/ps (one request's, OLLAMA_NUM_PARALLEL 1), and when it would unload", async () => {
    const e = engine({
      "/v1/models": { body: { data: [{ id: "qwen3:latest", owned_by: "library" }] } },
      "/api/version": { body: { version: "0.12.3" } },
      "/api/ps": { body: { models: [{ name: "qwen3:latest", model: "qwen3:latest", size: 1, expires_at: "2026-12-03T06:00:00.5Z", size_vram: 1, context_length: 8192 }] } },
    });
    const d = await discoverEngine({ url: "http://ollama", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts.capacity).toEqual({ kvTokens: 8192, blockTokens: 1, source: "/api/ps context_length" });
    expect(d.resident).toEqual([{ name: "qwen3:latest", contextLength: 8192, expiresAt: Date.parse("2026-12-03T06:00:00.5Z") }]);
    expect(missingFacts(d.facts, { kvTokens: 0 }).map((m) => [m.what, m.fix])).toEqual([
      ["Ollama reports no cached tokens", "none: the router relies on its own index and the time to first token"],
      ["KV capacity unknown: /api/ps context_length gives one request's context (8,192), no bound on the card's KV", "set kv_tokens in router.toml for capacity warnings"],
    ]);
    expect(missingFacts(d.facts, { kvTokens: 122_636 }).map((m) => m.what)).toEqual(["Ollama reports no cached tokens"]);
  });

  it("metrics = false: /metrics is never asked", async () => {
    const e = engine({ "/v1/models": { body: { data: [{ id: "m", owned_by: "vllm" }] } } });
    const d = await discoverEngine({ url: "http://vllm", headers: {}, metricsPath: false }, e.fetch, 1000);
    expect(d.facts.metrics).toEqual({ state: "off" });
    expect(e.asked).not.toContain("/metrics");
  });

  it("an engine that answers nothing it is asked: unknown family, nothing thrown", async () => {
    const e = engine({});
    const d = await discoverEngine({ url: "http://x", headers: {}, metricsPath: "/metrics" }, e.fetch, 1000);
    expect(d.facts.family).toBeUndefined();
    expect(missingFacts(d.facts, { kvTokens: 0 })[0]!.what).toMatch(/engine family not recognised/);
  });
});

describe("how each family schedules prefills (the hybrid prices a replica's queue with it)", () => {
  it("vLLM and SGLang serve prefills oldest first; llama.cpp's slots share the card; Ollama runs one", () => {
    const capacity = { slots: 4 } as Parameters<(typeof PROFILES)["llamacpp"]["prefillConcurrency"]>[0];
    expect(PROFILES.vllm.prefillConcurrency(undefined)).toBe(1);
    expect(PROFILES.sglang.prefillConcurrency(undefined)).toBe(1);
    expect(PROFILES.llamacpp.prefillConcurrency(capacity)).toBe(4);
    expect(PROFILES.ollama.prefillConcurrency(undefined)).toBe(1);
  });
});

describe("a response's cached tokens, as its engine means them", () => {
  const facts = (family: EngineFacts["family"]) => (family ? PROFILES[family] : undefined);
  it.each([
    ["vLLM with the flag writes a 0 (_make_prompt_tokens_details): nothing cached, from the first response on", "vllm", "chat", { promptTokens: 100, cachedTokens: 0 }, false, 0],
    ["vLLM with the flag, a zero left out once the field was seen (older versions): 0", "vllm", "chat", { promptTokens: 100 }, true, 0],
    ["vLLM before any response carried the field: unknown", "vllm", "chat", { promptTokens: 100 }, false, undefined],
    ["SGLang with --enable-cache-report omits a zero: 0 once seen", "sglang", "chat", { promptTokens: 100 }, true, 0],
    ["llama.cpp always reports: what it says", "llamacpp", "chat", { promptTokens: 100, cachedTokens: 60 }, true, 60],
    ["Ollama's Responses API writes 0 whatever it reused: not a report", "ollama", "responses", { promptTokens: 100, cachedTokens: 0 }, true, undefined],
    ["an unknown engine: only what is there", undefined, "chat", { promptTokens: 100 }, true, undefined],
  ] as const)("%s", (_what, family, endpoint, usage, seen, expected) => {
    expect(reportedCachedTokens(facts(family), endpoint, usage, seen)).toBe(expected);
  });
});
