import { describe, expect, it } from "bun:test";
import { counterDelta, detectFamily, loadOf, parseScrape, prefixCounters, presence, sglangHitRate } from "../../src/probe/metrics.ts";

const VLLM_NEW = `
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 1.0
vllm:num_requests_running{engine="1",model_name="qwen"} 2.0
vllm:num_requests_waiting{engine="0",model_name="qwen"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 400.0
vllm:prefix_cache_queries_created{engine="0",model_name="qwen"} 1.7e9
vllm:prompt_tokens_total{engine="0",model_name="qwen"} 5000.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 3.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen"} 1.5
`;

const VLLM_OLD = `
vllm:num_requests_running{model_name="m"} 0.0
vllm:num_requests_waiting{model_name="m"} 0.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.1
vllm:gpu_prefix_cache_queries_total{model_name="m"} 200
vllm:gpu_prefix_cache_hits_total{model_name="m"} 50
`;

const SGLANG = `
sglang:num_running_reqs{model_name="m"} 0
sglang:num_queue_reqs{model_name="m"} 3
sglang:token_usage{model_name="m"} 0.5
sglang:cache_hit_rate{model_name="m"} 0.21
`;

const LLAMACPP = `
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
llamacpp:requests_processing 1
llamacpp:requests_deferred 0
`;

const scrape = (text: string) => parseScrape(text)!;

describe("parseScrape", () => {
  it("returns nothing for text that is not Prometheus (a 404 page, JSON)", () => {
    expect(parseScrape('{"error":{"message":"not found"}}')).toBeUndefined();
    expect(parseScrape("<html><body>404</body></html>")).toBeUndefined();
    expect(parseScrape("")).toBeUndefined();
  });

  it("keeps label sets, values with exponents and +Inf buckets", () => {
    const s = scrape(VLLM_NEW);
    expect(s.get("vllm:num_requests_running")!.map((x) => x.value)).toEqual([1, 2]);
    expect(s.get("vllm:prefix_cache_queries_created")![0]!.value).toBe(1.7e9);
    expect(s.get("vllm:time_to_first_token_seconds_bucket")![0]!.labels.le).toBe("+Inf");
  });
});

describe("presence: known names checked against what the endpoint exposes", () => {
  it.each([
    ["vLLM >= 0.9", VLLM_NEW, "vllm", ["vllm:prefix_cache_hits_total", "vllm:kv_cache_usage_perc"], ["vllm:gpu_prefix_cache_hits_total", "vllm:gpu_cache_usage_perc"]],
    ["vLLM < 0.9", VLLM_OLD, "vllm", ["vllm:gpu_prefix_cache_hits_total", "vllm:gpu_cache_usage_perc"], ["vllm:prefix_cache_hits_total", "vllm:kv_cache_usage_perc"]],
    ["SGLang", SGLANG, "sglang", ["sglang:cache_hit_rate", "sglang:num_queue_reqs"], ["sglang:prompt_tokens_total"]],
    ["llama.cpp", LLAMACPP, "llamacpp", ["llamacpp:requests_processing", "llamacpp:prompt_tokens_total"], []],
  ] as const)("%s", (_name, text, family, found, missing) => {
    const families = presence([scrape(text)]);
    expect(detectFamily(families)).toBe(family);
    const f = families.find((x) => x.family === family)!;
    for (const n of found) expect(f.found).toContain(n);
    for (const n of missing) expect(f.missing).toContain(n);
    for (const other of families.filter((x) => x.family !== family)) expect(other.found).toEqual([]);
  });

  it("a signal found under one spelling records which one, newest first", () => {
    const [vllm] = presence([scrape(VLLM_OLD)]);
    const hits = vllm!.signals.find((s) => s.signal === "prefix_hits")!;
    expect(hits.found).toBe("vllm:gpu_prefix_cache_hits_total");
    expect(hits.known[0]).toBe("vllm:prefix_cache_hits_total");
    const ttft = vllm!.signals.find((s) => s.signal === "ttft")!;
    expect(ttft.found).toBeUndefined();
  });

  it("counts a name found in any scrape (histograms appear after the first request)", () => {
    const before = scrape("vllm:num_requests_running 0\n");
    const after = scrape(VLLM_NEW);
    const [vllm] = presence([before, after]);
    expect(vllm!.found).toContain("vllm:time_to_first_token_seconds_count");
    expect(presence([before])[0]!.found).not.toContain("vllm:time_to_first_token_seconds_count");
  });
});

describe("load, counters and their delta", () => {
  it.each([
    [VLLM_NEW, { running: 3, waiting: 0, family: "vllm" }],
    [SGLANG, { running: 0, waiting: 3, family: "sglang" }],
    [LLAMACPP, { running: 1, waiting: 0, family: "llamacpp" }],
  ])("load is summed over engines (%#)", (text, load) => {
    expect(loadOf(scrape(text))).toEqual(load as never);
  });

  it("no load metric → undefined, not zero (an unknown load is not idle)", () => {
    expect(loadOf(scrape("process_cpu_seconds_total 12\n"))).toBeUndefined();
  });

  it("prefix counters: new spelling, else the old one; none on SGLang or llama.cpp", () => {
    expect(prefixCounters(scrape(VLLM_NEW))).toEqual({ hits: 400, queries: 1000, names: ["vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"] });
    expect(prefixCounters(scrape(VLLM_OLD))?.names[0]).toBe("vllm:gpu_prefix_cache_hits_total");
    expect(prefixCounters(scrape(SGLANG))).toBeUndefined();
    expect(prefixCounters(scrape(LLAMACPP))).toBeUndefined();
  });

  it("the delta is this probe's share, not the lifetime ratio", () => {
    const before = scrape(VLLM_NEW);
    const after = scrape(VLLM_NEW.replace("} 1000.0", "} 19000.0").replace("} 400.0", "} 9300.0"));
    expect(counterDelta(before, after)).toEqual({ hits: 8900, queries: 18000, names: ["vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"] });
  });

  it("a counter that went backwards (engine restart) or is missing gives no delta", () => {
    const before = scrape(VLLM_NEW);
    const restarted = scrape(VLLM_NEW.replace("} 1000.0", "} 10.0").replace("} 400.0", "} 5.0"));
    expect(counterDelta(before, restarted)).toBeUndefined();
    expect(counterDelta(undefined, before)).toBeUndefined();
    expect(counterDelta(scrape(VLLM_OLD), before)).toBeUndefined();
  });

  it("SGLang's hit rate is read as the gauge it is", () => {
    expect(sglangHitRate(scrape(SGLANG))).toBe(0.21);
    expect(sglangHitRate(scrape(VLLM_NEW))).toBeUndefined();
  });
});
