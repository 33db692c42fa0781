/**
 * SGLang, started the way a router operator is told to: `--enable-cache-report
 * --enable-metrics`.
 *
 * Sources (sgl-project/sglang, python/sglang/srt/, at the commits the search index holds):
 * - usage: entrypoints/openai/usage_processor.py `UsageProcessor._details_if_cached`: with
 *   `--enable-cache-report`, `prompt_tokens_details = {cached_tokens}` only when the count is
 *   > 0; `UsageInfo` (entrypoints/openai/protocol.py) also has `reasoning_tokens: 0`, and
 *   pydantic's default dump writes the absent details as `null`.
 * - streams: entrypoints/openai/serving_chat.py `_generate_chat_stream`: content chunks come
 *   from sse_utils.py `build_sse_content` (msgspec, `StreamChunk(omit_defaults=True)`: no
 *   `usage` key; `StreamDelta.reasoning_content` has no default, so it is written as `null`),
 *   then one finish_reason chunk per choice with an empty delta, then — if asked — a usage
 *   chunk with `choices: []` (`ChatCompletionStreamResponse.model_dump_json()`), then
 *   `[DONE]`. Completions chunks (`CompletionStreamResponse.model_dump_json()`) carry
 *   `"usage": null`.
 * - `stream_options.include_usage` defaults to false: protocol.py `StreamOptions`, utils.py
 *   `should_include_usage` (`--stream-response-default-include-usage` off).
 * - model names: any `model` is served and echoed back (`model=request.model` in
 *   `_generate_chat_stream` / `_build_chat_response`; http_server.py passes requests to
 *   `handle_request` without a model check); no `model` → "default" (protocol.py
 *   `DEFAULT_MODEL_NAME`).
 * - errors: protocol.py `ErrorResponse{object: "error", message, type, param, code}` at the top
 *   level; too long: managers/tokenizer_manager.py `_validate_one_request`.
 * - /metrics (`--enable-metrics`): observability/metrics_collector.py (formerly
 *   metrics/collector.py) `SchedulerMetricsCollector` (labels `model_name, engine_type, tp_rank,
 *   pp_rank, moe_ep_rank` from `init_new`; the constants `max_total_num_tokens`, `page_size`,
 *   `num_pages` from `emit_constants`) and `TokenizerMetricsCollector` (label `model_name`;
 *   `cached_tokens_total` also by `cache_source`, "device" for the GPU's radix cache: the sim
 *   has no host or storage tier; both counters move when a request finishes,
 *   `observe_one_finished_request`). One scheduler, no priority scheduling: each figure is
 *   written once (the series priority scheduling and every-rank metrics repeat are not
 *   imitated). `cache_hit_rate` is set in `log_prefill_stats` to hit / (hit + new) tokens of the LAST prefill batch, and to 0
 *   by `log_decode_stats` (every `--decode-log-interval` = 40 decode steps). No
 *   `process_start_time_seconds`: the registry is multiprocess.
 * - KV: a radix tree with page_size 1 (token-granular hits). The sim caches in blocks of
 *   `--block-tokens` (16 here too): hashing per token would cost as much as the bench's
 *   scaled TTFTs (docs/sim-engines.md#deviations-of-the-profiles). Run `--block-tokens 1`
 *   to see token-exact hits.
 */
import { ApiError } from "../_api-error.ts";
import {
  anthropicBody,
  anthropicStream,
  responseObject,
  responsesStream,
  splitOutput,
  sseData,
  SSE_DONE,
  type FormatContext,
  type StreamFormat,
} from "../_formats.ts";
import type { SequenceResult } from "../engine-api.ts";
import { escapeLabel, Exposition } from "../metrics.ts";
import { isRecord } from "../prompt-text.ts";
import type { EngineProfile, ReplicaView } from "./types.ts";

/** The EOS id a `stop` finish reports in `matched_stop` (Qwen2's `<|im_end|>`, the sim's tokenizer vocabulary). */
const EOS_ID = 151_645;
/** scheduler_metrics_mixin.py: cache_hit_rate is zeroed by the decode log, every 40 decode steps. */
export const SGLANG_DECODE_LOG_INTERVAL = 40;

type U = Pick<SequenceResult, "promptTokens" | "completionTokens" | "cachedTokens">;

const usage = (r: U) => ({
  prompt_tokens: r.promptTokens,
  total_tokens: r.promptTokens + r.completionTokens,
  completion_tokens: r.completionTokens,
  prompt_tokens_details: r.cachedTokens > 0 ? { cached_tokens: r.cachedTokens } : null,
  reasoning_tokens: 0,
});

const matchedStop = (reason: string) => (reason === "stop" ? EOS_ID : null);

