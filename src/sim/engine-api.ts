/**
 * The engine contract: everything the HTTP app (app.ts), the engine profiles' formats and
 * /metrics (profiles/*, metrics.ts), /sim/state and the tests read from a simulated engine.
 *
 * Two engines implement it, and app.ts picks one per `--engine` profile (the profile's
 * `slotDefaults`, profiles/types.ts):
 * - `SimEngine` (engine.ts): one paged KV pool shared by every sequence, with block-hash
 *   prefix caching, as vLLM and SGLang have;
 * - `SlotEngine` (slots.ts): llama-server's slots — per-slot KV of n_ctx / n_parallel
 *   tokens (or one unified n_ctx), a slot chosen by prompt similarity, token-granular reuse,
 *   a host-RAM prompt cache — for the llamacpp and ollama profiles. It also provides
 *   `slots()` and `perSlotContext`.
 * Both run on one fluid time model (fluid.ts).
 *
 * Nothing outside the engine files knows which engine it holds. Whatever a profile needs
 * beyond this (llama.cpp `timings`, SGLang's last-batch hit rate) it derives from the
 * sequence events below, so a new engine owes only this surface. What an implementation
 * must do that the types cannot say:
 * - call `listener.onAdmit` once, at first admission, with `cachedTokens` and `prefixStop`
 *   final (the app holds a streamed response's headers until then), and count the stop in
 *   `stats.stop_<reason>_total`;
 * - decide `prefixStop` with a record of what it computed, cleared by `reset()`: block
 *   hashes for a block engine (computed-record.ts); slots.ts keeps its own record of
 *   prefixes, since its token-granular hits end mid-block;
 * - take a generated token's text from `SubmitInput.output` when given;
 * - observe TTFT into a histogram with the `TTFT_BUCKETS` bounds (every family reads its own
 *   buckets out of it);
 * - end every sequence through `onSequenceEnd` listeners with a full `SequenceResult`.
 *
 * Prefix-stop introspection (`PrefixStop`): at a sequence's first admission the engine says
 * why its cache hit ended where it did. The bench compares the router's index corrections
 * with this truth to count false ones, so it must be exact:
 * - `full`: every block the engine could reuse was hit (the hit is as long as it can be:
 *   all full blocks but the one holding the last prompt token, or caching is off);
 * - `evicted`: the first missing block had been computed on this replica since the last
 *   reset and has been evicted since;
 * - `new`: the first missing block was never computed here (a template break, another
 *   prompt, new content);
 * - `elsewhere` (slot engines only): the next token is still held on this replica, but not
 *   where the engine lets this request use it — another slot (busy, or idle below the
 *   similarity threshold), or a RAM-cache entry the restore rules pass over. Neither an
 *   eviction (the prefix is still here) nor `new` (it was computed here): a router that
 *   forgets the prefix on it is wrong, and one that expects a hit on it is too.
 *
 * A block engine reads "missing block", a slot engine "the token after the hit".
 */
import type { EngineOptions } from "./options.ts";
import type { Tokenizer } from "./tokenizer.ts";

export type FinishReason = "stop" | "length";
/**
 * Why a sequence ended: finished normally, its client went away, a fault closed it, a reset,
 * or (slot engine, unified KV) the KV pool overflowed under every running request (slots.ts
 * ensureRoom: llama.cpp's "Context size has been exceeded.").
 */
export type EndReason = FinishReason | "cancelled" | "fault" | "reset" | "overflow";
/** Why the prefix-cache hit stopped where it did (see the header). */
export type PrefixStop = "full" | "evicted" | "new" | "elsewhere";

export interface SequenceResult {
  /** The sequence's id (SimSequence.id). */
  id: number;
  reason: EndReason;
  /** The generated text. */
  text: string;
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens found in the prefix cache at first admission. */
  cachedTokens: number;
  /** Why the hit stopped there (undefined if the sequence was never admitted). */
  prefixStop: PrefixStop | undefined;
  /** See SimSequence.heldTokens. */
  heldTokens: number;
  /** See SimSequence.computedTokens. */
  computedTokens: number;
  /** Real ms from submit to the first token (undefined if none was produced). */
  ttftMs: number | undefined;
  /** The same in model time (what a full-scale card would show). */
  ttftModelMs: number | undefined;
  /** Real ms from submit to the end. */
  durationMs: number;
}

