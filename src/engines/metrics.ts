/**
 * Engine /metrics: a Prometheus text parser and the catalogue of names each engine family
 * exposes (per ../shared/REFERENCE.md; names drift between versions, so every reader
 * reports which names it found and which it did not, instead of guessing).
 */

export interface Sample {
  labels: Record<string, string>;
  value: number;
}

/** Parse Prometheus text exposition: metric name → samples (comments and timestamps ignored). */
export function parsePrometheus(text: string): Map<string, Sample[]> {
  const out = new Map<string, Sample[]>();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const value = parseValue(m[4]!);
    if (value === undefined) continue;
    const labels: Record<string, string> = {};
    if (m[3]) {
      for (const lm of m[3].matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]!] = lm[2]!.replace(/\\(.)/g, "$1");
    }
    let samples = out.get(m[1]!);
    if (!samples) out.set(m[1]!, (samples = []));
    samples.push({ labels, value });
  }
  return out;
}

function parseValue(text: string): number | undefined {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  const v = Number(text);
  return Number.isNaN(v) && text !== "NaN" ? undefined : v;
}

/**
 * Sum over every label set (vLLM data-parallel engines report one series each). NaN and ±Inf
 * are missing values: the text format allows them (a client library writes a gauge set to
 * one as such), and a sum or a load computed with one is not a number any more.
 */
export function total(metrics: Map<string, Sample[]>, name: string): number | undefined {
  const samples = metrics.get(name)?.filter((s) => Number.isFinite(s.value));
  return samples && samples.length > 0 ? samples.reduce((sum, s) => sum + s.value, 0) : undefined;
}

export type EngineFamily = "vllm" | "sglang" | "llamacpp";
export type Signal =
  | "running"
  | "waiting"
  | "kv_usage"
  | "prefix_queries"
  | "prefix_hits"
  | "cache_hit_rate"
  | "prompt_tokens"
  | "generation_tokens"
  | "preemptions"
  | "kv_capacity"
  | "ttft";

/** Known names per family and signal, newest first. A signal missing from a family has no entry. */
export const ENGINE_METRICS: Record<EngineFamily, Partial<Record<Signal, string[]>>> = {
  vllm: {
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
  sglang: {
    running: ["sglang:num_running_reqs"],
    waiting: ["sglang:num_queue_reqs"],
    kv_usage: ["sglang:token_usage"],
    cache_hit_rate: ["sglang:cache_hit_rate"],
    kv_capacity: ["sglang:max_total_num_tokens"],
    prompt_tokens: ["sglang:prompt_tokens_total"],
    ttft: ["sglang:time_to_first_token_seconds_count"],
  },
  llamacpp: {
    running: ["llamacpp:requests_processing"],
    waiting: ["llamacpp:requests_deferred"],
    prompt_tokens: ["llamacpp:prompt_tokens_total"],
    kv_capacity: ["llamacpp:n_tokens_max"],
  },
};

export interface EngineReading {
  family?: EngineFamily;
  /** Signal → value, for the signals whose name was found. */
  values: Partial<Record<Signal, number>>;
  /** Signal → the name that was found. */
  found: Partial<Record<Signal, string>>;
  /** Signals this family should have whose names were not on the endpoint. */
  missing: Signal[];
}

/** Which family the endpoint belongs to (by metric prefix), and its signals (all, or only `wanted`). */
export function readEngine(metrics: Map<string, Sample[]>, wanted?: readonly Signal[]): EngineReading {
  const names = [...metrics.keys()];
  const family = (["vllm", "sglang", "llamacpp"] as const).find((f) => names.some((n) => n.startsWith(`${f}:`)));
  const reading: EngineReading = { values: {}, found: {}, missing: [] };
  if (!family) return reading;
  reading.family = family;
  for (const [signal, candidates] of Object.entries(ENGINE_METRICS[family]) as [Signal, string[]][]) {
    if (wanted && !wanted.includes(signal)) continue;
    const name = candidates.find((n) => metrics.has(n));
    if (name === undefined) {
      reading.missing.push(signal);
      continue;
    }
    reading.found[signal] = name;
    // Found but not a number (NaN, ±Inf): no value, as if the engine had not said.
    const sum = total(metrics, name);
    if (sum === undefined) continue;
    const series = metrics.get(name)!.filter((s) => Number.isFinite(s.value)).length;
    // Ratios are averaged over data-parallel engines; counts and gauges of requests add up.
    reading.values[signal] = signal === "kv_usage" || signal === "cache_hit_rate" ? sum / series : sum;
  }
  return reading;
}
