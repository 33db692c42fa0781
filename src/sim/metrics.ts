/**
 * GET /metrics in Prometheus text format with vLLM V1's metric names and labels
 * (`model_name`, `engine`), so the router's scraper and the probe read the sim exactly as
 * they read vLLM. TTFT is observed in real seconds — the same clock a client measures.
 * Counters are written as prometheus_client (vLLM's exporter) writes them: the `_total`
 * name in HELP, TYPE and samples alike, which `promtool check metrics` requires.
 */
import type { SimEngine } from "./engine.ts";
import type { SlotEngine } from "./slots.ts";

export function renderMetrics(engine: SimEngine | SlotEngine, model: string): string {
  engine.sync();
  const labels = `engine="0",model_name="${escapeLabel(model)}"`;
  const lines: string[] = [];
  const metric = (name: string, type: string, help: string, samples: [string, number][]) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [suffixAndLabels, value] of samples) lines.push(`${name}${suffixAndLabels} ${formatValue(value)}`);
  };
  const s = engine.stats;
  const o = engine.options;
  metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", [[`{${labels}}`, engine.runningCount]]);
  metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [[`{${labels}}`, engine.waitingCount]]);
  metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [[`{${labels}}`, engine.pool.usage]]);
  metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", [
    [`{${labels}}`, s.prefix_cache_queries_total],
  ]);
  metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", [
    [`{${labels}}`, s.prefix_cache_hits_total],
  ]);
  metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", [
    [`{${labels}}`, s.preemptions_total],
  ]);
  metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [[`{${labels}}`, s.prompt_tokens_total]]);
  metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", [
    [`{${labels}}`, s.generation_tokens_total],
  ]);
  metric(
    "vllm:request_success_total",
    "counter",
    "Count of successfully processed requests.",
    (["stop", "length", "abort"] as const).map((reason) => [
      `{${labels},finished_reason="${reason}"}`,
      engine.finished[reason],
    ]),
  );
  const h = engine.ttft;
  metric("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", [
    ...h.buckets.map((le, i): [string, number] => [`_bucket{${labels},le="${formatValue(le)}"}`, h.counts[i]!]),
    [`_bucket{${labels},le="+Inf"}`, h.count],
    [`_count{${labels}}`, h.count],
    [`_sum{${labels}}`, h.sum],
  ]);
  metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", [
    [
      `{block_size="${o.blockTokens}",enable_prefix_caching="${o.prefixCache ? "True" : "False"}",engine="0",num_gpu_blocks="${engine.pool.numBlocks}"}`,
      1,
    ],
  ]);
  return `${lines.join("\n")}\n`;
}

function formatValue(value: number): string {
  return Number.isInteger(value) ? value.toFixed(1) : String(value);
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}