function jsonBody(ctx: FormatContext, r: SequenceResult): unknown {
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const { content, reasoning } = splitOutput(ctx, r.text);
      return {
        id: ctx.id,
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content, reasoning_content: reasoning ?? null, tool_calls: null },
            logprobs: null,
            finish_reason: r.reason,
            matched_stop: matchedStop(r.reason),
          },
        ],
        usage: usage(r),
      };
    }
    case "/v1/completions":
      return {
        id: ctx.id,
        object: "text_completion",
        created: ctx.created,
        model: ctx.model,
        choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: r.reason, matched_stop: matchedStop(r.reason) }],
        usage: usage(r),
      };
    case "/v1/messages":
      return anthropicBody(ctx, r);
    case "/v1/responses":
      return responseObject(ctx, r);
  }
}

function streamFormat(ctx: FormatContext): StreamFormat {
  const envelope = (object: string, choices: unknown[], extra: Record<string, unknown> = {}) =>
    sseData({ id: ctx.id, object, created: ctx.created, model: ctx.model, choices, ...extra });
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const chunk = (choices: unknown[], extra?: Record<string, unknown>) => envelope("chat.completion.chunk", choices, extra);
      const choice = (delta: Record<string, unknown>, finish: string | null = null) => ({
        index: 0,
        delta,
        logprobs: null,
        finish_reason: finish,
        matched_stop: finish === null ? null : matchedStop(finish),
      });
      return {
        start: () => [chunk([choice({ reasoning_content: null, role: "assistant", content: "" })])],
        delta: (p) => [
          ...(p.reasoning ? [chunk([choice({ reasoning_content: p.reasoning })])] : []),
          ...(p.content ? [chunk([choice({ reasoning_content: null, content: p.content })])] : []),
        ],
        end: (r) => [
          chunk([choice({ reasoning_content: null }, r.reason)]),
          ...(ctx.includeUsage ? [chunk([], { usage: usage(r) })] : []),
          SSE_DONE,
        ],
      };
    }
    case "/v1/completions": {
      const chunk = (choices: unknown[], u: unknown) => envelope("text_completion", choices, { usage: u });
      return {
        start: () => [],
        delta: (p) => [
          chunk([{ index: 0, text: p.content, logprobs: null, finish_reason: p.last ? ctx.finishReason : null, matched_stop: p.last ? matchedStop(ctx.finishReason) : null }], null),
        ],
        end: (r) => [...(ctx.includeUsage ? [chunk([], usage(r))] : []), SSE_DONE],
      };
    }
    case "/v1/messages":
      return anthropicStream(ctx);
    case "/v1/responses":
      return responsesStream(ctx);
  }
}