export type SequenceState = "waiting" | "prefill" | "decode" | "done";

/** One request inside an engine, as the app sees it. */
export interface SimSequence {
  readonly id: number;
  readonly prompt: string;
  readonly promptTokens: number;
  readonly state: SequenceState;
  /** Tokens generated so far. */
  readonly generated: number;
  /** Prompt tokens found cached at first admission (0 before it). */
  readonly cachedTokens: number;
  /** Set at first admission. */
  readonly prefixStop: PrefixStop | undefined;
  /**
   * How much of the prompt's prefix this replica held at first admission, wherever it was:
   * the hit, and beyond it, for `evicted`, the blocks computed here and evicted since, for
   * `elsewhere`, what another slot or the RAM cache held. So what placement could not have
   * recovered there is heldTokens − cachedTokens.
   */
  readonly heldTokens: number;
  /**
   * `elsewhere` only: how much of the prompt's prefix had been computed here since the reset,
   * when more than heldTokens — the rest of it was evicted since (a slot engine holds one
   * part of a prompt in a busy slot and has dropped its tail). 0 otherwise.
   */
  readonly computedTokens: number;
  readonly done: Promise<SequenceResult>;
}

export interface SequenceListener {
  /**
   * The sequence got its KV for the first time: `cachedTokens` and `prefixStop` are final.
   * Called once, synchronously, before its first token; do not block.
   */
  onAdmit?(seq: SimSequence): void;
  /** A token was produced (index 0 = the first token). Called synchronously; do not block. */
  onToken?(text: string, index: number, seq: SimSequence): void;
  /** Called once, after the last token. */
  onEnd?(result: SequenceResult): void;
}

export interface SubmitInput {
  prompt: string;
  maxTokens: number;
  finishReason: FinishReason;
  /** vLLM `cache_salt`: a separate family of cached prefixes. */
  salt?: string;
  /**
   * The text of generated token `index` (a reasoning reply's markup and words); each must be
   * exactly `options.charsPerToken` characters. Default: the tokenizer's seeded word.
   */
  output?: (index: number) => string;
  listener?: SequenceListener;
}

/** Counters, named as /sim/state reports them; zeroed by `reset()`. */
export interface EngineStats {
  requests_total: number;
  completed_total: number;
  cancelled_total: number;
  faulted_total: number;
  rejected_total: number;
  preemptions_total: number;
  prompt_tokens_total: number;
  generation_tokens_total: number;
  /** Tokens looked up in the prefix cache, at every admission (re-admissions after preemption too). */
  prefix_cache_queries_total: number;
  /** Tokens found there, at every admission. */
  prefix_cache_hits_total: number;
  /** Tokens found cached at first admission: the sum of what responses report. */
  cached_tokens_total: number;
  /** First admissions by why the hit stopped (see PrefixStop). */
  stop_full_total: number;
  stop_evicted_total: number;
  stop_new_total: number;
  stop_elsewhere_total: number;
}

export function zeroStats(): EngineStats {
  return {
    requests_total: 0,
    completed_total: 0,
    cancelled_total: 0,
    faulted_total: 0,
    rejected_total: 0,
    preemptions_total: 0,
    prompt_tokens_total: 0,
    generation_tokens_total: 0,
    prefix_cache_queries_total: 0,
    prefix_cache_hits_total: 0,
    cached_tokens_total: 0,
    stop_full_total: 0,
    stop_evicted_total: 0,
    stop_new_total: 0,
    stop_elsewhere_total: 0,
  };
}

