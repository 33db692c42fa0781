/**
 * Response bodies and SSE events for the four generation APIs, per ../shared/REFERENCE.md:
 * OpenAI chat and completions (vLLM's chunk shapes, `stream_options.include_usage` adds a
 * `choices: []` usage chunk before `data: [DONE]`), Anthropic Messages (named events, no
 * [DONE]) and the Responses API (named events with `sequence_number`).
 */
import type { FinishReason, SequenceResult } from "./engine.ts";
import type { Endpoint } from "./template.ts";

export interface FormatContext {
  endpoint: Endpoint;
  /** Response id (chatcmpl-…, cmpl-…, msg_…, resp_…). */
  id: string;
  /** Output item id (Responses API). */
  itemId: string;
  model: string;
  /** Unix seconds. */
  created: number;
  includeUsage: boolean;
  maxTokens: number | undefined;
  instructions?: string | undefined;
  previousResponseId?: string | undefined;
  store?: boolean;
}

/** The usage a result reports, as each API spells it. */
export function usageOf(endpoint: Endpoint, r: Pick<SequenceResult, "promptTokens" | "completionTokens" | "cachedTokens">) {
  switch (endpoint) {
    case "/v1/messages":
      // Anthropic's input_tokens excludes tokens read from cache.
      return {
        input_tokens: r.promptTokens - r.cachedTokens,
        output_tokens: r.completionTokens,
        cache_read_input_tokens: r.cachedTokens,
        cache_creation_input_tokens: 0,
      };
    case "/v1/responses":
      return {
        input_tokens: r.promptTokens,
        input_tokens_details: { cached_tokens: r.cachedTokens },
        output_tokens: r.completionTokens,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: r.promptTokens + r.completionTokens,
      };
    default:
      return {
        prompt_tokens: r.promptTokens,
        completion_tokens: r.completionTokens,
        total_tokens: r.promptTokens + r.completionTokens,
        prompt_tokens_details: { cached_tokens: r.cachedTokens },
      };
  }
}

export function idPrefix(endpoint: Endpoint): string {
  switch (endpoint) {
    case "/v1/chat/completions":
      return "chatcmpl-";
    case "/v1/completions":
      return "cmpl-";
    case "/v1/messages":
      return "msg_";
    case "/v1/responses":
      return "resp_";
  }
}

/** The whole non-streaming body. */
export function jsonBody(ctx: FormatContext, r: SequenceResult): unknown {
  const finish = r.reason as FinishReason;
  switch (ctx.endpoint) {
    case "/v1/chat/completions":
      return {
        id: ctx.id,
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: r.text, refusal: null, tool_calls: [] },
            logprobs: null,
            finish_reason: finish,
          },
        ],
        usage: usageOf(ctx.endpoint, r),
      };
    case "/v1/completions":
      return {
        id: ctx.id,
        object: "text_completion",
        created: ctx.created,
        model: ctx.model,
        choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: finish }],
        usage: usageOf(ctx.endpoint, r),
      };
    case "/v1/messages":
      return {
        id: ctx.id,
        type: "message",
        role: "assistant",
        model: ctx.model,
        content: [{ type: "text", text: r.text }],
        stop_reason: finish === "length" ? "max_tokens" : "end_turn",
        stop_sequence: null,
        usage: usageOf(ctx.endpoint, r),
      };
    case "/v1/responses":
      return responseObject(ctx, r);
  }
}

export function responseObject(ctx: FormatContext, r: SequenceResult | undefined): Record<string, unknown> {
  const complete = r !== undefined;
  const incomplete = r?.reason === "length";
  return {
    id: ctx.id,
    object: "response",
    created_at: ctx.created,
    status: !complete ? "in_progress" : incomplete ? "incomplete" : "completed",
    error: null,
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    instructions: ctx.instructions ?? null,
    max_output_tokens: ctx.maxTokens ?? null,
    model: ctx.model,
    output: complete ? [outputItem(ctx, r.text, "completed")] : [],
    parallel_tool_calls: true,
    previous_response_id: ctx.previousResponseId ?? null,
    reasoning: { effort: null, summary: null },
    store: ctx.store ?? true,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage: complete ? usageOf(ctx.endpoint, r) : null,
    metadata: {},
  };
}

