/**
 * vLLM (V1 engine), as its own source says. Paths are in the vllm-project/vllm repository.
 */
import { errorMessage, firstPresent, sum, type EngineProfile } from "./profile.ts";

export const VLLM: EngineProfile = {
  family: "vllm",
  label: "vLLM",
  // vllm/entrypoints/openai/engine/protocol.py ModelCard: `owned_by: str = "vllm"`.
  ownedBy: (v) => v === "vllm",
  metricPrefix: "vllm:",
  // vllm/v1/metrics/loggers.py PrometheusStatLogger (the `_total` suffix is prometheus_client's).
  // Before 0.9 the KV and prefix-cache names carried a `gpu_`: both spellings are read.
  metrics: {
    running: ["vllm:num_requests_running"],
    waiting: ["vllm:num_requests_waiting"],
    kv_usage: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    prefix_queries: ["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"],
    prefix_hits: ["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"],
    prompt_tokens: ["vllm:prompt_tokens_total"],
    generation_tokens: ["vllm:generation_tokens_total"],
    preemptions: ["vllm:num_preemptions_total"],
    // a histogram: its _count series says whether it is exposed
    ttft: ["vllm:time_to_first_token_seconds_count"],
  },
  // Both counters are in tokens (loggers.py: "Prefix cache queries, in terms of number of
  // queried tokens"), so a delta of the two is the hit rate of the window.
  cacheCounters(metrics) {
    const names = VLLM.metrics;
    for (let i = 0; i < (names.prefix_hits?.length ?? 0); i++) {
      const h = names.prefix_hits![i]!;
      const q = names.prefix_queries![i]!;
      const hits = sum(metrics, h);
      const queries = sum(metrics, q);
      if (hits !== undefined && queries !== undefined) return { hits, queries, names: [h, q] };
    }
    return undefined;
  },
  // vllm/v1/metrics/loggers.py log_metrics_info("cache_config", …): an Info gauge whose
  // labels are CacheConfig's fields as strings (vllm/config/cache.py CacheConfig.metrics_info:
  // `str(value)`, so an unset field reads "None"), one series per data-parallel engine, whose
  // pools add up. The pool is CacheConfig.kv_cache_size_tokens where the engine sets it:
  // "Per-DP-engine KV cache capacity in tokens (group-aware). Uses group-aware capacity since
  // num_gpu_blocks * block_size can be wrong for hybrid models where requests occupy multiple
  // KV cache groups" (vllm/config/cache.py); older versions publish only that product.
  capacityFromMetrics(metrics) {
    const samples = metrics.get("vllm:cache_config_info");
    if (!samples || samples.length === 0) return undefined;
    let kvTokens = 0;
    let blockTokens: number | undefined;
    const read = new Set<string>();
    for (const s of samples) {
      const labels = s.labels;
      const published = positive(labels.kv_cache_size_tokens);
      const blocks = positive(labels.num_gpu_blocks);
      const size = positive(labels.block_size);
      if (published !== undefined) {
        kvTokens += published;
        read.add("kv_cache_size_tokens");
      } else if (blocks !== undefined && size !== undefined) {
        kvTokens += blocks * size;
        read.add("num_gpu_blocks × block_size");
      } else return undefined;
      // CacheConfig.prefix_match_unit: "The finest token boundary (in tokens) a prefix-cache
      // hit can land on" — finer than a hybrid model's physical block where it is set.
      blockTokens = positive(labels.prefix_match_unit) ?? size ?? blockTokens;
    }
    return { kvTokens, ...(blockTokens ? { blockTokens } : {}), source: `vllm:cache_config_info ${[...read].join(" and ")}` };
  },
  // CacheConfig.enable_prefix_caching (vllm/config/cache.py, True by default;
  // --no-enable-prefix-caching turns it off), published on the same Info gauge as "False".
  prefixCacheOff(metrics) {
    const off = metrics.get("vllm:cache_config_info")?.some((s) => s.labels.enable_prefix_caching === "False");
    return off ? { evidence: 'vllm:cache_config_info enable_prefix_caching="False"', fix: "start vLLM without --no-enable-prefix-caching (on by default)" } : undefined;
  },
  // prometheus_client's process collector; absent when several API servers share a
  // multiprocess registry (vllm/entrypoints/openai/api_server.py, PROMETHEUS_MULTIPROC_DIR).
  startTimeMetric: "process_start_time_seconds",
  usage: {
    // vllm/entrypoints/openai/chat_completion/serving.py _make_prompt_tokens_details: no
    // prompt_tokens_details without --enable-prompt-tokens-details (off by default); with it,
    // `cached_tokens` is written whenever num_cached_tokens is not None — a 0 is "nothing was
    // cached", a report like any other. Older versions tested `if
    // self.enable_prompt_tokens_details and num_cached_tokens`, leaving a 0 out: so once a
    // replica has shown the field, a response with usage but without it still reads 0.
    cached: "flag",
    flag: "--enable-prompt-tokens-details",
    zeroOmitted: true,
    responsesConstant: false,
  },
  // vllm/entrypoints/openai/engine/protocol.py StreamOptions: `include_usage: bool | None =
  // True`, read by serve/utils/api_utils.py should_include_usage (`bool(include_usage)`): any
  // stream_options object asks for usage unless it says false (or null); without
  // stream_options no usage chunk is sent at all.
  stream: {
    usageUnasked: () => false,
    usageAsked: (o) => typeof o === "object" && o !== null && !Array.isArray(o) && (!("include_usage" in o) || (o as { include_usage: unknown }).include_usage === true),
  },
  // The served model name is checked (serving engine `_check_model`: 404 otherwise).
  anyModelName: false,
  // vllm/config/cache.py: block_size 16 by default on CUDA; hybrid (Mamba/attention) models
  // use far larger blocks, which cache_config_info then publishes.
  blockTokens: 16,
  // vllm/v1/core/sched/scheduler.py Scheduler.schedule: "First, schedule the RUNNING
  // requests" in order, each taking min(its remaining prompt, the step's token budget), and
  // a waiting request only with budget left: chunked prefill (on in V1) serves prefills
  // oldest first, so a new request waits for every prefill sent before it (a first-come queue).
  prefillConcurrency: () => 1,
  // The same function takes a waiting request, and calls kv_cache_manager.get_computed_blocks
  // for it, only with budget left after the running requests' chunks — whose blocks are
  // cached as they are allocated (KVCacheManager.allocate_slots → cache_blocks).
  matchedWhenScheduled: true,
  // vllm/entrypoints/openai/api_server.py `show_version`: GET /version → {"version": "…"}.
  version: { path: "/version", read: (b) => stringField(b, "version") },
  // Admission control (--max-num-queued-reqs, --max-num-queued-tokens; off by default):
  // AsyncLLM.check_admission (vllm/v1/engine/async_llm.py) raises, before the request reaches
  // the engine, vllm/exceptions.py QueueOverflowError ("The engine is currently busy and
  // cannot accept new requests. Please try again later or on a different instance.") or
  // MaxQueuedTokensError ("The engine has reached its prefill token backlog limit. …"), both
  // GracefulHTTPError with HTTP 503 "so that load balancers and client SDKs retry the request
  // on a different instance"; the server's VLLMError handler answers it as an ErrorResponse,
  // `{"error": {"message", "type", "param", "code": 503}}`.
  busy: (error) => {
    const message = errorMessage(error);
    return message !== undefined && VLLM_ADMISSION_REFUSALS.some((m) => message.startsWith(m));
  },
};

/** The messages of vLLM's admission-control refusals (vllm/exceptions.py), up to their first sentence's end. */
const VLLM_ADMISSION_REFUSALS = ["The engine is currently busy and cannot accept new requests.", "The engine has reached its prefill token backlog limit."];

/** A label's value as a positive number, or undefined ("None", absent, 0, not a number). */
function positive(label: string | undefined): number | undefined {
  const n = Number(label);
  return label !== undefined && label !== "" && n > 0 ? n : undefined;
}

export function stringField(body: unknown, key: string): string | undefined {
  const v = body && typeof body === "object" ? (body as Record<string, unknown>)[key] : undefined;
  return typeof v === "string" && v !== "" ? v : undefined;
}

export { firstPresent };
