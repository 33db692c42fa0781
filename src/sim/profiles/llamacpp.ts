/**
 * llama.cpp `llama-server`, started with `--metrics --slots` (what a router needs).
 *
 * Sources: llama.cpp at the prebuilt server's commit (80fb11a, /work/ref/llama.cpp), and a
 * real run of /work/shared/engines/llama-server (`-c 65536 --parallel 2 --metrics --slots`,
 * docs/sim-engines.md quotes the bytes). tools/server/:
 * - bodies and chunks: server-task.cpp `server_task_result_cmpl_final::to_json_oaicompat_chat`,
 *   `…_chat_stream`, `to_json_oaicompat`, `…_resp`, and `server_task_result_cmpl_partial::
 *   to_json_oaicompat_chat` / `to_json_oaicompat` (nlohmann ordered_json: keys in the order
 *   written there). Every chunk carries `system_fingerprint` (the build info).
 * - usage: `usage_json_oaicompat` always has `prompt_tokens_details.cached_tokens`; every final
 *   result carries `timings` (server-common.cpp `server_slot_stats::to_json`: cache_n,
 *   prompt_n, prompt_ms, …, predicted_per_second).
 * - streams: without `stream_options.include_usage` (default false, server-schema.cpp) the
 *   finish chunk carries `timings` and no usage; with it, usage and timings move onto a
 *   `choices: []` chunk (`to_json_oaicompat_chat_stream`: `deltas.back()["timings"]`). A
 *   `/v1/completions` stream puts usage and timings on its final chunk unasked
 *   (`to_json_oaicompat` is the final chunk).
 * - any `model` is accepted and the response names the server's alias (`oaicompat_model`).
 * - errors: server-common.cpp `format_error_response` (`{error: {code, message, type}}`); a
 *   prompt of n_ctx tokens or more: server-context.cpp `pre_decode`, 400
 *   `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`
 *   (`server_task_result_error::to_json`); unknown path: server-http.cpp, 404 "File Not Found";
 *   `previous_response_id`: server-chat.cpp, "llama.cpp does not support
 *   'previous_response_id'." (400).
 * - capacity: server-context.cpp `get_res_props` (`total_slots` = --parallel,
 *   `default_generation_settings.n_ctx` per slot), `get_slots` (id, n_ctx, is_processing),
 *   `get_res_models` (both an Ollama-style `models` list and OpenAI `data` with
 *   `owned_by: "llamacpp"` and `meta.n_ctx`).
 * - /metrics: server-task.cpp `server_task_result_metrics::to_metrics` (no labels, C++ stream
 *   number formatting); the response header `Process-Start-Time-Unix` is `metrics.t_start`,
 *   set by server-common.h `server_metrics::init` from `ggml_time_us()` — CLOCK_MONOTONIC
 *   microseconds (ggml/src/ggml.c), not a Unix time: equal across scrapes of one process,
 *   different after a restart.
 */
import { ApiError } from "../_api-error.ts";
import { anthropicBody, anthropicStream, responsesStream, splitOutput, sseData, SSE_DONE, type FormatContext, type StreamFormat } from "../_formats.ts";
import type { SequenceResult, SlotInfo } from "../engine-api.ts";
import { cppDouble } from "../metrics.ts";
import { isRecord } from "../prompt-text.ts";
import type { EngineProfile, ReplicaView } from "./types.ts";

/** The prebuilt server's build info (`--version`: build 1, commit 80fb11a). */
const BUILD_INFO = "b1-80fb11a";
const N_VOCAB = 151_936;

type U = Pick<SequenceResult, "promptTokens" | "completionTokens" | "cachedTokens">;

const usage = (r: U) => ({
  completion_tokens: r.completionTokens,
  prompt_tokens: r.promptTokens,
  total_tokens: r.completionTokens + r.promptTokens,
  prompt_tokens_details: { cached_tokens: r.cachedTokens },
});

