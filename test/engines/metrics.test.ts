/**
 * Reading an engine's /metrics: a value the text format allows but that measures nothing
 * (NaN, ±Inf: Prometheus' text format accepts them, and client libraries write a gauge set
 * to one as such) is a missing value, never a number the router computes with.
 */
import { describe, expect, it } from "bun:test";
import { PROFILES } from "../../src/engines/index.ts";
import { parsePrometheus, readEngine } from "../../src/engines/metrics.ts";
import { checkExposition } from "../helpers/exposition.ts";

describe("readEngine", () => {
  it.each(["NaN", "+Inf", "-Inf"])("a %s gauge is a missing value; the name is still reported found", (value) => {
    const reading = readEngine(parsePrometheus(`vllm:num_requests_running 2\nvllm:num_requests_waiting ${value}\nvllm:kv_cache_usage_perc 0.5\n`));
    expect(reading.values).toEqual({ running: 2, kv_usage: 0.5 });
    expect(reading.found.waiting).toBe("vllm:num_requests_waiting");
    expect(reading.missing).not.toContain("waiting");
  });

  it("over data-parallel series, only the finite ones count: sums and averages", () => {
    const text = [
      `vllm:num_requests_waiting{engine="0"} 3`,
      `vllm:num_requests_waiting{engine="1"} NaN`,
      `vllm:kv_cache_usage_perc{engine="0"} 0.2`,
      `vllm:kv_cache_usage_perc{engine="1"} NaN`,
      `vllm:kv_cache_usage_perc{engine="2"} 0.4`,
    ].join("\n");
    const { values } = readEngine(parsePrometheus(text));
    expect(values.waiting).toBe(3);
    expect(values.kv_usage).toBeCloseTo(0.3, 10);
  });
});

describe("SGLang: a figure written more than once is counted once", () => {
  // --enable-metrics --enable-priority-scheduling --enable-metrics-for-all-schedulers, two
  // data-parallel schedulers of two tensor-parallel ranks each, as
  // observability/metrics_collector.py writes them (labels from SchedulerMetricsCollector.init_new)
  // and the tokenizer's counters per finished request (TokenizerManager.collect_metrics).
  const scheduler = (dp: number, tp: number, priority = "") =>
    `engine_type="unified",model_name="m",tp_rank="${tp}",pp_rank="0",moe_ep_rank="${tp}",priority="${priority}",dp_rank="${dp}"`;
  const family = (name: string, type: string, help: string, lines: string[]) => [`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...lines.map((l) => `${name}${l}`)];
  const perRank = (fn: (dp: number, tp: number) => string[]) => [0, 1].flatMap((dp) => [0, 1].flatMap((tp) => fn(dp, tp)));
  const text = [
    // dp 0 runs 3 (priority 0: 2, priority 5: 1), dp 1 runs 1 (priority 0): a queue count is a
    // total under priority="" and again per priority, on every tensor-parallel rank
    ...family("sglang:num_running_reqs", "gauge", "The number of running requests.", perRank((dp, tp) => (dp === 0 ? [`{${scheduler(dp, tp)}} 3.0`, `{${scheduler(dp, tp, "0")}} 2.0`, `{${scheduler(dp, tp, "5")}} 1.0`] : [`{${scheduler(dp, tp)}} 1.0`, `{${scheduler(dp, tp, "0")}} 1.0`]))),
    ...family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", perRank((dp, tp) => (dp === 0 ? [`{${scheduler(dp, tp)}} 2.0`, `{${scheduler(dp, tp, "0")}} 2.0`] : [`{${scheduler(dp, tp)}} 0.0`]))),
    ...family("sglang:token_usage", "gauge", "The token usage.", perRank((dp, tp) => [`{${scheduler(dp, tp)}} ${dp === 0 ? 0.5 : 0.25}`])),
    ...family("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.", perRank((dp, tp) => [`{${scheduler(dp, tp)}} 100000.0`])),
    ...family("sglang:page_size", "gauge", "KV cache page size in tokens.", perRank((dp, tp) => [`{${scheduler(dp, tp)}} 64.0`])),
    // each finished request once, under its own priority; cached tokens also by cache tier
    ...family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", ['{model_name="m",priority="0"} 6000.0', '{model_name="m",priority="5"} 4000.0']),
    ...family("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens by source (device/host/storage).", [
      '{model_name="m",priority="0",cache_source="device"} 2500.0',
      '{model_name="m",priority="5",cache_source="device"} 500.0',
      '{model_name="m",priority="0",cache_source="host"} 500.0',
    ]),
    "",
  ].join("\n");

  it("the exposition is one promtool accepts", () => {
    expect(checkExposition(text)).toEqual([]);
  });

  it("running and waiting: the totals of each data-parallel scheduler, once per rank group; the KV usage averaged over them", () => {
    const { values } = readEngine(parsePrometheus(text));
    // a plain sum: 2 × (3 + 2 + 1) + 2 × (1 + 1) = 16 running
    expect(values).toMatchObject({ running: 4, waiting: 2 });
    expect(values.kv_usage).toBeCloseTo(0.375, 10);
  });

  it("the KV pool: each data-parallel scheduler's once, in pages of sglang:page_size", () => {
    expect(PROFILES.sglang.capacityFromMetrics!(parsePrometheus(text))).toEqual({ kvTokens: 200_000, blockTokens: 64, source: "sglang:max_total_num_tokens" });
  });

  it("the cache counters: every priority and every cache source adds up", () => {
    expect(PROFILES.sglang.cacheCounters(parsePrometheus(text))).toMatchObject({ hits: 3_500, queries: 10_000 });
  });
});
