/**
 * Ollama, as its own source says. Paths are in the ollama/ollama repository.
 */
import { errorMessage, type EngineProfile, type ResidentModel } from "./profile.ts";
import { stringField } from "./vllm.ts";

export const OLLAMA: EngineProfile = {
  family: "ollama",
  label: "Ollama",
  // openai/openai.go ListCompletion: OwnedBy is the model name's namespace, "library" by
  // default (types/model/name.go defaultNamespace).
  ownedBy: (v) => v === "library",
  // No /metrics endpoint.
  metrics: {},
  cacheCounters: () => undefined,
  usage: {
    // openai/openai.go Usage: prompt_tokens, completion_tokens, total_tokens — no cached field.
    cached: "never",
    zeroOmitted: false,
    // openai/responses.go: `InputTokensDetails: ResponsesInputTokensDetails{CachedTokens: 0}`,
    // whatever the runner reused: a constant, never a miss.
    responsesConstant: true,
  },
  // openai/openai.go: the usage chunk only with stream_options.include_usage.
  stream: { usageUnasked: () => false },
  anyModelName: false,
  // types/model/name.go: a name without a tag means ":latest" (ParseName fills the default
  // tag), and /v1/models lists the tagged name, "qwen3:latest".
  sameModel: (requested, listed) => requested === listed || `${requested}:latest` === listed,
  // Since v0.30.0 a GGUF model runs on llama-server alone (commit 9db4bdbad "Remove CGO
  // engines, use llama-server exclusively for GGML models" removed the Go runner,
  // runner/ollamarunner/cache.go with it). llm/llama_server.go llamaServerRunner.Completion
  // sends it `cache_prompt: true`, so a slot's prompt is reused up to the longest common
  // prefix, token by token (llama.cpp tools/server/server-context.cpp). Safetensors models run
  // on the MLX runner instead, whose prompt cache is a token trie (x/mlxrunner/cache_trie.go).
  blockTokens: 1,
  // llm/llama_server.go startLlamaServer passes no --cache-ram: llama-server's host-RAM prompt
  // cache stays on at its default.
  ramPromptCache: true,
  // llm/llama_server.go: Ollama runs llama-server with -np OLLAMA_NUM_PARALLEL, 1 by default
  // (envconfig/config.go): one prefill at a time, the rest queue.
  prefillConcurrency: () => 1,
  // The same llama-server slots, 1 unless OLLAMA_NUM_PARALLEL says more (which no endpoint
  // tells): the router counts at least as many as it has seen streaming at once.
  servingSlots: () => 1,
  // server/routes.go: GET /api/version → {"version": "…"}.
  version: { path: "/api/version", read: (b) => stringField(b, "version") },
  // server/routes.go GenerateRoutes has no /health (gin answers 404 "404 page not found");
  // GET /api/version answers 200 as soon as the server listens, before any model is loaded.
  healthPath: "/api/version",
  // server/sched.go Scheduler.getRunner: a request that must wait for a model (re)load goes through the
  // scheduler's queue (OLLAMA_MAX_QUEUE, 512 by default: envconfig/config.go MaxQueue); full,
  // it gets ErrMaxQueue, which server/routes.go handleScheduleError answers 503, on the OpenAI
  // routes as {"error":{"message":"server busy, please try again.  maximum pending requests
  // exceeded","type":"api_error",…}} (middleware/openai.go BaseWriter.writeError → openai/openai.go NewError).
  busy: (error) => errorMessage(error)?.startsWith("server busy, please try again.") ?? false,
  // server/routes.go PsHandler lists the scheduler's loaded runners (s.sched.loaded). A runner
  // idle for keep_alive (OLLAMA_KEEP_ALIVE, 5 min by default: envconfig/config.go KeepAlive) is
  // unloaded — server/sched.go processCompleted arms expireTimer when refCount reaches 0, and
  // the expired runner is unloaded, its llama-server process stopped (llm/server.go Close) —
  // and so is one evicted to make room for another model: its KV and RAM prompt cache with it.
  resident: { path: "/api/ps", read: ollamaResident },
  // server/prompt.go chatPrompt: with truncate on (the request's `truncate`, on by default), a
  // chat longer than num_ctx loses its oldest messages (the system messages and the last one are
  // kept) until the rest fits ("truncating input messages which exceed context length"),
  // answered 200 as if whole. num_ctx: OLLAMA_CONTEXT_LENGTH (envconfig/config.go
  // ContextLength) or the model's num_ctx parameter.
  cutsLongPrompts: {
    how: "Ollama drops the oldest messages until the rest fits (server/prompt.go chatPrompt): the prompt starts differently every turn, so its cache cannot be reused, and the model never sees the start",
    fix: "raise OLLAMA_CONTEXT_LENGTH, or the model's num_ctx",
  },
};

/**
 * Ollama's GET /api/ps: api/types.go ProcessResponse{models: [ProcessModelResponse{name, model,
 * …, expires_at, context_length}]}. server/routes.go PsHandler fills context_length from the
 * loaded runner's ContextLength(), its options.NumCtx: one request's context (llama-server
 * is started with -c num_ctx × numParallel: llm/llama_server.go startLlamaServer).
 */
export function ollamaResident(body: unknown): ResidentModel[] | undefined {
  const models = body && typeof body === "object" ? (body as { models?: unknown }).models : undefined;
  if (!Array.isArray(models)) return undefined;
  const out: ResidentModel[] = [];
  for (const m of models) {
    const name = stringField(m, "name") ?? stringField(m, "model");
    if (!name) continue;
    const context = Number((m as { context_length?: unknown }).context_length);
    const expires = Date.parse(stringField(m, "expires_at") ?? "");
    out.push({ name, ...(context > 0 ? { contextLength: context } : {}), ...(Number.isFinite(expires) ? { expiresAt: expires } : {}) });
  }
  return out;
}
