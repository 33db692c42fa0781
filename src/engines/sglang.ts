/**
 * SGLang, as its own source says. Paths are in the sgl-project/sglang repository.
 */
import type { Sample } from "./metrics.ts";
import { samplesOf, sum, type EngineProfile } from "./profile.ts";
import { stringField } from "./vllm.ts";

export const SGLANG: EngineProfile = {
  family: "sglang",
  label: "SGLang",
  // python/sglang/srt/entrypoints/openai/protocol.py ModelCard: `owned_by: str = "sglang"`.
  ownedBy: (v) => v === "sglang",
  metricPrefix: "sglang:",
  // python/sglang/srt/observability/metrics_collector.py (formerly metrics/collector.py):
  // SchedulerMetricsCollector, TokenizerMetricsCollector; only with --enable-metrics. Some
  // figures come more than once: `distinct` below keeps each once.
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
  // TokenizerMetricsCollector.observe_one_finished_request: prompt_tokens_total counts whole
  // prompts, cached_tokens_total the part served from the cache, split by a `cache_source`
  // label ("device", "host", "storage_<backend>"; "total" when the request brought no
  // breakdown) whose values partition it: their sum is the cached tokens. Both move when a
  // request FINISHES (called from tokenizer_manager.py collect_metrics on its last output),
  // not when its prefill hits: a window's hits are those of the requests that ended in it
  // (src/route/evidence.ts windowFeedback carries a short window over to the next one).
  cacheCounters(metrics) {
    const hits = sum(metrics, "sglang:cached_tokens_total", SGLANG);
    const queries = sum(metrics, "sglang:prompt_tokens_total", SGLANG);
    if (hits === undefined || queries === undefined) return undefined;
    return { hits, queries, names: ["sglang:cached_tokens_total", "sglang:prompt_tokens_total"] };
  },
  // The KV pool in tokens (SchedulerMetricsCollector.emit_constants: max_total_num_tokens, the
  // scheduler's token pool) and its page size (`sglang:page_size`, the same constants): the
  // radix cache matches whole pages, 1 token by default, 64 or 128 on backends that need more
  // (server_args.py: "FlashMLA only supports a page_size of 64", the Ascend backend 128, …).
  capacityFromMetrics(metrics) {
    const kvTokens = sum(metrics, "sglang:max_total_num_tokens", SGLANG) ?? 0;
    if (!(kvTokens > 0)) return undefined;
    // Older versions publish no page size on /metrics: discovery reads it from /server_info.
    const page = samplesOf(metrics, "sglang:page_size", SGLANG)[0]?.value;
    return { kvTokens, ...(page && page > 0 ? { blockTokens: page } : {}), source: "sglang:max_total_num_tokens" };
  },
  distinct: distinctSchedulerSeries,
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
  // page_size 1 by default (server_args.py): the radix cache matches token by token.
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
  // http_server.py GET /server_info: the server args (page_size among them), the scheduler's
  // info (max_total_num_tokens) and "version"; GET /get_server_info is its deprecated alias
  // ("Please use '/server_info' instead"), the only one in older versions.
  version: { path: "/server_info", oldPath: "/get_server_info", read: (b) => stringField(b, "version") },
};

/** Labels that name a rank of one scheduler's parallel group: its series repeat one figure. */
const RANK_LABELS = ["tp_rank", "pp_rank", "moe_ep_rank"];

/** The scheduler's queue counts, written through `_log_gauge_queue_count` (see below). */
const QUEUE_COUNTS = new Set(["sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_inflight_queue_reqs", "sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs"]);

/**
 * python/sglang/srt/observability/metrics_collector.py (formerly metrics/collector.py) and
 * managers/tokenizer_manager.py:
 * - with priority scheduling every scheduler series carries `priority`, "" on the figure
 *   itself; a queue count is written there as its TOTAL and again per priority value
 *   (SchedulerMetricsCollector._log_gauge_queue_count: "Grafana queries should use
 *   priority=\"\" for totals"): for those, the per-priority series repeat the total, split;
 * - the tokenizer's counters (prompt, cached, generated tokens) count each finished request
 *   once, under its own priority (TokenizerManager.collect_metrics: `labels["priority"] =
 *   str(priority)`) and, for cached tokens, its `cache_source`: those series add up;
 * - a scheduler writes its series when `attn_tp_rank == 0`, or on every rank with
 *   --enable-metrics-for-all-schedulers (SchedulerMetricsCollector.init_new): ranks of one
 *   tensor-, pipeline- or expert-parallel group (labels tp_rank, pp_rank, moe_ep_rank) run the
 *   same batch, so their series repeat one figure;
 * - schedulers that differ otherwise (dp_rank: a data-parallel replica of its own;
 *   engine_type; model_name) serve different requests: their figures add up.
 * So: a queue count's totals, then per scheduler the series of its lowest rank.
 */
function distinctSchedulerSeries(name: string, samples: readonly Sample[]): Sample[] {
  const split = QUEUE_COUNTS.has(name) && samples.some((s) => (s.labels.priority ?? "") === "") && samples.some((s) => (s.labels.priority ?? "") !== "");
  const totals = split ? samples.filter((s) => (s.labels.priority ?? "") === "") : samples;
  const byScheduler = new Map<string, Sample>();
  const rank = (s: Sample) => RANK_LABELS.map((l) => Number(s.labels[l] ?? 0));
  for (const s of totals) {
    const key = JSON.stringify(Object.entries(s.labels).filter(([k]) => !RANK_LABELS.includes(k)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    const kept = byScheduler.get(key);
    if (!kept || lower(rank(s), rank(kept))) byScheduler.set(key, s);
  }
  return [...byScheduler.values()];
}

function lower(a: number[], b: number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]!;
  return false;
}