export const sglangProfile: EngineProfile = {
  name: "sglang",
  family: "sglang",
  responsesState: "stored",
  // python/sglang/srt/managers/scheduler.py get_new_batch_prefill: the request being
  // chunked resumes first (`adder.add_chunked_req`), then the waiting queue in policy order
  // (`--schedule-policy`, fcfs by default in server_args.py) fills what is left of
  // `--chunked-prefill-size`: prefills are served in arrival order.
  prefillOrder: "arrival",
  // scheduler.py get_next_batch_to_run: "Run prefill first if possible" — a step is a
  // prefill batch whenever one can be formed, a decode batch only otherwise (without
  // --enable-mixed-chunk): decoding sequences wait while prefills remain.
  decodeWhilePrefilling: "none",
  // get_new_batch_prefill matches a waiting request against the radix tree each time it
  // forms a batch with it (`req.init_next_round_input(self.tree_cache)`; with the default
  // fcfs policy the requests it admits and the first it cannot), but the default overlap loop
  // (scheduler.py event_loop_overlap: `get_next_batch_to_run` before `pop_and_process` of the
  // last batch) forms that batch before the last prefill's result has put its tokens in the
  // tree (process_batch_result_prefill → cache_unfinished_req; a chunk before the last is
  // stashed into the tree before the next batch forms, `stash_chunked_request`): a request
  // queued a batch or more behind the prefill of its prefix finds it; one in the very next
  // batch misses what that prefill computes in its last chunk — all of it for a prompt within
  // one --chunked-prefill-size. Two requests in one batch both compute what they share.
  prefixLookup: "batch",
  // --chunked-prefill-size on a 24 GB card: 4096 (arg_groups/memory_hook.py
  // handle_gpu_memory_settings: 2048 below 20 GB, 4096 below 60 GB, 8192 below 160 GB; an
  // older server_args.py gave 2048 below 35 GB). A batch's prompt budget: what a request in the
  // very next batch misses of the prefill before it.
  prefillChunkTokens: 4096,
  reasoningField: "reasoning_content",
  resolveModel: (requested) => requested ?? "default",
  streamUsage: (so) => isRecord(so) && so.include_usage === true,
  contextError(promptTokens, maxTokens, limit) {
    if (promptTokens >= limit) {
      return new ApiError(400, `The input (${promptTokens} tokens) is longer than the model's context length (${limit} tokens).`);
    }
    if (maxTokens !== undefined && promptTokens + maxTokens >= limit) {
      return new ApiError(
        400,
        `Requested token count exceeds the model's maximum context length of ${limit} tokens. You requested a total of ${promptTokens + maxTokens} tokens: ${promptTokens} tokens from the input messages and ${maxTokens} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.`,
      );
    }
    return undefined;
  },
  // FastAPI's default for a path no route matches.
  notFound: (headers) => Response.json({ detail: "Not Found" }, { status: 404, headers }),
  errorResponse: (e, headers) => Response.json({ object: "error", message: e.message, type: e.type, param: e.param, code: e.status }, { status: e.status, headers }),
  jsonBody,
  streamFormat,
  route(method, path, replica, headers) {
    if (method !== "GET") return undefined;
    // http_server.py `health` / `health_generate`: 200, no body.
    if (path === "/health" || path === "/health_generate") return new Response(null, { status: 200, headers });
    if (path === "/v1/models") {
      return Response.json(
        {
          object: "list",
          data: [{ id: replica.model, object: "model", created: Math.floor(replica.startedAtUnixMs / 1000), owned_by: "sglang", root: replica.model, max_model_len: replica.contextLimit }],
        },
        { headers },
      );
    }
    if (path === "/get_model_info") return Response.json({ model_path: replica.model, tokenizer_path: replica.model, is_generation: true }, { headers });
    if (path === "/server_info" || path === "/get_server_info") {
      // http_server.py `server_info`: the server args merged with the scheduler's info and the
      // version; `/get_server_info` is its deprecated alias (it logs a warning and answers the same).
      const kv = replica.engine.kv();
      return Response.json(
        {
          model_path: replica.model,
          served_model_name: replica.model,
          page_size: replica.options.blockTokens,
          context_length: replica.contextLimit,
          enable_metrics: true,
          enable_cache_report: true,
          max_total_num_tokens: kv.totalBlocks * replica.options.blockTokens,
          max_req_input_len: replica.contextLimit - 1,
          version: "0.5.9",
        },
        { headers },
      );
    }
    if (path === "/metrics") return new Response(sglangMetrics(replica), { headers: { ...headers, "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
    return undefined;
  },
};

/** collector.py TokenizerMetricsCollector bucket_time_to_first_token. */
const SGLANG_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400];

function sglangMetrics(replica: ReplicaView): string {
  const { engine, counters } = replica;
  engine.sync();
  const model = escapeLabel(replica.model);
  const scheduler = `{engine_type="unified",model_name="${model}",moe_ep_rank="0",pp_rank="0",tp_rank="0"}`;
  const tokenizer = `model_name="${model}"`;
  const kv = engine.kv();
  const B = engine.options.blockTokens;
  const batch = counters.lastBatch;
  const hitRate = counters.decodeStepsSinceBatch >= SGLANG_DECODE_LOG_INTERVAL || batch.tokens === 0 ? 0 : batch.cached / batch.tokens;
  return new Exposition()
    .metric("sglang:num_running_reqs", "gauge", "The number of running requests.", [[scheduler, engine.runningCount]])
    .metric("sglang:num_used_tokens", "gauge", "The number of used tokens.", [[scheduler, kv.usedBlocks * B]])
    .metric("sglang:token_usage", "gauge", "The token usage.", [[scheduler, kv.usage]])
    .metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", [[scheduler, engine.waitingCount]])
    .metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", [[scheduler, hitRate]])
    .metric("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.", [[scheduler, kv.totalBlocks * B]])
    .metric("sglang:page_size", "gauge", "KV cache page size in tokens.", [[scheduler, B]])
    .metric("sglang:num_pages", "gauge", "Number of KV cache pages.", [[scheduler, kv.totalBlocks]])
    .metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [[`{${tokenizer}}`, counters.finishedPromptTokens]])
    .metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", [[`{${tokenizer}}`, counters.finishedCompletionTokens]])
    .metric("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens by source (device/host/storage).", [[`{${tokenizer},cache_source="device"}`, counters.finishedCachedTokens]])
    .metric("sglang:num_requests_total", "counter", "Number of requests processed.", [[`{${tokenizer}}`, counters.finishedRequests]])
    .metric("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", [[`{${tokenizer}}`, counters.abortedRequests]])
    .histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", tokenizer, engine.ttft, SGLANG_TTFT_BUCKETS)
    .text();
}
