/**
 * What the router knows of an engine family (DESIGN decision 11): one profile per family,
 * each fact beside the engine source file or the real run it comes from. The proxy, the
 * fleet, the probe and the feedback code ask a profile instead of naming an engine
 * themselves. The sim's imitation of these engines is written apart (src/sim) and never
 * imports this room: the real llama-server in `npm run test:system` referees the two.
 */
import type { Sample } from "./metrics.ts";

export const ENGINE_FAMILIES = ["vllm", "sglang", "llamacpp", "ollama"] as const;
export type EngineFamily = (typeof ENGINE_FAMILIES)[number];

/** A /metrics signal the router or the probe reads. */
export type Signal =
  | "running"
  | "waiting"
  | "kv_usage"
  /** Prompt tokens looked up in the prefix cache (a counter, in tokens). */
  | "prefix_queries"
  /** Prompt tokens found there (a counter, in tokens). */
  | "prefix_hits"
  /** Prompt tokens served from the cache, for engines that count them apart from the prompt tokens. */
  | "cached_tokens"
  /** A gauge ratio some engines compute themselves (SGLang: the last prefill batch only). */
  | "cache_hit_rate"
  | "prompt_tokens"
  /** Seconds spent prefilling (a counter): with prompt_tokens, the measured prefill rate. */
  | "prompt_seconds"
  | "generation_tokens"
  | "preemptions"
  | "kv_capacity"
  | "ttft";

/** The engine's own view of its prefix cache over a window: tokens looked up and tokens found. */
export interface CacheCounters {
  queries: number;
  hits: number;
  /** The names read, for reports. */
  names: string[];
}

/** What an engine says about its KV capacity. */
export interface Capacity {
  /** Tokens of KV the engine can hold for prefixes and running sequences (all slots). */
  kvTokens: number;
  /** llama.cpp: the KV is split into this many slots, one sequence each. */
  slots?: number;
  /** The engine caches whole blocks of this many tokens (1 = token-granular). */
  blockTokens?: number;
  /** Where it was read: "vllm:cache_config_info", "/props", … */
  source: string;
}

/** How an engine reports cached prompt tokens on each response. */
export interface UsageRules {
  /**
   * `always`: every response of a cache-reporting endpoint carries it. `flag`: only when the
   * server was started with `flag` (the field is then the evidence the flag is on). `never`.
   */
  cached: "always" | "flag" | "never";
  /** The server flag that turns per-request cached tokens on (for `cached: "flag"`). */
  flag?: string;
  /**
   * Once a replica has shown the field, its absence means 0 (vLLM before it reported zeros,
   * SGLang always omit a zero). Otherwise absent is unknown.
   */
  zeroOmitted: boolean;
  /** The Responses API's `input_tokens_details.cached_tokens` is a constant the engine cannot know (Ollama). */
  responsesConstant: boolean;
}

/** How an engine streams usage. */
export interface StreamRules {
  /**
   * Does a stream that did not ask for usage still tell the cached tokens (llama.cpp's
   * `timings` on the last chunk; its completions put `usage` there unasked)? Then the router
   * adds nothing to the request and strips nothing from the stream.
   */
  usageUnasked(endpoint: "chat" | "completions"): boolean;
  /**
   * Do these `stream_options`, as the client sent them, ask the engine for usage? Absent:
   * OpenAI's rule, only `include_usage: true`. A client that asked gets its stream as it is.
   */
  usageAsked?(options: unknown): boolean;
}

