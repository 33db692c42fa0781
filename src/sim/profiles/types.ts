/**
 * What an engine profile is: everything a client or a router sees of one engine family
 * that the sim imitates (`--engine`). Each profile file names, beside every quirk, the
 * engine source file and function it comes from; docs/sim-engines.md tabulates them.
 *
 * The profiles are written from the engines' source, apart from the router's own engine
 * knowledge (src/engines/, DESIGN decision 11): a shared table would make the sim agree with
 * the router by construction.
 */
import type { ApiError } from "../_api-error.ts";
import type { FormatContext, StreamFormat } from "../_formats.ts";
import type { SequenceResult, SimEngineApi } from "../engine-api.ts";
import type { LlamaCppOptions, PrefillOrder, SimOptions } from "../options.ts";

export const ENGINE_PROFILES = ["vllm", "vllm-details", "sglang", "llamacpp", "ollama"] as const;
export type EngineProfileName = (typeof ENGINE_PROFILES)[number];
export type EngineFamily = "vllm" | "sglang" | "llamacpp" | "ollama";

export function isEngineProfileName(value: unknown): value is EngineProfileName {
  return typeof value === "string" && (ENGINE_PROFILES as readonly string[]).includes(value);
}

/**
 * Per-replica figures some families publish and the engine contract does not carry
 * (derived by the app from sequence events; zeroed by /sim/reset).
 */
export interface ReplicaCounters {
  /** Requests that ended after their first admission (SGLang counts them at the end). */
  finishedRequests: number;
  abortedRequests: number;
  /** Prompt tokens and cached prompt tokens of those requests. */
  finishedPromptTokens: number;
  finishedCachedTokens: number;
  finishedCompletionTokens: number;
  /** llama.cpp: prompt tokens computed (not cached), the real seconds spent, generation the same. */
  promptTokensProcessed: number;
  promptSeconds: number;
  predictedTokens: number;
  predictedSeconds: number;
  /** llama.cpp n_decode_total and n_busy_slots (see llamacpp.ts for how they are counted). */
  decodeCalls: number;
  busySlots: number;
  /** llama.cpp n_tokens_max: the longest prompt + generation seen. */
  maxSequenceTokens: number;
  /** llama.cpp's throughput gauges average over the window since the previous scrape. */
  window: { promptTokens: number; promptSeconds: number; predictedSteps: number; predictedSeconds: number };
  /** SGLang cache_hit_rate: the last prefill batch (requests admitted together). */
  lastBatch: { tokens: number; cached: number };
  /** SGLang resets cache_hit_rate to 0 in its decode log, every 40 decode steps. */
  decodeStepsSinceBatch: number;
}

export function zeroCounters(): ReplicaCounters {
  return {
    finishedRequests: 0,
    abortedRequests: 0,
    finishedPromptTokens: 0,
    finishedCachedTokens: 0,
    finishedCompletionTokens: 0,
    promptTokensProcessed: 0,
    promptSeconds: 0,
    predictedTokens: 0,
    predictedSeconds: 0,
    decodeCalls: 0,
    busySlots: 0,
    maxSequenceTokens: 0,
    window: { promptTokens: 0, promptSeconds: 0, predictedSteps: 0, predictedSeconds: 0 },
    lastBatch: { tokens: 0, cached: 0 },
    decodeStepsSinceBatch: 0,
  };
}

/** What a profile may read of the replica it answers for. */
export interface ReplicaView {
  readonly name: string;
  readonly model: string;
  readonly options: SimOptions;
  readonly engine: SimEngineApi;
  readonly counters: ReplicaCounters;
  /** Unix ms when the replica started (vLLM process_start_time_seconds). */
  readonly startedAtUnixMs: number;
  /** CLOCK_MONOTONIC µs at start (llama.cpp's Process-Start-Time-Unix header). */
  readonly startedAtMonotonicUs: bigint;
  /** The most tokens one request may hold (prompt + completion): llama.cpp's n_ctx per slot, else max_model_len. */
  readonly contextLimit: number;
  /** ollama: whether its model is loaded, as `expires_at` (Unix ms) or undefined (residency.ts). */
  readonly resident?: { expiresAt(): number | undefined };
}

/** How a Responses API `previous_response_id` is treated. */
export type ResponsesState = "stored" | "ignored" | "rejected";

export interface EngineProfile {
  readonly name: EngineProfileName;
  readonly family: EngineFamily;
  /** How `previous_response_id` is treated (vLLM/SGLang store; Ollama ignores; llama.cpp refuses). */
  readonly responsesState: ResponsesState;
  /**
   * The KV model. Absent: one paged block pool shared by every sequence (engine.ts), as vLLM
   * and SGLang keep it. Present: llama-server's slots and host-RAM prompt cache (slots.ts),
   * with these settings where the family starts llama-server differently from its own
   * defaults (options.ts LlamaCppOptions); explicit options still win.
   */
  readonly slotDefaults?: Partial<LlamaCppOptions>;
  /** How requests prefilling at once share the card (options.ts EngineOptions.prefillOrder), with its source beside it. */
  readonly prefillOrder: PrefillOrder;
  /** In arrival order, whether decodes share the steps that compute prefill chunks (options.ts), with its source; default chunk. */
  readonly decodeWhilePrefilling?: SimOptions["decodeWhilePrefilling"];
  /** In arrival order, when a waiting request looks its prefix up (options.ts), with its source; default arrival. */
  readonly prefixLookup?: SimOptions["prefixLookup"];
  /** In arrival order, the prompt tokens one step computes on the 3090-class card (options.ts), with its source; default 2048. */
  readonly prefillChunkTokens?: number;
  /** Name of the reasoning field in messages and deltas. */
  readonly reasoningField: "reasoning_content" | "reasoning";
  /**
   * The model name a response carries for a request that asked for `requested`, or an
   * ApiError (404) for a name this engine refuses.
   */
  resolveModel(requested: string | undefined, served: string): string;
  /** Whether a streamed chat/completions response carries a usage chunk, given `stream_options` as sent. */
  streamUsage(streamOptions: unknown): boolean;
  /** The error for a prompt (or prompt + max_tokens) that does not fit; undefined = not refused. */
  contextError(promptTokens: number, maxTokens: number | undefined, limit: number): ApiError | undefined;
  /**
   * A chat longer than the context loses its oldest messages until the rest fits (the system
   * messages and the last one are kept) instead of being refused (Ollama); what is left is
   * then checked by `contextError`.
   */
  readonly cutsChatToContext?: boolean;
  /** An error in this engine's JSON (OpenAI-shaped endpoints). */
  errorResponse(error: ApiError, headers: Record<string, string>): Response;
  /**
   * The answer when the engine's queue (Ollama's scheduler) or its admission control (vLLM's
   * --max-num-queued-reqs) turns a request away before computing anything (fault
   * `queue_full_next`); undefined: this engine has no such refusal in the sim.
   */
  queueFull?(): ApiError;
  /** The frames that end a stream whose request failed in the engine; undefined: the connection drops. */
  streamError?(error: ApiError): string[];
  jsonBody(ctx: FormatContext, result: SequenceResult): unknown;
  streamFormat(ctx: FormatContext): StreamFormat;
  /** Non-generation routes (health, models, metrics, capacity); undefined = not found. */
  route(method: string, path: string, replica: ReplicaView, headers: Record<string, string>): Response | undefined;
  /** A path this engine does not serve, as its HTTP framework answers it. */
  notFound(headers: Record<string, string>): Response;
}