/** server_slot_stats::to_json from a finished sequence (times in real ms, as a client measures). */
export function timingsOf(r: SequenceResult) {
  const promptN = r.promptTokens - r.cachedTokens;
  const promptMs = r.ttftMs ?? r.durationMs;
  const predictedMs = r.ttftMs === undefined ? 0 : Math.max(0.001, r.durationMs - r.ttftMs);
  const steps = Math.max(0, r.completionTokens - 1); // the first token comes from the prompt batch
  return {
    cache_n: r.cachedTokens,
    prompt_n: promptN,
    prompt_ms: round3(promptMs),
    prompt_per_token_ms: promptN > 0 ? promptMs / promptN : 0,
    prompt_per_second: promptMs > 0 ? (1e3 / promptMs) * promptN : 0,
    predicted_n: r.completionTokens,
    predicted_ms: round3(predictedMs),
    predicted_per_token_ms: steps > 0 ? predictedMs / steps : 0,
    predicted_per_second: predictedMs > 0 ? (1e3 / predictedMs) * steps : 0,
  };
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

function jsonBody(ctx: FormatContext, r: SequenceResult): unknown {
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const { content, reasoning } = splitOutput(ctx, r.text);
      return {
        choices: [{ finish_reason: r.reason, index: 0, message: { role: "assistant", content, ...(reasoning === undefined ? {} : { reasoning_content: reasoning }) } }],
        created: ctx.created,
        model: ctx.model,
        system_fingerprint: BUILD_INFO,
        object: "chat.completion",
        usage: usage(r),
        id: ctx.id,
        timings: timingsOf(r),
      };
    }
    case "/v1/completions":
      return {
        choices: [{ text: r.text, index: 0, logprobs: null, finish_reason: r.reason }],
        created: ctx.created,
        model: ctx.model,
        system_fingerprint: BUILD_INFO,
        object: "text_completion",
        usage: usage(r),
        id: ctx.id,
        timings: timingsOf(r),
      };
    case "/v1/messages":
      return anthropicBody(ctx, r);
    case "/v1/responses": {
      // to_json_oaicompat_resp: status "completed" whatever the finish reason.
      const { content, reasoning } = splitOutput(ctx, r.text);
      return {
        completed_at: ctx.created,
        created_at: ctx.created,
        id: ctx.id,
        model: ctx.model,
        object: "response",
        output: [
          ...(reasoning === undefined
            ? []
            : [{ id: `rs_${ctx.itemId.slice(4)}`, summary: [], type: "reasoning", content: [{ text: reasoning, type: "reasoning_text" }], encrypted_content: "", status: "completed" }]),
          { content: [{ type: "output_text", annotations: [], logprobs: [], text: content }], id: ctx.itemId, role: "assistant", status: "completed", type: "message" },
        ],
        status: "completed",
        usage: responsesUsage(r),
      };
    }
  }
}

const responsesUsage = (r: U) => ({
  input_tokens: r.promptTokens,
  output_tokens: r.completionTokens,
  total_tokens: r.completionTokens + r.promptTokens,
  input_tokens_details: { cached_tokens: r.cachedTokens },
});

function streamFormat(ctx: FormatContext): StreamFormat {
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        sseData({ choices, created: ctx.created, id: ctx.id, model: ctx.model, system_fingerprint: BUILD_INFO, object: "chat.completion.chunk", ...extra });
      return {
        start: () => [chunk([{ finish_reason: null, index: 0, delta: { role: "assistant", content: null } }])],
        delta: (p) => [
          ...(p.reasoning ? [chunk([{ finish_reason: null, index: 0, delta: { reasoning_content: p.reasoning } }])] : []),
          ...(p.content ? [chunk([{ finish_reason: null, index: 0, delta: { content: p.content } }])] : []),
        ],
        end: (r) => [
          chunk([{ finish_reason: r.reason, index: 0, delta: {} }], ctx.includeUsage ? {} : { timings: timingsOf(r) }),
          ...(ctx.includeUsage ? [chunk([], { usage: usage(r), timings: timingsOf(r) })] : []),
          SSE_DONE,
        ],
      };
    }
    case "/v1/completions": {
      const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}, tail: Record<string, unknown> = {}) =>
        sseData({ choices: [choice], created: ctx.created, model: ctx.model, system_fingerprint: BUILD_INFO, object: "text_completion", ...extra, id: ctx.id, ...tail });
      return {
        start: () => [],
        delta: (p) => [chunk({ text: p.content, index: 0, logprobs: null, finish_reason: null })],
        // The final result is the last chunk, usage and timings included, asked or not.
        end: (r) => [chunk({ text: "", index: 0, logprobs: null, finish_reason: r.reason }, { usage: usage(r) }, { timings: timingsOf(r) }), SSE_DONE],
      };
    }
    case "/v1/messages":
      return anthropicStream(ctx);
    case "/v1/responses":
      return responsesStream(ctx, responsesUsage);
  }
}

