/**
 * Fault knobs, set at start (CLI flags / options) or at runtime (POST /sim/faults).
 *
 * - `fail_next: N` — the next N generation requests get `fail_status` (default 503) and an
 *   error body, before any generation. Setting it replaces the remaining count.
 * - `stall_ms: M` — wait M real (unscaled) ms before the first byte of a generation
 *   response; applies to every request until cleared with 0, or only to the next
 *   `stall_next` requests when that is given. Clearing it also lets the requests stalled
 *   now go on, so a test can hold a request for as long as it needs and then release it
 *   (`stall_ms: 600000`, …, `stall_ms: 0`) instead of guessing how long is enough.
 * - `close_after_chunks: K` — the next streaming response is cut (connection destroyed,
 *   sequence stopped, KV freed) after K SSE events; K = 0 destroys it before any byte.
 *   Applies to the next `close_next` streaming requests (default 1; -1 = all until
 *   cleared with `close_after_chunks: -1`). Non-streaming requests do not consume it.
 * - `startup_delay_ms: D` — /health and the API answer 503 "loading" for D real ms from
 *   now (from start when given as an option).
 * - `unparsable_next: N` — llamacpp profile: the next N non-streamed chat completions are
 *   computed and kept in their slots as usual, then answered as llama-server answers output
 *   its chat template's parser rejects: HTTP 500 "The model produced output that does not
 *   match the expected peg-native format" (common/chat.cpp common_chat_peg_parse, run by
 *   server-queue.cpp server_response_reader::next on the slot's final result; 4 of 150
 *   two-token chats on the project's random-weight model, 2 Dec 2026). Chat only, not
 *   streamed: the real server fails completions, messages and responses the same way, and,
 *   when more text follows the broken character, ends a stream with that error as an event;
 *   the sim imitates neither (docs/sim-engines.md).
 * - `error_after_chunks: K` — llamacpp and vllm profiles: the next streaming response ends
 *   after K SSE events with the engine's own error event, as the engine ends a stream whose
 *   request failed once it had begun (the sequence stops, its KV is freed; counted as a
 *   fault): llama.cpp writes the error object as one `data:` event and ends the stream, no
 *   `[DONE]` (server-context.cpp handle_completions_impl: the stream's `next` writes
 *   `format_error` of an error result and returns false); vLLM writes
 *   `create_streaming_error_response` as a `data:` event, then `data: [DONE]`
 *   (chat_completion/serving.py chat_completion_stream_generator's `except`). K = 0: before
 *   any other event. Non-streaming requests do not consume it.
 * - `queue_full_next: N` — ollama and vllm profiles: the next N generation requests are turned
 *   away before anything is computed, as the engine does when full (the profile's `queueFull`):
 *   Ollama when its scheduler queue is full (`OLLAMA_MAX_QUEUE`, 512): HTTP 503 "server busy,
 *   please try again.  maximum pending requests exceeded" (server/sched.go `ErrMaxQueue`,
 *   server/routes.go `handleScheduleError`; on the OpenAI routes middleware/openai.go
 *   `BaseWriter.writeError` → openai/openai.go `NewError`); vLLM when its admission control
 *   (`--max-num-queued-reqs`) is at its limit: HTTP 503 "The engine is currently busy and
 *   cannot accept new requests. …" (vllm/exceptions.py `QueueOverflowError`, raised by
 *   vllm/v1/engine/async_llm.py `AsyncLLM.check_admission`).
 */
import { ApiError } from "./_api-error.ts";
import type { Clock } from "./clock.ts";
import type { FaultOptions } from "./options.ts";
import { isRecord } from "./prompt-text.ts";

export class Faults {
  private readonly clock: Clock;
  private readonly initial: FaultOptions;
  failNext: number;
  failStatus: number;
  stallMs: number;
  stallNext: number;
  closeAfterChunks: number;
  closeNext: number;
  unparsableNext = 0;
  queueFullNext = 0;
  errorAfterChunks = -1;
  readyAtMs: number;
  private readonly stalled = new Set<() => void>();

  constructor(options: FaultOptions, clock: Clock) {
    this.clock = clock;
    this.initial = { ...options };
    this.failNext = options.failNext;
    this.failStatus = options.failStatus;
    this.stallMs = options.stallMs;
    this.stallNext = options.stallNext;
    this.closeAfterChunks = options.closeAfterChunks;
    this.closeNext = options.closeNext;
    this.readyAtMs = clock.now() + options.startupDelayMs;
  }

  loading(): boolean {
    return this.clock.now() < this.readyAtMs;
  }

  /** The status to fail this request with, consuming one `fail_next`; undefined = no failure. */
  takeFailure(): number | undefined {
    if (this.failNext <= 0) return undefined;
    this.failNext--;
    return this.failStatus;
  }

