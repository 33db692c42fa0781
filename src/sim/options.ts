/**
 * Sim options and the calibrated profiles.
 *
 * Every duration the engine produces is "model time" at full scale, multiplied by
 * `timeScale` before it becomes a real delay, so ratios survive scaling. The card profiles'
 * figures and their sources: docs/sim.md#calibration-the-3090-profile (`3090`) and
 * docs/traces.md#card-profiles (the H100s).
 */
import { LlmrouteError } from "../errors.ts";
import { isTemplateName, TEMPLATES, type TemplateName } from "./chat-templates.ts";
import { DEFAULT_ENGINE, ENGINE_PROFILES, engineProfile, isEngineProfileName, type EngineProfileName } from "./profiles/index.ts";

export type PrefillOrder = "arrival" | "shared";

/** The engine's knobs (camelCase here; kebab-case on the CLI; snake_case in /sim/state). */
export interface EngineOptions {
  /** KV pool size in tokens (vLLM's "GPU KV cache size"). Blocks = floor(kvTokens / blockTokens). */
  kvTokens: number;
  /** Tokens per KV block; only full blocks are cached (vLLM default 16). */
  blockTokens: number;
  /** Prefill throughput in tokens/s of the whole card. */
  prefillTps: number;
  /**
   * How sequences prefilling at once use it: `arrival` — one at a time at the full rate, in
   * the order they were admitted (vLLM's and SGLang's chunked prefill: each step's token
   * budget goes to the oldest running request's chunk first, see profiles/vllm.ts and
   * sglang.ts); `shared` — an equal share each (llama.cpp's and Ollama's slots). The
   * engine profile sets it.
   */
  prefillOrder: PrefillOrder;
  /**
   * In `arrival` order, the prompt tokens one engine step computes (vLLM
   * --max-num-batched-tokens, 2048 on a card below H100 class for the API server:
   * vllm/engine/arg_utils.py `_set_default_args`; SGLang --chunked-prefill-size): a decoding
   * sequence waits for one such chunk per token while prefills run.
   */
  prefillChunkTokens: number;
  /**
   * In `arrival` order, what decoding sequences do while a prefill runs: `chunk` — one token
   * per step, each step also computing a `prefillChunkTokens` chunk (vLLM schedules decodes
   * and prefill chunks in one step); `none` — nothing until no prefill is left (SGLang's
   * scheduler.py get_next_batch_to_run: "Run prefill first if possible", decode only when no
   * prefill batch can be formed, unless --enable-mixed-chunk). The engine profile sets it.
   */
  decodeWhilePrefilling: "chunk" | "none";
  /**
   * In `arrival` order, when a waiting request looks its prefix up and takes its blocks:
   * `scheduled` — only once no earlier prefill remains, so one queued behind the prefill of
   * its prefix finds it (vLLM); `batch` — once the earlier prefills have at most one
   * `prefillChunkTokens` chunk left, finding what was computed by then (SGLang, whose overlap
   * scheduler forms the next batch before the last one's tokens are in its radix tree: one
   * queued a batch or more behind the prefill of its prefix finds it, one in the very next
   * batch misses that prefill's last chunk); `arrival` — as soon as it fits, finding what was
   * computed by then. The engine profile sets it (engine.ts `admit` has the sources).
   */
  prefixLookup: "scheduled" | "batch" | "arrival";
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

/**
 * llama.cpp `llama-server`'s KV knobs, read by the slot engine (slots.ts) only, which runs
 * the llamacpp and ollama profiles. Names and defaults are llama-server's own
 * (common/arg.cpp, common/common.h at commit 80fb11a); a profile that starts llama-server
 * with flags of its own overrides them (`slotDefaults`: Ollama's -np and -b,
 * profiles/ollama.ts).
 */
export interface LlamaCppOptions {
  /**
   * `--parallel`: server slots. -1 = auto, llama-server's default (common/arg.cpp
   * common_params_parser_init sets n_parallel = -1 for the server), which
   * tools/server/server.cpp turns into 4 slots with a unified KV cache.
   */
  parallel: number;
  /**
   * `--kv-unified`: one KV buffer of n_ctx shared by every slot, each slot up to all of it
   * (src/llama-context.cpp: n_ctx_seq = n_ctx); off = n_ctx / parallel tokens per slot.
   * Default off, as in common.h; `parallel` -1 turns it on.
   */
  kvUnified: boolean;
  /** `--cache-ram` MiB: the host-RAM prompt cache (common.h default 8192; -1 = no byte limit; 0 = off). */
  cacheRam: number;
  /**
   * Bytes one token's saved state takes in that cache (llama_state_seq_get_size: the K and
   * V rows of every layer). Default 57,344 = Qwen2.5-7B's f16 KV (28 layers × K+V × 4 KV
   * heads × 128 dims × 2 bytes): the sim's prompts are Qwen2.5's ChatML, and a 7B f16 model
   * on a 24 GB card leaves about the 3090 profile's 122,636 KV tokens. The tiny test model
   * of ../shared/engines (4 layers × K+V × 256 × 2 bytes) takes 4,096.
   */
  cacheRamBytesPerToken: number;
  /**
   * GB/s of a prompt-cache save or restore (llama_state_seq_get_data / set_data copy the
   * slot's KV between the card and host RAM). Default 10: a PCIe 4.0 ×16 copy to pageable
   * host memory, an assumption (the CPU-only test model copies far slower:
   * docs/sim-engines.md#calibration-against-the-real-llama-server).
   */
  cacheRamGbps: number;
  /** `--slot-prompt-similarity` (default 0.10; 0 = choose slots by LRU only). */
  slotPromptSimilarity: number;
  /** `--cache-idle-slots` (default on; needs the RAM cache): idle slots are saved to it when a task starts. */
  cacheIdleSlots: boolean;
  /**
   * `--batch-size` (n_batch, common.h default 2048): prompt tokens one decode step takes,
   * across slots. A request that arrives during a step joins at the next one.
   */
  batchSize: number;
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

export interface SimOptions extends EngineOptions, FaultOptions, LlamaCppOptions {
  /** Replica name, shown in /sim/state, the readiness line and `x-sim-replica`. */
  name: string;
  /** The one served model id. */
  model: string;
  /** Profile whose values fill every option not given explicitly. */
  profile: ProfileName;
  /**
   * Which engine the replica imitates: usage fields, stream chunks, metrics, capacity and
   * restart signals, and its KV model (llamacpp and ollama run on llama-server's slots,
   * slots.ts; the others on one shared block pool, engine.ts).
   */
  engine: EngineProfileName;
  /** How chat histories are rendered (ChatML; or a template under which continuations stop being prefixes). */
  template: TemplateName;
  /** Stored Responses API conversations kept per replica (oldest dropped first). */
  responsesStoreMax: number;
  /** Log one line per request to `log`. */
  verbose: boolean;
  /**
   * ollama: seconds (model time) its runner stays loaded after its last request ended
   * (OLLAMA_KEEP_ALIVE, 5 min by default: envconfig/config.go KeepAlive); -1 = for ever.
   * Unloaded, the runner's KV and RAM prompt cache are gone (residency.ts).
   */
  keepAlive: number;
}

export type ProfileName = "3090" | "tiny" | "h100-8b" | "4xh100-70b";

/** A card profile: the engine knobs a card and model decide (the engine profile decides the rest). */
export type CardProfile = Omit<EngineOptions, "timeScale" | "prefixCache" | "minTickMs" | "prefillOrder" | "prefillChunkTokens" | "decodeWhilePrefilling" | "prefixLookup"> & {
  /** The engine's step budget on this card, when its default differs from the engine profile's (which is set for smaller cards). */
  prefillChunkTokens?: number;
};

/**
 * `3090`: one RTX 3090-class card, calibrated to the measurements the project started from
 * (docs/sim.md#calibration-the-3090-profile). `tiny`: a small, fast card for tests — a
 * 4k-token pool that is easy to overflow, prefill and decode fast enough that tests stay
 * quick at `timeScale` 1.
 *
 * `h100-8b` and `4xh100-70b`: today's deployments, for replaying production traces against
 * a realistic KV. Each figure's source (the models' config.json, BLIS's fit of vLLM on H100,
 * vLLM's and SGLang's defaults for a card of 70 GiB or more) and arithmetic:
 * docs/traces.md#card-profiles.
 */
export const PROFILES: Record<ProfileName, CardProfile> = {
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
  // One H100 80GB SXM, Llama-3.1-8B-Instruct bf16, vLLM defaults (docs/traces.md#card-profiles).
  "h100-8b": {
    kvTokens: 467_280,
    blockTokens: 16,
    prefillTps: 50_000,
    cachedTokenCost: 0.05,
    decodeTps: 170,
    // Each running sequence's KV is read every step.
    decodeBatchSlowdown: 0.08,
    maxSeqs: 1_024,
    // vLLM takes the model's context (config.json max_position_embeddings).
    maxModelLen: 131_072,
    charsPerToken: 4,
    defaultMaxTokens: 16,
    prefillChunkTokens: 8_192,
  },
  // Four H100 80GB SXM, Llama-3.1-70B-Instruct bf16 at tensor parallel 4, vLLM defaults
  // (docs/traces.md#card-profiles).
  "4xh100-70b": {
    kvTokens: 468_000,
    blockTokens: 16,
    prefillTps: 11_500,
    cachedTokenCost: 0.05,
    decodeTps: 80,
    decodeBatchSlowdown: 0.03,
    maxSeqs: 1_024,
    maxModelLen: 131_072,
    charsPerToken: 4,
    defaultMaxTokens: 16,
    prefillChunkTokens: 8_192,
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

const BASE: Omit<SimOptions, Exclude<keyof CardProfile, "prefillChunkTokens"> | "profile"> = {
  name: "gpu0",
  model: "sim-model",
  engine: DEFAULT_ENGINE,
  template: "chatml",
  // The engine profile's order wins (resolveSimOptions); this is for an unknown engine name.
  prefillOrder: "shared",
  prefillChunkTokens: 2048,
  decodeWhilePrefilling: "chunk",
  prefixLookup: "arrival",
  parallel: -1,
  kvUnified: false,
  cacheRam: 8192,
  cacheRamBytesPerToken: 57_344,
  cacheRamGbps: 10,
  slotPromptSimilarity: 0.1,
  cacheIdleSlots: true,
  batchSize: 2048,
  timeScale: 1,
  prefixCache: true,
  minTickMs: 2,
  responsesStoreMax: 10_000,
  verbose: false,
  keepAlive: 300,
  failNext: 0,
  failStatus: 503,
  stallMs: 0,
  stallNext: -1,
  closeAfterChunks: -1,
  closeNext: 1,
  startupDelayMs: 0,
};

/**
 * Profile values, then the engine's own defaults for its slots (an engine on llama-server's
 * slots, profiles/*.ts `slotDefaults`), then explicit options (undefined = not given), validated.
 */
export function resolveSimOptions(input: Partial<SimOptions> = {}): SimOptions {
  const profile = input.profile ?? DEFAULT_PROFILE;
  if (!(profile in PROFILES)) {
    throw new LlmrouteError("usage", `sim: unknown profile ${JSON.stringify(profile)}; known: ${Object.keys(PROFILES).join(", ")}`);
  }
  const given = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<SimOptions>;
  const engine = given.engine ?? BASE.engine;
  const family = isEngineProfileName(engine) ? engineProfile(engine) : undefined;
  const slotDefaults = family?.slotDefaults;
  const options: SimOptions = {
    ...BASE,
    ...PROFILES[profile],
    prefillOrder: family?.prefillOrder ?? BASE.prefillOrder,
    decodeWhilePrefilling: family?.decodeWhilePrefilling ?? BASE.decodeWhilePrefilling,
    prefixLookup: family?.prefixLookup ?? BASE.prefixLookup,
    prefillChunkTokens: PROFILES[profile].prefillChunkTokens ?? family?.prefillChunkTokens ?? BASE.prefillChunkTokens,
    ...slotDefaults,
    ...given,
    profile,
  };
  const problems = validate(options);
  if (problems.length > 0) throw new LlmrouteError("usage", `sim: ${problems.join("; ")}`);
  if (slotDefaults) return resolveSlots(options);
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

/**
 * llama-server's slots: `parallel` -1 becomes 4 slots with a unified KV
 * (tools/server/server.cpp main), and a request may use at most one slot's context.
 */
function resolveSlots(options: SimOptions): SimOptions {
  if (options.parallel === -1) {
    options.parallel = 4;
    options.kvUnified = true;
  }
  const perSlot = slotContext(options);
  options.maxModelLen = options.maxModelLen === 0 ? perSlot : options.maxModelLen;
  if (options.maxModelLen > perSlot) {
    throw new LlmrouteError("usage", `sim: max_model_len ${options.maxModelLen} exceeds llama.cpp's context per slot (${perSlot} tokens)`);
  }
  return options;
}

/**
 * Tokens of KV one llama.cpp slot holds at most (llama_n_ctx_seq, src/llama-context.cpp
 * llama_context::llama_context): n_ctx is padded to 256; unified, every slot may use all of
 * it; otherwise n_ctx / parallel, padded to 256. (n_ctx_slot() in server-context.cpp also
 * caps it at the model's training context, which the sim does not have.)
 */
export function slotContext(o: Pick<LlamaCppOptions, "parallel" | "kvUnified"> & Pick<EngineOptions, "kvTokens">): number {
  const pad = (n: number) => Math.ceil(n / 256) * 256;
  const nCtx = pad(o.kvTokens);
  return o.kvUnified ? nCtx : pad(Math.floor(nCtx / o.parallel));
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
  need(o.prefillOrder === "arrival" || o.prefillOrder === "shared", "prefill-order", o.prefillOrder, "must be arrival or shared");
  positiveInt("prefillChunkTokens");
  need(o.decodeWhilePrefilling === "chunk" || o.decodeWhilePrefilling === "none", "decode-while-prefilling", o.decodeWhilePrefilling, "must be chunk or none");
  need(o.prefixLookup === "scheduled" || o.prefixLookup === "batch" || o.prefixLookup === "arrival", "prefix-lookup", o.prefixLookup, "must be scheduled, batch or arrival");
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
  need(Number.isFinite(o.keepAlive) && (o.keepAlive >= 0 || o.keepAlive === -1), "keep-alive", o.keepAlive, "must be seconds >= 0, or -1 (for ever)");
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
  need(Number.isInteger(o.parallel) && (o.parallel >= 1 || o.parallel === -1), "parallel", o.parallel, "must be a positive integer or -1 (auto)");
  need(Number.isInteger(o.cacheRam) && o.cacheRam >= -1, "cache-ram", o.cacheRam, "must be an integer MiB >= -1 (-1 = no limit, 0 = off)");
  positiveInt("cacheRamBytesPerToken");
  positiveInt("batchSize");
  positive("cacheRamGbps");
  need(Number.isFinite(o.slotPromptSimilarity) && o.slotPromptSimilarity >= 0 && o.slotPromptSimilarity <= 1, "slot-prompt-similarity", o.slotPromptSimilarity, "must be in 0..1");
  return problems;
}

function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
