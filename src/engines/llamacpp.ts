/**
 * llama.cpp's llama-server, as its own source says (tools/server/ in ggml-org/llama.cpp, at
 * the commit of the node-llama-cpp npm package the project builds from) and as a real
 * server showed (test/system/, `npm run test:system`).
 */
import { errorMessage, sum, type EngineProfile } from "./profile.ts";

export const LLAMACPP: EngineProfile = {
  family: "llamacpp",
  label: "llama.cpp",
  // server-context.cpp get_res_model_info: {"owned_by", "llamacpp"}.
  ownedBy: (v) => v === "llamacpp",
  metricPrefix: "llamacpp:",
  // server-task.cpp server_task_result_metrics::to_metrics; only with --metrics.
  // `llamacpp:n_tokens_max` is NOT the KV capacity: its HELP says "Largest observed sequence
  // length (prompt + generation)", a counter (13,148 after a 13k-token prompt).
  metrics: {
    running: ["llamacpp:requests_processing"],
    waiting: ["llamacpp:requests_deferred"],
    // "Number of prompt tokens processed, excluding cached tokens"
    prompt_tokens: ["llamacpp:prompt_tokens_total"],
    // "Number of prompt tokens reused from the cache"
    cached_tokens: ["llamacpp:prompt_tokens_cached_total"],
    // "Total time spent processing prompts": with prompt_tokens, the real prefill rate.
    prompt_seconds: ["llamacpp:prompt_seconds_total"],
    generation_tokens: ["llamacpp:tokens_predicted_total"],
  },
  // prompt_tokens_total excludes the cached tokens (server-common.h server_metrics: "only
  // processed tokens, cached ones are counted separately"): looked up = both.
  cacheCounters(metrics) {
    const hits = sum(metrics, "llamacpp:prompt_tokens_cached_total");
    const processed = sum(metrics, "llamacpp:prompt_tokens_total");
    if (hits === undefined || processed === undefined) return undefined;
    return { hits, queries: processed + hits, names: ["llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"] };
  },
  // Capacity is not on /metrics: /props has total_slots and default_generation_settings.n_ctx
  // (per slot; server-context.cpp get_res_props), /v1/models meta.n_ctx (per slot).
  // server-context.cpp get_metrics: the header carries server_metrics::t_start, which is
  // ggml_time_us() at start — CLOCK_MONOTONIC microseconds, not a Unix time: compared, never read.
  startTimeHeader: "process-start-time-unix",
  usage: {
    // server-task.cpp usage_json_oaicompat: prompt_tokens_details.cached_tokens on every
    // response, beside timings.cache_n (server_slot_stats::to_json; equal in a real run).
    cached: "always",
    zeroOmitted: false,
    responsesConstant: false,
  },
  // server-task.cpp to_json_oaicompat_chat_stream: without include_usage the last chunk still
  // carries `timings` (server-common.cpp server_slot_stats::to_json: cache_n, prompt_n, …;
  // server-task.cpp result_timings::to_json before the August 2026 metrics refactor); with it,
  // usage and timings move onto an extra `choices: []` chunk. Completions streams put `usage`
  // on the final chunk unasked. So the router adds nothing and strips nothing: the client gets
  // the engine's bytes.
  stream: { usageUnasked: () => true },
  // A single-model llama-server does not check `model` (any value is served); with several
  // models (router mode, server-models.cpp) names matter — the fleet applies this only to a
  // replica listing one model.
  anyModelName: true,
  // The slot's cached tokens are reused up to the longest common prefix, token by token.
  blockTokens: 1,
  // The host-RAM prompt cache (--cache-ram, common/common.h cache_ram_mib = 8192) keeps a
  // slot's prompt when the slot takes another and loads it back for a request that matches it.
  ramPromptCache: true,
  // server-context.cpp update_slots: every slot processing a prompt adds its next chunk to the
  // one batch of a step (up to n_batch): as many prefills share the card as there are slots;
  // a request waits for a free slot beyond that.
  prefillConcurrency: (capacity) => capacity?.slots ?? 1,
  // server-context.cpp process_single_task: a task that finds no idle slot is deferred
  // (queue_tasks.defer) until a slot is released after its request's last token.
  servingSlots: (capacity) => capacity?.slots,
  metricsFlag: "--metrics",
  // A unified KV (llama-server's default without --parallel: 4 slots, kv_unified) holds every
  // running request in one n_ctx pool. server-context.cpp update_slots: when llama_decode finds
  // no room even for a batch of one token, every processing slot gets send_error("Context size
  // has been exceeded.", ERROR_TYPE_SERVER), is released and its prompt cleared. Seen on the
  // real server (2 Dec 2026, -c 8192, two concurrent ~4.5k-token prompts): non-streamed, HTTP
  // 500 {"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}};
  // streamed, HTTP 200 and that object as the stream's first and only event. The request is
  // fine (a prompt over the context is a 400, exceed_context_size_error): the card was full.
  kvFull: (error) => errorMessage(error) === "Context size has been exceeded.",
  // server-queue.cpp server_response_reader::next parses a slot's final result (server-task.h
  // server_task_result_cmpl_final::update → common/chat.cpp common_chat_peg_parse) after the
  // slot sent it and kept its tokens; output the template's parser rejects becomes HTTP 500
  // "The model produced output that does not match the expected <format> format". Real run
  // (2 Dec 2026, 80fb11a): the same request sent again found all its tokens but the last
  // cached, 4 of 4 (408- and 767-token prompts); test/system/llamacpp-router.test.ts checks it
  // through the router, forcing the break with logit_bias.
  keptPrompt: (error) => errorMessage(error)?.startsWith("The model produced output that does not match the expected ") ?? false,
  // /props build_info: "b<N>-<commit>".
  version: { path: "/props", read: (b) => (b && typeof b === "object" && typeof (b as { build_info?: unknown }).build_info === "string" ? (b as { build_info: string }).build_info : undefined) },
};

/** llama.cpp's /props: slots and the context of each (server-context.cpp get_res_props). */
export function llamacppCapacity(props: unknown): { kvTokens: number; slots: number; blockTokens: number; source: string } | undefined {
  if (!props || typeof props !== "object") return undefined;
  const p = props as { total_slots?: unknown; default_generation_settings?: { n_ctx?: unknown } };
  const slots = Number(p.total_slots);
  const perSlot = Number(p.default_generation_settings?.n_ctx);
  if (!(slots >= 1) || !(perSlot >= 1)) return undefined;
  return { kvTokens: slots * perSlot, slots, blockTokens: 1, source: "/props" };
}
