/**
 * Building blocks of response bodies and SSE events that every engine profile shares:
 * the SSE framing, the reasoning split of a reply, and the two APIs whose shape the sim does
 * not profile per engine (Anthropic Messages: named events, no [DONE]; the Responses API:
 * named events with `sequence_number`) apart from their usage object. Chat and completions
 * bodies and chunks are each profile's own (profiles/*.ts).
 */
import type { ReasoningReply } from "./chat-templates.ts";
import type { FinishReason, SequenceResult } from "./engine-api.ts";
import type { Endpoint } from "./prompt-text.ts";

export interface FormatContext {
  endpoint: Endpoint;
  /** Response id (chatcmpl-…, cmpl-…, msg_…, resp_…). */
  id: string;
  /** Output item id (Responses API). */
  itemId: string;
  /** The model name the response carries (each profile decides: the served name or the requested one). */
  model: string;
  /** Unix seconds. */
  created: number;
  /** Whether this stream carries usage (the profile's rule applied to stream_options). */
  includeUsage: boolean;
  /** Requested output length (undefined = the sim's default). */
  maxTokens: number | undefined;
  /** Tokens the engine will generate if nothing stops it, and the finish reason then. */
  plannedTokens: number;
  finishReason: FinishReason;
  instructions?: string | undefined;
  previousResponseId?: string | undefined;
  store?: boolean;
  /** A reasoning template's reply layout (undefined = plain text). */
  reply?: ReasoningReply | undefined;
  /** Real ms since submit, read when a body or the last event is written (llama.cpp timings). */
  elapsedMs(): number;
}

/** One generated token as an API shows it: its answer part and its reasoning part (either may be ""). */
export interface TokenPiece {
  index: number;
  content: string;
  reasoning: string;
  /** The last token the engine will produce when nothing stops it early. */
  last: boolean;
}

/** SSE events of one streaming response; `start` goes out with the first token. */
export interface StreamFormat {
  start(prompt: { promptTokens: number; cachedTokens: number }): string[];
  delta(piece: TokenPiece): string[];
  end(result: SequenceResult): string[];
}

export const sseData = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
export const sseEvent = (type: string, obj: unknown) => `event: ${type}\ndata: ${JSON.stringify(obj)}\n\n`;
export const SSE_DONE = "data: [DONE]\n\n";

/** A reply's text as the API returns it: reasoning apart only when the template's parser separates it. */
export function splitOutput(ctx: Pick<FormatContext, "reply">, text: string): { content: string; reasoning: string | undefined } {
  if (!ctx.reply?.shape.separate) return { content: text, reasoning: undefined };
  const { content, reasoning } = ctx.reply.split(text);
  return { content, reasoning };
}

/** The split of generated token `index` (text `text`), for stream deltas. */
export function tokenPiece(ctx: Pick<FormatContext, "reply" | "plannedTokens">, text: string, index: number, charsPerToken: number): TokenPiece {
  const last = index === ctx.plannedTokens - 1;
  const reply = ctx.reply;
  if (!reply?.shape.separate) return { index, content: text, reasoning: "", last };
  const start = index * charsPerToken;
  const cut = (from: number, to: number) => text.slice(Math.max(0, Math.min(text.length, from - start)), Math.max(0, Math.min(text.length, to - start)));
  return { index, reasoning: cut(reply.reasoningStart, reply.reasoningEnd), content: cut(reply.answerStart, Infinity), last };
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

type Usage = Pick<SequenceResult, "promptTokens" | "completionTokens" | "cachedTokens">;

// --- Anthropic Messages --------------------------------------------------------------------

/** Anthropic's usage: input_tokens excludes tokens read from cache. */
export function anthropicUsage(r: Usage) {
  return {
    input_tokens: r.promptTokens - r.cachedTokens,
    output_tokens: r.completionTokens,
    cache_read_input_tokens: r.cachedTokens,
    cache_creation_input_tokens: 0,
  };
}

export function anthropicBody(ctx: FormatContext, r: SequenceResult): unknown {
  const { content, reasoning } = splitOutput(ctx, r.text);
  return {
    id: ctx.id,
    type: "message",
    role: "assistant",
    model: ctx.model,
    content: [...(reasoning === undefined ? [] : [{ type: "thinking", thinking: reasoning, signature: "" }]), { type: "text", text: content }],
    stop_reason: r.reason === "length" ? "max_tokens" : "end_turn",
    stop_sequence: null,
    usage: anthropicUsage(r),
  };
}

export function anthropicStream(ctx: FormatContext): StreamFormat {
  // One text block; reasoning (when a template separates it) goes into a thinking block before it.
  let block = -1;
  let kind: "thinking" | "text" | undefined;
  const open = (next: "thinking" | "text") => {
    const out: string[] = [];
    if (kind !== undefined) out.push(sseEvent("content_block_stop", { type: "content_block_stop", index: block }));
    block++;
    kind = next;
    const contentBlock = next === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "", signature: "" };
    out.push(sseEvent("content_block_start", { type: "content_block_start", index: block, content_block: contentBlock }));
    return out;
  };
  return {
    start: (p) => [
      sseEvent("message_start", {
        type: "message_start",
        message: {
          id: ctx.id,
          type: "message",
          role: "assistant",
          model: ctx.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: anthropicUsage({ ...p, completionTokens: 1 }),
        },
      }),
      ...open(ctx.reply?.shape.separate ? "thinking" : "text"),
      sseEvent("ping", { type: "ping" }),
    ],
    delta: (piece) => {
      const out: string[] = [];
      if (piece.reasoning) {
        if (kind !== "thinking") out.push(...open("thinking"));
        out.push(sseEvent("content_block_delta", { type: "content_block_delta", index: block, delta: { type: "thinking_delta", thinking: piece.reasoning } }));
      }
      if (piece.content) {
        if (kind !== "text") out.push(...open("text"));
        out.push(sseEvent("content_block_delta", { type: "content_block_delta", index: block, delta: { type: "text_delta", text: piece.content } }));
      }
      return out;
    },
    end: (r) => [
      sseEvent("content_block_stop", { type: "content_block_stop", index: block }),
      sseEvent("message_delta", {
        type: "message_delta",
        delta: { stop_reason: r.reason === "length" ? "max_tokens" : "end_turn", stop_sequence: null },
        usage: anthropicUsage(r),
      }),
      sseEvent("message_stop", { type: "message_stop" }),
    ],
  };
}