function outputItem(ctx: FormatContext, text: string, status: "in_progress" | "completed") {
  return {
    type: "message",
    id: ctx.itemId,
    status,
    role: "assistant",
    content: status === "completed" ? [{ type: "output_text", text, annotations: [] }] : [],
  };
}

/** SSE events of one streaming response; `start` goes out with the first token. */
export interface StreamFormat {
  start(prompt: { promptTokens: number; cachedTokens: number }): string[];
  delta(text: string): string[];
  end(result: SequenceResult): string[];
}

const data = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
const event = (type: string, obj: unknown) => `event: ${type}\ndata: ${JSON.stringify(obj)}\n\n`;

/** One OpenAI-style SSE chunk (chat and completions differ only in `object`). */
function openAiChunk(ctx: FormatContext, object: string) {
  return (choices: unknown[], extra: Record<string, unknown> = {}) =>
    data({
      id: ctx.id,
      object,
      created: ctx.created,
      model: ctx.model,
      choices,
      ...(ctx.includeUsage ? { usage: null } : {}),
      ...extra,
    });
}

export function streamFormat(ctx: FormatContext): StreamFormat {
  switch (ctx.endpoint) {
    case "/v1/chat/completions": {
      const chunk = openAiChunk(ctx, "chat.completion.chunk");
      return {
        start: () => [chunk([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }])],
        delta: (text) => [chunk([{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }])],
        end: (r) => [
          chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: r.reason }]),
          ...(ctx.includeUsage ? [chunk([], { usage: usageOf(ctx.endpoint, r) })] : []),
          "data: [DONE]\n\n",
        ],
      };
    }
    case "/v1/completions": {
      const chunk = openAiChunk(ctx, "text_completion");
      return {
        start: () => [],
        delta: (text) => [chunk([{ index: 0, text, logprobs: null, finish_reason: null }])],
        end: (r) => [
          chunk([{ index: 0, text: "", logprobs: null, finish_reason: r.reason }]),
          ...(ctx.includeUsage ? [chunk([], { usage: usageOf(ctx.endpoint, r) })] : []),
          "data: [DONE]\n\n",
        ],
      };
    }
    case "/v1/messages":
      return {
        start: (p) => [
          event("message_start", {
            type: "message_start",
            message: {
              id: ctx.id,
              type: "message",
              role: "assistant",
              model: ctx.model,
              content: [],
              stop_reason: null,
              stop_sequence: null,
              usage: usageOf(ctx.endpoint, { ...p, completionTokens: 1 }),
            },
          }),
          event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
          event("ping", { type: "ping" }),
        ],
        delta: (text) => [
          event("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } }),
        ],
        end: (r) => [
          event("content_block_stop", { type: "content_block_stop", index: 0 }),
          event("message_delta", {
            type: "message_delta",
            delta: { stop_reason: r.reason === "length" ? "max_tokens" : "end_turn", stop_sequence: null },
            usage: usageOf(ctx.endpoint, r),
          }),
          event("message_stop", { type: "message_stop" }),
        ],
      };
    case "/v1/responses": {
      let seq = 0;
      let text = "";
      const ev = (type: string, body: Record<string, unknown>) => event(type, { type, sequence_number: seq++, ...body });
      const part = (t: string) => ({ type: "output_text", text: t, annotations: [] });
      const where = { item_id: ctx.itemId, output_index: 0, content_index: 0 };
      return {
        start: () => [
          ev("response.created", { response: responseObject(ctx, undefined) }),
          ev("response.in_progress", { response: responseObject(ctx, undefined) }),
          ev("response.output_item.added", { output_index: 0, item: outputItem(ctx, "", "in_progress") }),
          ev("response.content_part.added", { ...where, part: part("") }),
        ],
        delta: (t) => {
          text += t;
          return [ev("response.output_text.delta", { ...where, delta: t, logprobs: [] })];
        },
        end: (r) => [
          ev("response.output_text.done", { ...where, text, logprobs: [] }),
          ev("response.content_part.done", { ...where, part: part(text) }),
          ev("response.output_item.done", { output_index: 0, item: outputItem(ctx, text, "completed") }),
          ev(r.reason === "length" ? "response.incomplete" : "response.completed", { response: responseObject(ctx, r) }),
        ],
      };
    }
  }
}
