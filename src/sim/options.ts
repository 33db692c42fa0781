/**
 * Sim options and the calibrated profiles.
 *
 * Every duration the engine produces is "model time" at full scale, multiplied by
 * `timeScale` before it becomes a real delay, so ratios survive scaling. The `3090` profile
 * is calibrated to the seed measurements (see the README's sim section for the arithmetic).
 */
import { LlmrouteError } from "../errors.ts";
import { isTemplateName, TEMPLATES, type TemplateName } from "./chat-templates.ts";
import { DEFAULT_ENGINE, ENGINE_PROFILES, isEngineProfileName, type EngineProfileName } from "./profiles/index.ts";

/** The engine's knobs (camelCase here; kebab-case on the CLI; snake_case in /sim/state). */
export interface EngineOptions {
  /** KV pool size in tokens (vLLM's "GPU KV cache size"). Blocks = floor(kvTokens / blockTokens). */
  kvTokens: number;
  /** Tokens per KV block; only full blocks are cached (vLLM default 16). */
  blockTokens: number;
  /** Prefill throughput in tokens/s of the whole card, shared by every sequence prefilling at once. */
  prefillTps: number;
  /** Cost of one cached prompt token relative to an uncached one (attention over the cached context). */
  cachedTokenCost: number;
  /** Decode speed of one sequence alone, tokens/s. */
  decodeTps: number;
  /** Per extra running sequence, decode slows by this fraction: rate = decodeTps / (1 + s·(running − 1)). */
  decodeBatchSlowdown: number;
  /** Most sequences running at once (vLLM --max-num-seqs); the rest wait. */
  maxSeqs: number;
  /** Longest prompt + completion in tokens; 0 = the KV pool's capacity. Never above the pool. */
  maxModelLen: number;
  /** Characters per token of the deterministic tokenizer stand-in. */
  charsPerToken: number;
  /** Tokens generated when a request gives no max_tokens (finish_reason "stop"). */
  defaultMaxTokens: number;
  /** Multiplies every model-time duration (0.01 = 100× faster than the modelled card). */
  timeScale: number;
  /** false = nothing is ever reused (vLLM --no-enable-prefix-caching). */
  prefixCache: boolean;
  /** Real milliseconds: the smallest gap between two decode wake-ups (coalesces token events). */
  minTickMs: number;
}

/** Initial fault settings (all optional at runtime too, via POST /sim/faults). */
export interface FaultOptions {
  /** Fail the next N generation requests with `failStatus`. */
  failNext: number;
  /** Status used by `failNext` (default 503). */
  failStatus: number;
  /** Real (unscaled) ms to wait before the first byte of each generation response. */
  stallMs: number;
  /** How many generation requests `stallMs` applies to; -1 = every one until cleared. */
  stallNext: number;
  /** Destroy the connection after K SSE events of a streaming response; -1 = off. */
  closeAfterChunks: number;
  /** How many streaming requests `closeAfterChunks` applies to; -1 = every one until cleared. */
  closeNext: number;
  /** Real ms during which /health and the API answer 503 "loading" (from start, or from the POST). */
  startupDelayMs: number;
}

export interface SimOptions extends EngineOptions, FaultOptions {
  /** Replica name, shown in /sim/state, the readiness line and `x-sim-replica`. */
  name: string;
  /** The one served model id. */
  model: string;
  /** Profile whose values fill every option not given explicitly. */
  profile: ProfileName;
  /** Which engine the replica imitates: usage fields, stream chunks, metrics, capacity and restart signals. */
  engine: EngineProfileName;
  /** How chat histories are rendered (ChatML; or a template under which continuations stop being prefixes). */
  template: TemplateName;
  /** Stored Responses API conversations kept per replica (oldest dropped first). */
  responsesStoreMax: number;
  /** Log one line per request to `log`. */
  verbose: boolean;
}

export type ProfileName = "3090" | "tiny";

/**
 * `3090`: one RTX 3090-class card as measured in the seed: 90k tokens cold in 22.3 s
 * (→ ~4,000 prefill tokens/s), 1.4 s warm, 122,636 KV tokens. `tiny`: a small, fast card for
 * tests — a 4k-token pool that is easy to overflow, prefill and decode fast enough that
 * tests stay quick at `timeScale` 1.
 */
export const PROFILES: Record<ProfileName, Omit<EngineOptions, "timeScale" | "prefixCache" | "minTickMs">> = {
  "3090": {
    kvTokens: 122_636,
    blockTokens: 16,
    prefillTps: 4_000,
    cachedTokenCost: 0.05,
    decodeTps: 40,
    decodeBatchSlowdown: 0.03,
    maxSeqs: 64,
    maxModelLen: 0,
    charsPerToken: 4,
    defaultMaxTokens: 16,
  },
  tiny: {
    kvTokens: 4_096,
    blockTokens: 16,
    prefillTps: 50_000,
    cachedTokenCost: 0.05,
    decodeTps: 1_000,
    decodeBatchSlowdown: 0.03,
    maxSeqs: 16,
    maxModelLen: 0,
    charsPerToken: 4,
    defaultMaxTokens: 8,
  },
};