/** The slots a replica shows: the engine's own (slots.ts), or the whole pool as one slot. */
export function slotsOf(replica: ReplicaView): SlotInfo[] {
  const { engine } = replica;
  engine.sync();
  return engine.slots?.() ?? [{ id: 0, n_ctx: engine.perSlotContext ?? replica.contextLimit, is_processing: engine.runningCount > 0 }];
}

/** server-common.cpp format_error_response: code, message, type (and an error's extra fields). */
function errorBody(e: ApiError) {
  const type = e.explicitType && e.type.endsWith("_error") && e.type === e.type.toLowerCase() ? e.type : (ERROR_TYPES[e.status] ?? "server_error");
  return { error: { code: e.status, message: e.message, type, ...e.extra } };
}

const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  501: "not_supported_error",
  503: "unavailable_error",
};

export const llamacppProfile: EngineProfile = {
  name: "llamacpp",
  family: "llamacpp",
  responsesState: "rejected",
  // llama-server's slots with its own defaults (slots.ts; options.ts LlamaCppOptions).
  slotDefaults: {},
  // Each slot prefilling at once gets an equal share. llama-server itself (server-context.cpp
  // update_slots) fills each step's n_batch from the slots in index order; the calibration
  // against it (perf/calibrate-llamacpp.ts) compared hit rates, not the order of first tokens.
  prefillOrder: "shared",
  reasoningField: "reasoning_content",
  resolveModel: (_requested, served) => served,
  streamUsage: (so) => isRecord(so) && so.include_usage === true,
  contextError(promptTokens, _maxTokens, limit) {
    // A max_tokens beyond the slot is not refused: generation stops at n_ctx.
    if (promptTokens < limit) return undefined;
    return new ApiError(400, `request (${promptTokens} tokens) exceeds the available context size (${limit} tokens), try increasing it`, {
      type: "exceed_context_size_error",
      extra: { n_prompt_tokens: promptTokens, n_ctx: limit },
    });
  },
  // server-http.cpp: the not-found handler writes message, type, code in that order.
  notFound: (headers) => Response.json({ error: { message: "File Not Found", type: "not_found_error", code: 404 } }, { status: 404, headers }),
  errorResponse: (e, headers) => Response.json(errorBody(e), { status: e.status, headers }),
  // A stream whose request fails (the unified KV overflowed): server-context.cpp send_error
  // puts the error object in the stream as one `data:` event and ends it (no [DONE]). Seen on
  // the real server (2 Dec 2026): HTTP 200, then only
  // `data: {"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`.
  streamError: (e) => [sseData(errorBody(e))],
  jsonBody,
  streamFormat,
  route(method, path, replica, headers) {
    if (method !== "GET") return undefined;
    if (path === "/health" || path === "/v1/health") return Response.json({ status: "ok" }, { headers });
    const slots = () => slotsOf(replica);
    const nCtx = () => slots()[0]?.n_ctx ?? replica.contextLimit;
    if (path === "/v1/models" || path === "/models") {
      const name = replica.model;
      return Response.json(
        {
          models: [
            {
              name,
              model: name,
              modified_at: "",
              size: "",
              digest: "",
              type: "model",
              description: "",
              tags: [""],
              capabilities: ["completion"],
              parameters: "",
              details: { parent_model: "", format: "gguf", family: "", families: [""], parameter_size: "", quantization_level: "" },
            },
          ],
          object: "list",
          data: [
            {
              id: name,
              aliases: [name],
              tags: [],
              object: "model",
              created: Math.floor(Date.now() / 1000),
              owned_by: "llamacpp",
              meta: { vocab_type: true, n_vocab: N_VOCAB, n_ctx: nCtx(), n_ctx_train: nCtx(), n_embd: 256, n_params: 42_305_792, size: 48_151_552, ftype: "F16" },
            },
          ],
        },
        { headers },
      );
    }
    if (path === "/props") {
      const all = slots();
      return Response.json(
        {
          default_generation_settings: { params: { n_predict: -1, temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, stream: false }, n_ctx: nCtx() },
          total_slots: all.length,
          model_alias: replica.model,
          model_path: `/models/${replica.model}.gguf`,
          endpoint_slots: true,
          endpoint_props: false,
          endpoint_metrics: true,
          build_info: BUILD_INFO,
          is_sleeping: false,
        },
        { headers },
      );
    }
    if (path === "/slots") return Response.json(slots().map((s) => ({ id: s.id, n_ctx: s.n_ctx, speculative: false, is_processing: s.is_processing })), { headers });
    if (path === "/metrics") {
      return new Response(llamacppMetrics(replica), {
        headers: { ...headers, "content-type": "text/plain; version=0.0.4", "process-start-time-unix": String(replica.startedAtMonotonicUs) },
      });
    }
    return undefined;
  },
};

