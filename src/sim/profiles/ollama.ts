/**
 * Ollama's OpenAI-compatible layer (ollama/ollama at fb30760, 2026-08-21, fetched here).
 *
 * - usage: openai/openai.go `Usage{prompt_tokens, completion_tokens, total_tokens}` — no
 *   cached-token field at all (`ToUsage`, `ToUsageGenerate`).
 * - chat streams: middleware/openai.go `ChatWriter.writeResponse`: content chunks
 *   (`openai.ToStreamChunks`: the role rides on the first content chunk, no `usage` key), a
 *   finish chunk with an empty delta (`openai.FinishChunk`), then — only with
 *   `stream_options.include_usage` (default false, `StreamOptions.IncludeUsage`) — the finish
 *   chunk again with `choices: []` and the usage, then `[DONE]`. Every chunk has
 *   `system_fingerprint: "fp_ollama"`. Ids are `chatcmpl-<0..998>` / `cmpl-<0..998>`.
 * - completions streams: `CompleteWriter.writeResponse`: with include_usage every chunk carries
 *   a zero usage object, and the usage chunk follows the finishing one.
 * - Responses: openai/responses.go `ToResponse` / `ResponsesStreamConverter`: usage
 *   `input_tokens_details.cached_tokens` is hard-coded 0 ("TODO: wire through the actual
 *   values"); `previous_response_id` is ignored and answered as null; `store: false`.
 * - reasoning: `Message.Reasoning` / `Delta.Reasoning`, JSON `reasoning`.
 * - model names: server/routes.go `ChatHandler`: an unknown model is 404 "model 'x' not found"
 *   (a name without a tag means `:latest`); none at all is 400 "model is required". The
 *   response names the model as requested.
 * - errors: openai.go `NewError`: `{error: {message, type, param: null, code: null}}`.
 * - no /metrics and no /health: routes.go `GenerateRoutes` has `GET /` ("Ollama is running"),
 *   `/api/version`, `/api/tags`, `/api/ps` (with each loaded model's `context_length`);
 *   anything else is gin's plain-text "404 page not found".
 * - a chat longer than the context loses its oldest messages until the rest fits (system
 *   messages and the last one kept: server/prompt.go chatPrompt), as Ollama does; what still
 *   does not fit, and a raw completions prompt, Ollama's runner cuts again — the sim refuses
 *   those with a 400 instead.
 * - KV: GGUF models run on llama-server (commit 9db4bdbad "use llama-server exclusively for
 *   GGML models"; the old runner/ollamarunner/cache.go is gone), so the replica runs on the
 *   slot engine (slots.ts) with the flags Ollama starts it with — llm/llama_server.go
 *   `startLlamaServer`: `-c num_ctx × numParallel -np numParallel` (an explicit -np: the KV is
 *   split per slot, not unified), `-b num_batch` from `appendBatchArgs` (api/types.go
 *   `DefaultOptions`: NumBatch 512), no `--cache-ram` (llama-server's default RAM prompt cache
 *   stays on); server/sched.go `load`: numParallel = max(OLLAMA_NUM_PARALLEL, 1), and
 *   envconfig/config.go `NumParallel` defaults to 1. Requests ask for `cache_prompt: true`
 *   (`llamaServerChatRequest`). `--kv-tokens` is that `-c`.
 */
import { ApiError } from "../_api-error.ts";
import { anthropicBody, anthropicStream, responseObject, responsesStream, splitOutput, sseData, SSE_DONE, type FormatContext, type StreamFormat } from "../_formats.ts";
import type { SequenceResult } from "../engine-api.ts";
import { isRecord } from "../prompt-text.ts";
import type { EngineProfile } from "./types.ts";

export const OLLAMA_VERSION = "0.33.0";
const FINGERPRINT = "fp_ollama";

type U = Pick<SequenceResult, "promptTokens" | "completionTokens" | "cachedTokens">;
const usage = (r: U) => ({ prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens });

/** responses.go ToResponse: cached_tokens hard-coded 0. */
const responsesUsage = (r: U) => ({
  input_tokens: r.promptTokens,
  output_tokens: r.completionTokens,
  total_tokens: r.promptTokens + r.completionTokens,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens_details: { reasoning_tokens: 0 },
});

function jsonBody(ctx: FormatContext, r: SequenceResult): unknown {
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const { content, reasoning } = splitOutput(ctx, r.text);
      return {
        id: ctx.id,
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model,
        system_fingerprint: FINGERPRINT,
        choices: [{ index: 0, message: { role: "assistant", content, ...(reasoning ? { reasoning } : {}) }, finish_reason: r.reason }],
        usage: usage(r),
      };
    }
    case "/v1/completions":
      return {
        id: ctx.id,
        object: "text_completion",
        created: ctx.created,
        model: ctx.model,
        system_fingerprint: FINGERPRINT,
        choices: [{ text: r.text, index: 0, finish_reason: r.reason }],
        usage: usage(r),
      };
    case "/v1/messages":
      return anthropicBody(ctx, r);
    case "/v1/responses":
      return responseObject(ctx, r, responsesUsage);
  }
}