  /** Real ms to stall this request (consuming one `stall_next`), 0 = none. */
  takeStall(): number {
    if (this.stallMs <= 0 || this.stallNext === 0) return 0;
    if (this.stallNext > 0) this.stallNext--;
    return this.stallMs;
  }

  /** Call `release` if stall_ms is cleared before this request's stall is over; returns an unsubscribe. */
  onStallCleared(release: () => void): () => void {
    this.stalled.add(release);
    return () => this.stalled.delete(release);
  }

  private releaseStalled(): void {
    const waiting = [...this.stalled];
    this.stalled.clear();
    for (const release of waiting) release();
  }

  /** SSE events after which this streaming response is cut (consuming one `close_next`), -1 = never. */
  takeClose(): number {
    if (this.closeAfterChunks < 0 || this.closeNext === 0) return -1;
    if (this.closeNext > 0) this.closeNext--;
    return this.closeAfterChunks;
  }

  /** SSE events after which this streaming response ends with the engine's error event (consuming `error_after_chunks`), -1 = never. */
  takeStreamError(): number {
    const k = this.errorAfterChunks;
    this.errorAfterChunks = -1;
    return k;
  }

  /** Whether the engine's full queue turns this request away (consuming one `queue_full_next`). */
  takeQueueFull(): boolean {
    if (this.queueFullNext <= 0) return false;
    this.queueFullNext--;
    return true;
  }

  /** Whether this answer's output is one llama.cpp's chat parser rejects (consuming one `unparsable_next`). */
  takeUnparsable(): boolean {
    if (this.unparsableNext <= 0) return false;
    this.unparsableNext--;
    return true;
  }

  /** Apply a POST /sim/faults body. Throws ApiError 400 naming the bad field. */
  update(body: unknown): void {
    if (!isRecord(body)) throw new ApiError(400, "/sim/faults takes a JSON object");
    const known = ["fail_next", "fail_status", "stall_ms", "stall_next", "close_after_chunks", "close_next", "startup_delay_ms", "unparsable_next", "queue_full_next", "error_after_chunks"];
    for (const key of Object.keys(body)) {
      if (!known.includes(key)) throw new ApiError(400, `unknown fault ${JSON.stringify(key)}; known: ${known.join(", ")}`, { param: key });
    }
    const int = (key: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined => {
      const value = body[key];
      if (value === undefined) return undefined;
      if (value === null) return min === -1 ? -1 : 0;
      if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
        throw new ApiError(400, `${key} must be an integer in ${min}..${max}`, { param: key });
      }
      return value;
    };
    const failNext = int("fail_next", 0);
    const failStatus = int("fail_status", 400, 599);
    const stallMs = int("stall_ms", 0);
    const stallNext = int("stall_next", -1);
    const closeAfter = int("close_after_chunks", -1);
    const closeNext = int("close_next", -1);
    const startupDelay = int("startup_delay_ms", 0);
    const unparsable = int("unparsable_next", 0);
    const queueFull = int("queue_full_next", 0);
    const errorAfter = int("error_after_chunks", -1);
    if (failStatus !== undefined) this.failStatus = failStatus;
    if (failNext !== undefined) this.failNext = failNext;
    if (stallMs !== undefined) {
      this.stallMs = stallMs;
      this.stallNext = stallNext ?? -1;
      if (stallMs === 0) this.releaseStalled();
    } else if (stallNext !== undefined) this.stallNext = stallNext;
    if (closeAfter !== undefined) {
      this.closeAfterChunks = closeAfter;
      this.closeNext = closeNext ?? 1;
    } else if (closeNext !== undefined) this.closeNext = closeNext;
    if (startupDelay !== undefined) this.readyAtMs = this.clock.now() + startupDelay;
    if (unparsable !== undefined) this.unparsableNext = unparsable;
    if (queueFull !== undefined) this.queueFullNext = queueFull;
    if (errorAfter !== undefined) this.errorAfterChunks = errorAfter;
  }

  /** Back to no faults at all (start-up delay included). */
  clear(): void {
    this.failNext = 0;
    this.failStatus = this.initial.failStatus;
    this.stallMs = 0;
    this.stallNext = -1;
    this.closeAfterChunks = -1;
    this.closeNext = 1;
    this.unparsableNext = 0;
    this.queueFullNext = 0;
    this.errorAfterChunks = -1;
    this.readyAtMs = this.clock.now();
    this.releaseStalled();
  }

  snapshot() {
    return {
      fail_next: this.failNext,
      fail_status: this.failStatus,
      stall_ms: this.stallMs,
      stall_next: this.stallNext,
      close_after_chunks: this.closeAfterChunks,
      close_next: this.closeNext,
      unparsable_next: this.unparsableNext,
      queue_full_next: this.queueFullNext,
      error_after_chunks: this.errorAfterChunks,
      loading_ms_left: Math.max(0, Math.ceil(this.readyAtMs - this.clock.now())),
    };
  }
}