// --- Responses API ---------------------------------------------------------------------------

/** The Responses usage with cached tokens (vLLM reports them whatever its flags). */
export function responsesUsage(r: Usage, cachedTokens = r.cachedTokens) {
  return {
    input_tokens: r.promptTokens,
    input_tokens_details: { cached_tokens: cachedTokens },
    output_tokens: r.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: r.promptTokens + r.completionTokens,
  };
}

export type ResponsesUsageFn = (r: SequenceResult) => unknown;

export function responseObject(ctx: FormatContext, r: SequenceResult | undefined, usage: ResponsesUsageFn = responsesUsage): Record<string, unknown> {
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
    output: complete ? outputItems(ctx, r.text) : [],
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
    usage: complete ? usage(r) : null,
    metadata: {},
  };
}

function outputItems(ctx: FormatContext, text: string) {
  const { content, reasoning } = splitOutput(ctx, text);
  return [
    ...(reasoning === undefined ? [] : [{ type: "reasoning", id: `rs_${ctx.itemId.slice(4)}`, summary: [], content: [{ type: "reasoning_text", text: reasoning }] }]),
    messageItem(ctx, content, "completed"),
  ];
}

function messageItem(ctx: FormatContext, text: string, status: "in_progress" | "completed") {
  return {
    type: "message",
    id: ctx.itemId,
    status,
    role: "assistant",
    content: status === "completed" ? [{ type: "output_text", text, annotations: [] }] : [],
  };
}

export function responsesStream(ctx: FormatContext, usage: ResponsesUsageFn = responsesUsage): StreamFormat {
  let seq = 0;
  let text = "";
  const ev = (type: string, body: Record<string, unknown>) => sseEvent(type, { type, sequence_number: seq++, ...body });
  const part = (t: string) => ({ type: "output_text", text: t, annotations: [] });
  const where = { item_id: ctx.itemId, output_index: 0, content_index: 0 };
  return {
    start: () => [
      ev("response.created", { response: responseObject(ctx, undefined, usage) }),
      ev("response.in_progress", { response: responseObject(ctx, undefined, usage) }),
      ev("response.output_item.added", { output_index: 0, item: messageItem(ctx, "", "in_progress") }),
      ev("response.content_part.added", { ...where, part: part("") }),
    ],
    delta: (piece) => {
      if (!piece.content) return [];
      text += piece.content;
      return [ev("response.output_text.delta", { ...where, delta: piece.content, logprobs: [] })];
    },
    end: (r) => [
      ev("response.output_text.done", { ...where, text, logprobs: [] }),
      ev("response.content_part.done", { ...where, part: part(text) }),
      ev("response.output_item.done", { output_index: 0, item: messageItem(ctx, text, "completed") }),
      ev(r.reason === "length" ? "response.incomplete" : "response.completed", { response: responseObject(ctx, r, usage) }),
    ],
  };
}