function streamFormat(ctx: FormatContext): StreamFormat {
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        sseData({ id: ctx.id, object: "chat.completion.chunk", created: ctx.created, model: ctx.model, system_fingerprint: FINGERPRINT, choices, ...extra });
      let first = true;
      return {
        start: () => [],
        delta: (p) => {
          if (!p.content && !p.reasoning) return [];
          const delta = { ...(first ? { role: "assistant" } : {}), ...(p.content ? { content: p.content } : {}), ...(p.reasoning ? { reasoning: p.reasoning } : {}) };
          first = false;
          return [chunk([{ index: 0, delta, finish_reason: null }])];
        },
        end: (r) => [
          chunk([{ index: 0, delta: {}, finish_reason: r.reason }]),
          ...(ctx.includeUsage ? [chunk([], { usage: usage(r) })] : []),
          SSE_DONE,
        ],
      };
    }
    case "/v1/completions": {
      // Key order of CompletionChunk: id, object, created, choices, model, system_fingerprint, usage.
      const chunk = (choices: unknown[], u: unknown) =>
        sseData({ id: ctx.id, object: "text_completion", created: ctx.created, choices, model: ctx.model, system_fingerprint: FINGERPRINT, ...(u === undefined ? {} : { usage: u }) });
      const zero = ctx.includeUsage ? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } : undefined;
      return {
        start: () => [],
        delta: (p) => [chunk([{ text: p.content, index: 0, finish_reason: null }], zero)],
        end: (r) => [
          chunk([{ text: "", index: 0, finish_reason: r.reason }], zero),
          ...(ctx.includeUsage ? [chunk([], usage(r))] : []),
          SSE_DONE,
        ],
      };
    }
    case "/v1/messages":
      return anthropicStream(ctx);
    case "/v1/responses":
      return responsesStream(ctx, responsesUsage);
  }
}

const withoutLatest = (name: string) => (name.endsWith(":latest") ? name.slice(0, -":latest".length) : name);

export const ollamaProfile: EngineProfile = {
  name: "ollama",
  family: "ollama",
  responsesState: "ignored",
  // One slot, 512-token batches: how Ollama starts llama-server (see the header).
  slotDefaults: { parallel: 1, batchSize: 512 },
  // One slot: one prefill at a time in any order.
  prefillOrder: "shared",
  reasoningField: "reasoning",
  resolveModel(requested, served) {
    if (requested === undefined || requested === "") throw new ApiError(400, "model is required");
    if (withoutLatest(requested) !== withoutLatest(served)) throw new ApiError(404, `model '${requested}' not found`);
    return requested;
  },
  streamUsage: (so) => isRecord(so) && so.include_usage === true,
  // server/prompt.go chatPrompt: a chat longer than num_ctx loses its oldest messages until the
  // rest fits; the system messages and the last message are kept ("truncating input messages
  // which exceed context length"), answered 200 as if whole.
  cutsChatToContext: true,
  // chatPrompt measures the prompt alone against num_ctx, and llama-server stops a generation
  // at the slot's context end: a max_tokens beyond it is not refused (finish_reason "length").
  contextError(promptTokens, _maxTokens, limit) {
    if (promptTokens < limit) return undefined;
    return new ApiError(400, `the sim does not cut a prompt further than whole messages: prompt of ${promptTokens} tokens exceeds the context (${limit} tokens)`);
  },
  notFound: (headers) => ollamaNotFound(headers),
  // server/sched.go Scheduler.getRunner: a full queue (OLLAMA_MAX_QUEUE, 512) is ErrMaxQueue,
  // which server/routes.go handleScheduleError answers 503 (on the OpenAI routes through
  // middleware/openai.go BaseWriter.writeError → openai/openai.go NewError).
  queueFull: () => new ApiError(503, "server busy, please try again.  maximum pending requests exceeded"),
  errorResponse(e, headers) {
    const type = e.status === 400 ? "invalid_request_error" : e.status === 404 ? "not_found_error" : "api_error";
    return Response.json({ error: { message: e.message, type, param: null, code: null } }, { status: e.status, headers });
  },
  jsonBody,
  streamFormat,
  route(method, path, replica, headers) {
    if (method !== "GET" && method !== "HEAD") return undefined;
    if (path === "/") return new Response(method === "HEAD" ? null : "Ollama is running", { headers: { ...headers, "content-type": "text/plain; charset=utf-8" } });
    if (path === "/api/version") return Response.json({ version: OLLAMA_VERSION }, { headers });
    const name = replica.model.includes(":") ? replica.model : `${replica.model}:latest`;
    const details = { parent_model: "", format: "gguf", family: "qwen2", families: ["qwen2"], parameter_size: "7.6B", quantization_level: "Q4_K_M" };
    const startedAt = new Date(replica.startedAtUnixMs).toISOString();
    if (path === "/api/tags") {
      return Response.json({ models: [{ name, model: name, modified_at: startedAt, size: 4_683_087_332, digest: "sim", details }] }, { headers });
    }
    if (path === "/api/ps") {
      // server/routes.go PsHandler: the loaded runners only (residency.ts): none before a
      // request loads the model, none once keep_alive has unloaded it.
      const expiresAt = replica.resident?.expiresAt();
      if (expiresAt === undefined) return Response.json({ models: [] }, { headers });
      return Response.json(
        {
          models: [
            {
              name,
              model: name,
              size: 4_683_087_332,
              digest: "sim",
              details,
              expires_at: new Date(expiresAt).toISOString(),
              size_vram: 4_683_087_332,
              context_length: replica.contextLimit,
            },
          ],
        },
        { headers },
      );
    }
    if (method === "GET" && path === "/v1/models") {
      // openai.go ToListCompletion: owned_by is the name's namespace ("library" by default).
      return Response.json({ object: "list", data: [{ id: name, object: "model", created: Math.floor(replica.startedAtUnixMs / 1000), owned_by: "library" }] }, { headers });
    }
    return undefined;
  },
};

/** gin's default 404 for a route Ollama does not have (/health, /metrics, …). */
export function ollamaNotFound(headers: Record<string, string>): Response {
  return new Response("404 page not found", { status: 404, headers: { ...headers, "content-type": "text/plain" } });
}