export const DEFAULT_PROFILE: ProfileName = "3090";

const BASE: Omit<SimOptions, keyof (typeof PROFILES)["3090"] | "profile"> = {
  name: "gpu0",
  model: "sim-model",
  engine: DEFAULT_ENGINE,
  template: "chatml",
  timeScale: 1,
  prefixCache: true,
  minTickMs: 2,
  responsesStoreMax: 10_000,
  verbose: false,
  failNext: 0,
  failStatus: 503,
  stallMs: 0,
  stallNext: -1,
  closeAfterChunks: -1,
  closeNext: 1,
  startupDelayMs: 0,
};

/** Profile values, then explicit options (undefined = not given), validated. */
export function resolveSimOptions(input: Partial<SimOptions> = {}): SimOptions {
  const profile = input.profile ?? DEFAULT_PROFILE;
  if (!(profile in PROFILES)) {
    throw new LlmrouteError("usage", `sim: unknown profile ${JSON.stringify(profile)}; known: ${Object.keys(PROFILES).join(", ")}`);
  }
  const given = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<SimOptions>;
  const options: SimOptions = { ...BASE, ...PROFILES[profile], ...given, profile };
  const problems = validate(options);
  if (problems.length > 0) throw new LlmrouteError("usage", `sim: ${problems.join("; ")}`);
  const capacity = Math.floor(options.kvTokens / options.blockTokens) * options.blockTokens;
  options.maxModelLen = options.maxModelLen === 0 ? capacity : options.maxModelLen;
  if (options.maxModelLen > capacity) {
    // vLLM refuses to start in this case; so do we, naming both numbers.
    throw new LlmrouteError(
      "usage",
      `sim: max_model_len ${options.maxModelLen} exceeds the KV pool (${capacity} tokens in ${options.blockTokens}-token blocks)`,
    );
  }
  return options;
}

function validate(o: SimOptions): string[] {
  const problems: string[] = [];
  const need = (ok: boolean, key: string, value: unknown, reason: string) => {
    if (!ok) problems.push(`${key} = ${JSON.stringify(value)}: ${reason}`);
  };
  const positiveInt = (key: keyof SimOptions) =>
    need(Number.isInteger(o[key]) && (o[key] as number) > 0, kebab(key), o[key], "must be a positive integer");
  const positive = (key: keyof SimOptions) =>
    need(Number.isFinite(o[key]) && (o[key] as number) > 0, kebab(key), o[key], "must be a positive number");
  const nonNegative = (key: keyof SimOptions) =>
    need(Number.isFinite(o[key]) && (o[key] as number) >= 0, kebab(key), o[key], "must be >= 0");
  const countOrAll = (key: keyof SimOptions) =>
    need(Number.isInteger(o[key]) && (o[key] as number) >= -1, kebab(key), o[key], "must be an integer >= -1 (-1 = all)");
  positiveInt("kvTokens");
  positiveInt("blockTokens");
  positive("prefillTps");
  nonNegative("cachedTokenCost");
  positive("decodeTps");
  nonNegative("decodeBatchSlowdown");
  positiveInt("maxSeqs");
  need(Number.isInteger(o.maxModelLen) && o.maxModelLen >= 0, "max-model-len", o.maxModelLen, "must be an integer >= 0 (0 = KV capacity)");
  positiveInt("charsPerToken");
  positiveInt("defaultMaxTokens");
  positive("timeScale");
  nonNegative("minTickMs");
  positiveInt("responsesStoreMax");
  need(Number.isInteger(o.failNext) && o.failNext >= 0, "fail-next", o.failNext, "must be an integer >= 0");
  need(Number.isInteger(o.failStatus) && o.failStatus >= 400 && o.failStatus <= 599, "fail-status", o.failStatus, "must be an HTTP status 400..599");
  nonNegative("stallMs");
  countOrAll("stallNext");
  countOrAll("closeAfterChunks");
  countOrAll("closeNext");
  nonNegative("startupDelayMs");
  need(typeof o.name === "string" && /^[\w.-]+$/.test(o.name), "name", o.name, "must be letters, digits, '.', '_' or '-'");
  need(isEngineProfileName(o.engine), "engine", o.engine, `must be one of ${ENGINE_PROFILES.join(", ")}`);
  need(isTemplateName(o.template), "template", o.template, `must be one of ${TEMPLATES.join(", ")}`);
  need(typeof o.model === "string" && o.model.length > 0, "model", o.model, "must be a non-empty string");
  need(Math.floor(o.kvTokens / o.blockTokens) >= 1, "kv-tokens", o.kvTokens, "must hold at least one block");
  return problems;
}

function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
