/**
 * SGLang, as its own source says. Paths are in the sgl-project/sglang repository.
 */
import { sum, type EngineProfile } from "./profile.ts";
import { stringField } from "./vllm.ts";

export const SGLANG: EngineProfile = {
  family: "sglang",
  label: "SGLang",
  // python/sglang/srt/entrypoints/openai/protocol.py ModelCard: `owned_by: str = "sglang"`.
  ownedBy: (v) => v === "sglang",
  metricPrefix: "sglang:",
  // python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector, TokenizerMetricsCollector);
  // only with --enable-metrics.
  metrics: {
    running: ["sglang:num_running_reqs"],
    waiting: ["sglang:num_queue_reqs"],
    kv_usage: ["sglang:token_usage"],
    // A gauge: the hit ratio of the LAST prefill batch, not a lifetime or window figure.
    cache_hit_rate: ["sglang:cache_hit_rate"],
    cached_tokens: ["sglang:cached_tokens_total"],
    kv_capacity: ["sglang:max_total_num_tokens"],
    prompt_tokens: ["sglang:prompt_tokens_total"],
    generation_tokens: ["sglang:generation_tokens_total"],
    ttft: ["sglang:time_to_first_token_seconds_count"],
  },
  // TokenizerMetricsCollector: prompt_tokens_total counts whole prompts, cached_tokens_total
  // the part served from the radix cache.
  cacheCounters(metrics) {
    const hits = sum(metrics, "sglang:cached_tokens_total");
    const queries = sum(metrics, "sglang:prompt_tokens_total");
    if (hits === undefined || queries === undefined) return undefined;
    return { hits, queries, names: ["sglang:cached_tokens_total", "sglang:prompt_tokens_total"] };
  },
  // The KV pool in tokens (collector.py `max_total_num_tokens`, the scheduler's token pool).
  capacityFromMetrics(metrics) {
    const samples = metrics.get("sglang:max_total_num_tokens");
    if (!samples || samples.length === 0) return undefined;
    const kvTokens = samples.reduce((a, s) => a + s.value, 0);
    // page_size 1 by default: the radix cache matches token by token (server_args.py).
    return kvTokens > 0 ? { kvTokens, blockTokens: 1, source: "sglang:max_total_num_tokens" } : undefined;
  },
  // None: SGLang's multiprocess registry has no process collector.
  usage: {
    // entrypoints/openai/usage_processor.py UsageProcessor._details_if_cached: only with
    // --enable-cache-report, and "only when count > 0 (keeps JSON slim)".
    cached: "flag",
    flag: "--enable-cache-report",
    zeroOmitted: true,
    responsesConstant: false,
  },
  // serving_chat.py: the usage chunk only with stream_options.include_usage.
  stream: { usageUnasked: () => false },
  // Not verified to accept any name: routed by the names it lists, as before.
  anyModelName: false,
  blockTokens: 1,
  // python/sglang/srt/managers/scheduler.py get_new_batch_prefill: the request being chunked
  // resumes first (`adder.add_chunked_req`), then the waiting queue in `--schedule-policy`
  // order (fcfs by default, server_args.py) fills what is left of --chunked-prefill-size: a
  // new request waits for the prefills sent before it (a first-come queue).
  prefillConcurrency: () => 1,
  // Not matchedWhenScheduled: the default overlap loop (scheduler.py event_loop_overlap) forms
  // the next prefill batch before the last prefill's tokens are in the radix tree, so a request
  // in the very next batch behind the prefill of its prefix misses its last chunk (all of it
  // within one --chunked-prefill-size); one queued a batch or more behind finds it, which the
  // router, not knowing what else is queued there, does not count on.
  // (get_new_batch_prefill → Req.init_next_round_input, process_batch_result_prefill →
  // cache_unfinished_req.)
  metricsFlag: "--enable-metrics",
  // http_server.py GET /get_server_info carries "version" (with the server args).
  version: { path: "/get_server_info", read: (b) => stringField(b, "version") },
};