/** The KV store right now, in blocks of `options.blockTokens` tokens. */
export interface KvSnapshot {
  totalBlocks: number;
  /** Blocks no sequence holds (they may still cache content, evictable). */
  freeBlocks: number;
  /** Blocks held by running sequences. */
  usedBlocks: number;
  /** Blocks holding reusable cached content (held or free). */
  cachedBlocks: number;
  /** Cached blocks dropped to make room, since the last reset. */
  evictedBlocksTotal: number;
  /** usedBlocks / totalBlocks (vLLM kv_cache_usage_perc, SGLang token_usage). */
  usage: number;
}

/** One llama.cpp slot as GET /slots shows it. */
export interface SlotInfo {
  id: number;
  n_ctx: number;
  is_processing: boolean;
}

/**
 * Bucket bounds of the TTFT histogram every engine keeps: the union of vLLM's
 * (vllm/v1/metrics/loggers.py, histogram_time_to_first_token) and SGLang's
 * (python/sglang/srt/metrics/collector.py, TokenizerMetricsCollector
 * bucket_time_to_first_token). Counts are cumulative, so each family's exposition reads its
 * own bounds out of this one histogram exactly.
 */
export const TTFT_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.2, 0.25, 0.4, 0.5, 0.6, 0.75, 0.8, 1.0, 2.0, 2.5, 4.0, 5.0, 6.0, 7.5, 8.0, 10.0,
  20.0, 40.0, 60.0, 80.0, 100.0, 160.0, 200.0, 400.0, 640.0, 2560.0,
];

/** A cumulative histogram (le buckets), observed in real seconds. */
export interface HistogramView {
  readonly buckets: readonly number[];
  /** counts[i] = observations <= buckets[i]. */
  readonly counts: readonly number[];
  readonly sum: number;
  readonly count: number;
}

export interface SimEngineApi {
  readonly options: EngineOptions;
  readonly tokenizer: Tokenizer;
  /** Counters; the app bumps requests_total, rejected_total and faulted_total itself. */
  stats: EngineStats;
  /** Ended sequences by reason (vLLM's request_success_total{finished_reason}). */
  readonly finished: { stop: number; length: number; abort: number };
  /** TTFT, real seconds, with buckets covering every family's (see metrics.ts). */
  readonly ttft: HistogramView;
  readonly runningCount: number;
  readonly waitingCount: number;
  kv(): KvSnapshot;
  /**
   * llama.cpp slots (/props, /slots, /metrics). An engine without slots leaves it out and
   * the app shows the whole pool as one slot.
   */
  slots?(): SlotInfo[];
  /** Tokens of KV one sequence can use at most (llama.cpp n_ctx per slot); default: the pool. */
  readonly perSlotContext?: number;

  /** Queue a request. Its tokens arrive through `listener`; `done` resolves when it ends. */
  submit(input: SubmitInput): SimSequence;
  /** Stop a sequence and free its KV. "cancelled" counts in cancelled_total. Safe from a listener. */
  cancel(seq: SimSequence, reason?: Exclude<EndReason, FinishReason>): void;
  /** How much of `prompt` this replica has cached right now. Touches nothing. */
  match(prompt: string, salt?: string): { promptTokens: number; cachedTokens: number };
  /** Bring the simulation up to the present (reads call this so they see current state). */
  sync(): void;
  /** End every sequence, forget the cache and the record of computed blocks, zero the counters. */
  reset(): void;
  /**
   * Lose every cached prefix, as when the process holding the KV stops (Ollama unloading its
   * runner). Called with nothing running. What was lost stays in the record of computed
   * prefixes (a later miss on it is `evicted`), and the counters keep counting.
   */
  dropCache(): void;
  /** Stop timers (the server is going away); running sequences end as "reset". */
  close(): void;
  /** Observe every submitted sequence. Returns an unsubscribe. */
  onSubmit(listener: (seq: SimSequence) => void): () => void;
  /** Observe every sequence's end. Returns an unsubscribe. */
  onSequenceEnd(listener: (seq: SimSequence, result: SequenceResult) => void): () => void;
  /** Sequences in the scheduler, for introspection. */
  sequences(): { running: readonly SimSequence[]; waiting: readonly SimSequence[] };
}