export interface EngineProfile {
  family: EngineFamily;
  label: string;
  /** `/v1/models` cards' `owned_by` values this family writes. */
  ownedBy(value: string): boolean;
  /** Metric-name prefix, when the family has /metrics. */
  metricPrefix?: string;
  /** Names per signal, newest spelling first. */
  metrics: Partial<Record<Signal, readonly string[]>>;
  /** The engine's cache counters at one scrape (a delta of two is a window's verdict). */
  cacheCounters(metrics: Map<string, Sample[]>): CacheCounters | undefined;
  /** KV capacity as published on /metrics, if this family publishes it there. */
  capacityFromMetrics?(metrics: Map<string, Sample[]>): Capacity | undefined;
  /**
   * The samples of metric `name` that count, each figure once, for a family that publishes
   * the same figure under several label sets (SGLang: a queue's total beside its per-priority
   * split, and one series per tensor-parallel rank). Absent: every label set is a figure of
   * its own (vLLM's data-parallel engines, one series each), and they add up.
   */
  distinct?(name: string, samples: readonly Sample[]): Sample[];
  /**
   * What the engine says on /metrics when its prefix cache is off (no request can hit it,
   * whatever the router does): the evidence and the setting that turns it on. Undefined: on,
   * or not said.
   */
  prefixCacheOff?(metrics: Map<string, Sample[]>): PrefixCacheOff | undefined;
  /** The metric whose change means a new process (its cache is gone). */
  startTimeMetric?: string;
  /** The response header whose change means a new process. */
  startTimeHeader?: string;
  usage: UsageRules;
  stream: StreamRules;
  /** A single-model server that answers any `model` value (llama.cpp). */
  anyModelName: boolean;
  /** Does a request naming `requested` reach the model the engine lists as `listed`? (Default: the same name.) */
  sameModel?(requested: string, listed: string): boolean;
  /**
   * The engine keeps prompts evicted from its KV in host RAM and restores them (llama-server's
   * --cache-ram, on by default): the KV it publishes is no bound on what it holds.
   */
  ramPromptCache?: boolean;
  /** Tokens per cached block when the engine does not publish it. */
  blockTokens: number;
  /**
   * How many requests the engine prefills at once, sharing its compute (the router prices a
   * replica's queue with it: src/route/policy.ts prefillAhead).
   */
  prefillConcurrency(capacity: Capacity | undefined): number;
  /**
   * How many requests the engine runs at once when it has a fixed number of slots: one more
   * waits in its queue until a running one ends, its whole generation (src/fleet/slot-queue.ts).
   * Absent for continuous batching (vLLM, SGLang), whose hundreds of sequences decode together.
   */
  servingSlots?(capacity: Capacity | undefined): number | undefined;
  /**
   * The engine looks a waiting request's prefix up in its cache when it starts the request's
   * prefill, in arrival order, not when the request arrives: one queued behind the prefill
   * of its prefix finds that prefix cached (the router does not add that prefix to the
   * replica's queue).
   */
  matchedWhenScheduled?: boolean;
  /** The flag that turns /metrics on, when it is off by default. */
  metricsFlag?: string;
  /**
   * The endpoint that says the version (and what else the engine tells of itself): its path,
   * the path older versions answer on when the first says 404 (`oldPath`), and how to read it.
   */
  version?: { path: string; oldPath?: string; read(body: unknown): string | undefined };
  /**
   * Where the engine answers a liveness check, when it has no `/health`: a replica without its
   * own `health_path` whose `/health` answers 404 is checked here once the engine is recognised.
   */
  healthPath?: string;
  /**
   * Is this error (an error body, or a stream's error event, parsed) the engine saying its KV
   * could not hold the request beside the ones running, before it produced anything? Another
   * replica, or this one later, can take it: the proxy fails over as for a 503, without
   * counting it against the replica's health.
   */
  kvFull?(error: unknown): boolean;
  /**
   * Is this whole error body (parsed) one the engine sends after it computed the prompt, which
   * stays in its cache? The router then remembers the prompt there, as for an answer: a client
   * that sends it again finds it cached on that replica.
   */
  keptPrompt?(error: unknown): boolean;
  /**
   * Is this 503 body (parsed) the engine turning the request away for load — its queue is
   * full, or its admission control says so — before computing anything? Another replica can
   * take it, and it is no verdict on the replica's health.
   */
  busy?(error: unknown): boolean;
  /**
   * Where the engine lists the models it holds in memory, and how to read it (Ollama's
   * /api/ps). A model that leaves the list was unloaded: its KV, and every prefix cached in
   * it, went with it. Asked at each passing health check.
   */
  resident?: { path: string; read(body: unknown): ResidentModel[] | undefined };
  /**
   * The engine cuts a prompt longer than its published context to fit instead of refusing it
   * (Ollama): what it does, and the setting that gives it more room. A cut prompt starts
   * differently every turn, so its cache is not reused.
   */
  cutsLongPrompts?: { how: string; fix: string };
}

/** An engine's own word that its prefix cache is off. */
export interface PrefixCacheOff {
  /** What it published, as a person reads it. */
  evidence: string;
  /** The setting that turns it on. */
  fix: string;
}

/** A model an engine holds in memory (Ollama /api/ps). */
export interface ResidentModel {
  name: string;
  /** Tokens of context each request may use (one slot's). */
  contextLength?: number;
  /** When the engine unloads it if no request comes first (Unix ms). */
  expiresAt?: number;
}

/** The message of an engine's error body: `error.message` (OpenAI's shape, llama.cpp's), or a bare `{"error": "…"}` (Ollama's native API). */
export function errorMessage(body: unknown): string | undefined {
  const error = body && typeof body === "object" ? (body as { error?: unknown }).error : undefined;
  if (typeof error === "string") return error;
  const message = error && typeof error === "object" ? (error as { message?: unknown }).message : undefined;
  return typeof message === "string" ? message : undefined;
}

/** The samples of `name` that count, each figure once (`EngineProfile.distinct`); empty when absent. */
export function samplesOf(metrics: Map<string, Sample[]>, name: string, profile?: Pick<EngineProfile, "distinct">): Sample[] {
  const samples = metrics.get(name) ?? [];
  return profile?.distinct && samples.length > 1 ? profile.distinct(name, samples) : samples;
}

/**
 * Sum of a counter or gauge over its label sets (vLLM's data-parallel engines report one
 * series each), each figure counted once for a family that repeats some (`profile.distinct`).
 */
export function sum(metrics: Map<string, Sample[]>, name: string, profile?: Pick<EngineProfile, "distinct">): number | undefined {
  const samples = samplesOf(metrics, name, profile);
  if (samples.length === 0) return undefined;
  let total = 0;
  for (const s of samples) total += s.value;
  return total;
}

/** The first name of `names` the scrape has. */
export function firstPresent(metrics: Map<string, Sample[]>, names: readonly string[] | undefined): string | undefined {
  return names?.find((n) => metrics.has(n));
}
