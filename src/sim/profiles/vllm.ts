/**
 * vLLM (V1 engine, OpenAI-compatible server), two ways an operator starts it:
 * - `vllm`: the defaults — no `--enable-prompt-tokens-details`, so chat and completions
 *   usage carries no cached-token figure;
 * - `vllm-details`: with `--enable-prompt-tokens-details` (the sim's default profile).
 *
 * Sources (vllm-project/vllm at the commits the search index holds, main in 2026):
 * - usage: vllm/entrypoints/openai/chat_completion/serving.py `_make_prompt_tokens_details`
 *   (None unless the flag is on; `cached_tokens` then present even when 0 — older versions
 *   tested `if self.enable_prompt_tokens_details and num_cached_tokens`, dropping a 0) and
 *   completion/serving.py `request_output_to_completion_response` (`num_cached_tokens is not
 *   None`). Non-streaming bodies are `JSONResponse(content=generator.model_dump())`, which
 *   writes the absent details as `"prompt_tokens_details": null`.
 * - streams: chat_completion/serving.py `chat_completion_stream_generator`: chunks are
 *   `model_dump_json(exclude_unset=True)` (no `usage` key unless set); the finish_reason rides
 *   on the last token's chunk; the usage chunk (`choices: []`) is
 *   `model_dump_json(exclude_unset=True, exclude_none=True)`, just before `data: [DONE]`.
 *   Completions: completion/serving.py `completion_stream_generator`, the same rules.
 * - `stream_options.include_usage` defaults to true once `stream_options` is present:
 *   vllm/entrypoints/openai/engine/protocol.py `StreamOptions` (`include_usage: bool | None
 *   = True`), read by serve/utils/api_utils.py `should_include_usage`.
 * - Responses: `usage.input_tokens_details.cached_tokens` whatever the flags (REFERENCE.md;
 *   serving_responses.py builds `InputTokensDetails(cached_tokens=num_cached_tokens)`).
 * - errors: engine/protocol.py `ErrorResponse{error: ErrorInfo{message, type, param, code}}`.
 * - models: engine/protocol.py `ModelCard` (`owned_by: "vllm"`, `root`, `max_model_len`); an
 *   unknown model is 404 "The model `x` does not exist." (engine/serving.py `_check_model`).
 * - /health: 200 with an empty body (serve/instrumentator/health.py).
 * - /metrics: vllm/v1/metrics/loggers.py `PrometheusStatLogger` (labels `model_name`,
 *   `engine`); `vllm:cache_config_info` carries CacheConfig's fields (vllm/config/cache.py
 *   `metrics_info`): `block_size`, `num_gpu_blocks`, `enable_prefix_caching`, the group-aware
 *   `kv_cache_size_tokens` and `kv_cache_max_concurrency`, the offloading settings; a single
 *   API server process also exports prometheus_client's `process_start_time_seconds` (absent
 *   with several API servers, whose registry is multiprocess: REFERENCE.md).
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

export function vllmProfile(details: boolean): EngineProfile {
  type U = Pick<SequenceResult, "promptTokens" | "completionTokens" | "cachedTokens">;
  /** UsageInfo field order: prompt_tokens, total_tokens, completion_tokens, prompt_tokens_details. */
  const usage = (r: U, streamChunk: boolean) => ({
    prompt_tokens: r.promptTokens,
    total_tokens: r.promptTokens + r.completionTokens,
    completion_tokens: r.completionTokens,
    // model_dump() writes None as null; the usage chunk's exclude_none drops it.
    ...(details ? { prompt_tokens_details: { cached_tokens: r.cachedTokens } } : streamChunk ? {} : { prompt_tokens_details: null }),
  });

  function jsonBody(ctx: FormatContext, r: SequenceResult): unknown {
    const finish = r.reason;
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
              message: { role: "assistant", content, refusal: null, tool_calls: [], ...(reasoning === undefined ? {} : { reasoning_content: reasoning }) },
              logprobs: null,
              finish_reason: finish,
              stop_reason: null,
            },
          ],
          usage: usage(r, false),
        };
      }
      case "/v1/completions":
        return {
          id: ctx.id,
          object: "text_completion",
          created: ctx.created,
          model: ctx.model,
          choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: finish, stop_reason: null }],
          usage: usage(r, false),
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
    const finishOf = (last: boolean) => (last ? { finish_reason: ctx.finishReason, stop_reason: null } : { finish_reason: null });
    switch (ctx.endpoint) {
      case "/v1/chat/completions": {
        const chunk = (choices: unknown[], extra?: Record<string, unknown>) => envelope("chat.completion.chunk", choices, extra);
        return {
          start: () => [chunk([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }])],
          delta: (p) => {
            // A reasoning parser sends nothing for markup tokens, except the finishing one.
            if (!p.content && !p.reasoning && !p.last) return [];
            const delta = { ...(p.reasoning ? { reasoning_content: p.reasoning } : {}), ...(p.content ? { content: p.content } : {}) };
            return [chunk([{ index: 0, delta, logprobs: null, ...finishOf(p.last) }])];
          },
          end: (r) => [...(ctx.includeUsage ? [chunk([], { usage: usage(r, true) })] : []), SSE_DONE],
        };
      }
      case "/v1/completions": {
        const chunk = (choices: unknown[], extra?: Record<string, unknown>) => envelope("text_completion", choices, extra);
        return {
          start: () => [],
          delta: (p) => [chunk([{ index: 0, text: p.content, logprobs: null, ...finishOf(p.last) }])],
          end: (r) => [...(ctx.includeUsage ? [chunk([], { usage: usage(r, true) })] : []), SSE_DONE],
        };
      }
      case "/v1/messages":
        return anthropicStream(ctx);
      case "/v1/responses":
        return responsesStream(ctx);
    }
  }

  return {
    name: details ? "vllm-details" : "vllm",
    family: "vllm",
    responsesState: "stored",
    // vllm/v1/core/sched/scheduler.py Scheduler.schedule: "First, schedule the RUNNING
    // requests" in their order, each taking min(its remaining prompt, the step's token
    // budget); a waiting request is admitted only with budget left. Chunked prefill (always
    // on in V1) therefore serves prefills oldest first, one budget after another: a short
    // turn arriving behind long prompts waits for them.
    prefillOrder: "arrival",
    // The same loop schedules every running decode (one token each) and the prefill chunks
    // in one step: decodes go on, one token per step.
    decodeWhilePrefilling: "chunk",
    // The same function takes a waiting request, and calls kv_cache_manager.get_computed_blocks
    // for it, only with budget left after the running requests' chunks — whose blocks
    // KVCacheManager.allocate_slots cached as it allocated them: a request queued behind the
    // prefill of its prefix finds it.
    prefixLookup: "scheduled",
    reasoningField: "reasoning_content",
    resolveModel(requested, served) {
      if (requested !== undefined && requested !== served) {
        throw new ApiError(404, `The model \`${requested}\` does not exist.`, { type: "NotFoundError", param: "model" });
      }
      return served;
    },
    streamUsage: (so) => isRecord(so) && (so.include_usage === undefined || so.include_usage === true),
    contextError(promptTokens, maxTokens, limit) {
      if (promptTokens >= limit) {
        return new ApiError(
          400,
          `This model's maximum context length is ${limit} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
        );
      }
      if (maxTokens !== undefined && promptTokens + maxTokens > limit) {
        return new ApiError(
          400,
          `This model's maximum context length is ${limit} tokens. However, you requested ${promptTokens + maxTokens} tokens (${promptTokens} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`,
        );
      }
      return undefined;
    },
    // A stream whose request fails after it began: chat_completion/serving.py
    // chat_completion_stream_generator's `except` writes create_streaming_error_response
    // (engine/serving.py: json.dumps of ErrorResponse{error: ErrorInfo}, Python's separators)
    // as a `data:` event, then `data: [DONE]`.
    streamError: (e) => [
      `data: {"error": {"message": ${JSON.stringify(e.message)}, "type": "InternalServerError", "param": null, "code": ${e.status}}}\n\n`,
      SSE_DONE,
    ],
    // Admission control (--max-num-queued-reqs; off by default): vllm/v1/engine/async_llm.py
    // AsyncLLM.check_admission raises vllm/exceptions.py QueueOverflowError, a GracefulHTTPError
    // with HTTP 503, before the request reaches the engine; the VLLMError handler answers it as
    // an ErrorResponse. Its `type` here is the status' phrase, as the server's
    // create_error_response writes a GracefulHTTPError's (vLLM-derived code read; the router
    // reads the message only).
    queueFull: () =>
      new ApiError(503, "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.", { type: "Service Unavailable" }),
    // FastAPI's default for a path no route matches.
    notFound: (headers) => Response.json({ detail: "Not Found" }, { status: 404, headers }),
    errorResponse: (e, headers) =>
      Response.json({ error: { message: e.message, type: e.type, param: e.param, code: e.status } }, { status: e.status, headers }),
    jsonBody,
    streamFormat,
    route(method, path, replica, headers) {
      if (method !== "GET") return undefined;
      if (path === "/health") return new Response(null, { status: 200, headers });
      if (path === "/v1/models") {
        return Response.json(
          {
            object: "list",
            data: [
              {
                id: replica.model,
                object: "model",
                created: Math.floor(replica.startedAtUnixMs / 1000),
                owned_by: "vllm",
                root: replica.model,
                parent: null,
                max_model_len: replica.contextLimit,
                permission: [],
              },
            ],
          },
          { headers },
        );
      }
      if (path === "/metrics") return new Response(vllmMetrics(replica), { headers: { ...headers, "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
      return undefined;
    },
  };
}

/** GET /metrics with vLLM V1's names and labels (vllm/v1/metrics/loggers.py). */
function vllmMetrics(replica: ReplicaView): string {
  const { engine } = replica;
  engine.sync();
  const labels = `engine="0",model_name="${escapeLabel(replica.model)}"`;
  const s = engine.stats;
  const kv = engine.kv();
  const out = new Exposition();
  // prometheus_client's process collector (single API server process only).
  out.metric("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", [["", replica.startedAtUnixMs / 1000]]);
  out.metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", [[`{${labels}}`, engine.runningCount]]);
  out.metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [[`{${labels}}`, engine.waitingCount]]);
  out.metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [[`{${labels}}`, kv.usage]]);
  out.metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", [[`{${labels}}`, s.prefix_cache_queries_total]]);
  out.metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", [[`{${labels}}`, s.prefix_cache_hits_total]]);
  out.metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", [[`{${labels}}`, s.preemptions_total]]);
  out.metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [[`{${labels}}`, s.prompt_tokens_total]]);
  out.metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", [[`{${labels}}`, s.generation_tokens_total]]);
  out.metric(
    "vllm:request_success_total",
    "counter",
    "Count of successfully processed requests.",
    (["stop", "length", "abort"] as const).map((reason) => [`{${labels},finished_reason="${reason}"}`, engine.finished[reason]]),
  );
  out.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels, engine.ttft, VLLM_TTFT_BUCKETS);
  // CacheConfig.metrics_info: str() of every field (a few here), in field order, then
  // `engine`. kv_cache_size_tokens is the group-aware pool (vllm/config/cache.py): on a model
  // with one KV cache group, as the sim's, num_gpu_blocks × block_size; kv_cache_max_concurrency
  // is that pool over max_model_len.
  const poolTokens = kv.totalBlocks * engine.options.blockTokens;
  const info = {
    block_size: engine.options.blockTokens,
    enable_prefix_caching: engine.options.prefixCache ? "True" : "False",
    num_gpu_blocks: kv.totalBlocks,
    kv_cache_size_tokens: poolTokens,
    // a Python float's str()
    kv_cache_max_concurrency: Number.isInteger(poolTokens / replica.contextLimit) ? (poolTokens / replica.contextLimit).toFixed(1) : poolTokens / replica.contextLimit,
    kv_offloading_size: "None",
    kv_offloading_backend: "native",
    engine: "0",
  };
  out.metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", [
    [`{${Object.entries(info).map(([k, v]) => `${k}="${v}"`).join(",")}}`, 1],
  ]);
  return out.text();
}

/** vllm/v1/metrics/loggers.py, histogram_time_to_first_token buckets. */
const VLLM_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