/**
 * The llama_decode calls a finished sequence stands for, as if it never shared a batch: one
 * per `nBatch` prompt tokens (the logical batch, `--batch-size`), one per later token.
 */
export function decodeCallsOf(r: SequenceResult, nBatch: number): number {
  return Math.ceil((r.promptTokens - r.cachedTokens) / nBatch) + Math.max(0, r.completionTokens - 1);
}

/** server_task_result_metrics::to_metrics, counters then gauges; the throughput window resets per scrape. */
function llamacppMetrics(replica: ReplicaView): string {
  const { engine, counters: c } = replica;
  engine.sync();
  const w = c.window;
  const promptRate = w.promptSeconds > 0 ? w.promptTokens / w.promptSeconds : 0;
  const predictRate = w.predictedSeconds > 0 ? w.predictedSteps / w.predictedSeconds : 0;
  c.window = { promptTokens: 0, promptSeconds: 0, predictedSteps: 0, predictedSeconds: 0 };
  const processing = slotsOf(replica).filter((s) => s.is_processing).length;
  const items: [string, string, number][] = [
    ["prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", c.promptTokensProcessed],
    ["prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", c.finishedCachedTokens],
    ["prompt_seconds_total", "Total time spent processing prompts", c.promptSeconds],
    ["tokens_predicted_total", "Number of generation tokens processed", c.predictedTokens],
    ["tokens_predicted_seconds_total", "Total time spent generating tokens", c.predictedSeconds],
    ["n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding", c.decodeCalls],
    ["n_tokens_max", "Largest observed sequence length (prompt + generation)", c.maxSequenceTokens],
    ["spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", 0],
    ["spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model", 0],
    ["spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", 0],
  ];
  const gauges: [string, string, number][] = [
    ["prompt_tokens_seconds", "Average prompt throughput in tokens/s", promptRate],
    ["predicted_tokens_seconds", "Average generation throughput in tokens/s", predictRate],
    ["requests_processing", "Number of requests processing", processing],
    ["requests_deferred", "Number of requests deferred", engine.waitingCount],
    ["n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", c.busySlots / Math.max(c.decodeCalls, 1)],
  ];
  let out = "";
  const add = (type: string, list: [string, string, number][]) => {
    for (const [name, help, value] of list) out += `# HELP llamacpp:${name} ${help}\n# TYPE llamacpp:${name} ${type}\nllamacpp:${name} ${cppDouble(value)}\n`;
  };
  add("counter", items);
  add("gauge", gauges);
  return out;
}
