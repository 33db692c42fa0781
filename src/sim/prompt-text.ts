/**
 * Request bodies → the text a real engine would tokenize.
 *
 * Chat-shaped requests (chat, Anthropic messages, Responses) become one list of messages,
 * rendered by the replica's chat template (chat-templates.ts; ChatML by default, where the
 * next turn's rendering starts with exactly the text the engine computed, so a continuation
 * hits the cache the way it does on vLLM). Plain completions are used as-is.
 */
import { ApiError } from "./_api-error.ts";
import { chatmlToolCall, renderTemplate, type TemplateName } from "./chat-templates.ts";

export { renderChat } from "./chat-templates.ts";

export const ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"] as const;
export type Endpoint = (typeof ENDPOINTS)[number];

export function isEndpoint(path: string): path is Endpoint {
  return (ENDPOINTS as readonly string[]).includes(path);
}

/** One tool call an assistant message carries. */
export interface ToolCallPart {
  id?: string;
  name: string;
  /** JSON text, as the API carries it. */
  arguments: string;
}

export interface ChatMessage {
  role: string;
  /** Text only; tool calls and results are kept apart so each template writes its own markup. */
  content: string;
  /** Reasoning sent back with an assistant message (`reasoning_content` / `reasoning`). */
  reasoning?: string;
  toolCalls?: ToolCallPart[];
  /** The call a tool message answers. */
  toolCallId?: string;
}

/** What the engine needs from a generation request, whatever its API. */
export interface ParsedRequest {
  endpoint: Endpoint;
  /** As sent (undefined = not sent). */
  model: string | undefined;
  stream: boolean;
  /** stream_options as sent (undefined = absent); each engine profile decides what it means. */
  streamOptions: unknown;
  /** Requested output length; undefined = the sim's default (finish "stop"). */
  maxTokens: number | undefined;
  /** vLLM cache_salt: only hits cache computed with the same salt. */
  salt: string | undefined;
  /** The rendered prompt. */
  prompt: string;
  /** Responses API: the conversation without instructions, to store with the reply. */
  conversation?: ChatMessage[];
  instructions?: string;
  previousResponseId?: string;
  /** Responses API `store` (default true). */
  store: boolean;
}

/** Look up a stored Responses conversation by id (per replica). */
export type PreviousLookup = (id: string) => ChatMessage[] | undefined;

/**
 * Parse and render one generation request. Throws ApiError (400 bad body, 404 unknown
 * previous_response_id). `previous` undefined = this engine keeps no Responses state, and the
 * id is ignored (Ollama).
 */
export function parseRequest(
  endpoint: Endpoint,
  body: unknown,
  previous: PreviousLookup | undefined = () => undefined,
  template: TemplateName = "chatml",
): ParsedRequest {
  if (!isRecord(body)) throw new ApiError(400, "the request body must be a JSON object");
  const n = body.n;
  if (n !== undefined && n !== null && n !== 1) throw new ApiError(400, "the sim generates one choice per request (n must be 1)", { param: "n" });
  const base = {
    endpoint,
    model: optionalString(body, "model"),
    stream: body.stream === true,
    salt: optionalString(body, "cache_salt"),
    store: true,
  };
  switch (endpoint) {
    case "/v1/chat/completions": {
      const messages = chatMessages(body.messages);
      return {
        ...base,
        streamOptions: body.stream_options ?? undefined,
        maxTokens: maxTokens(body, "max_completion_tokens") ?? maxTokens(body, "max_tokens"),
        prompt: renderTemplate(template, messages, body.tools),
      };
    }
    case "/v1/completions":
      return {
        ...base,
        streamOptions: body.stream_options ?? undefined,
        maxTokens: maxTokens(body, "max_tokens"),
        prompt: completionPrompt(body.prompt),
      };
    case "/v1/messages": {
      const system = body.system === undefined || body.system === null ? undefined : blocksText(body.system, "system");
      const messages = anthropicMessages(body.messages);
      const head = system === undefined ? [] : [{ role: "system", content: system }];
      return {
        ...base,
        streamOptions: undefined,
        maxTokens: maxTokens(body, "max_tokens"),
        prompt: renderTemplate(template, [...head, ...messages], body.tools),
      };
    }
    case "/v1/responses": {
      const instructions = optionalString(body, "instructions");
      const previousResponseId = optionalString(body, "previous_response_id");
      let history: ChatMessage[] = [];
      if (previousResponseId !== undefined && previous) {
        const found = previous(previousResponseId);
        if (!found) {
          throw new ApiError(404, `Response with id '${previousResponseId}' not found.`, { param: "previous_response_id" });
        }
        history = found;
      }
      const conversation = [...history, ...responsesInput(body.input)];
      const head = instructions === undefined ? [] : [{ role: "system", content: instructions }];
      return {
        ...base,
        streamOptions: undefined,
        maxTokens: maxTokens(body, "max_output_tokens"),
        prompt: renderTemplate(template, [...head, ...conversation], body.tools),
        conversation,
        instructions,
        previousResponseId,
        store: body.store !== false,
      };
    }
  }
}

/** vLLM /tokenize and llama.cpp /tokenize bodies → the text to count. */
export function tokenizeText(body: unknown, template: TemplateName = "chatml"): { text: string; llamacpp: boolean } {
  if (!isRecord(body)) throw new ApiError(400, "the request body must be a JSON object");
  if (typeof body.content === "string") return { text: body.content, llamacpp: true };
  if (body.messages !== undefined) {
    const add = body.add_generation_prompt !== false;
    return { text: renderTemplate(template, chatMessages(body.messages), body.tools, add), llamacpp: false };
  }
  if (body.prompt !== undefined) return { text: completionPrompt(body.prompt), llamacpp: false };
  throw new ApiError(400, "tokenize needs `prompt`, `messages` (vLLM) or `content` (llama.cpp)");
}

// ---------------------------------------------------------------------------------------

function chatMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) throw new ApiError(400, "`messages` must be a non-empty array", { param: "messages" });
  return value.map((m, i) => {
    if (!isRecord(m) || typeof m.role !== "string") throw new ApiError(400, `messages[${i}] needs a string \`role\``, { param: "messages" });
    const message: ChatMessage = {
      role: m.role,
      content: m.content === undefined || m.content === null ? "" : partsText(m.content, `messages[${i}].content`),
    };
    // vLLM has read both names for the reasoning an agent sends back.
    const reasoning = typeof m.reasoning_content === "string" ? m.reasoning_content : typeof m.reasoning === "string" ? m.reasoning : undefined;
    if (reasoning !== undefined) message.reasoning = reasoning;
    if (Array.isArray(m.tool_calls)) {
      message.toolCalls = m.tool_calls.map((call) => {
        const fn = isRecord(call) && isRecord(call.function) ? call.function : {};
        const part: ToolCallPart = {
          name: typeof fn.name === "string" ? fn.name : "",
          arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
        };
        if (isRecord(call) && typeof call.id === "string") part.id = call.id;
        return part;
      });
    }
    if (typeof m.tool_call_id === "string") message.toolCallId = m.tool_call_id;
    return message;
  });
}

function anthropicMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) throw new ApiError(400, "`messages` must be a non-empty array", { param: "messages" });
  return value.map((m, i) => {
    if (!isRecord(m) || typeof m.role !== "string") throw new ApiError(400, `messages[${i}] needs a string \`role\``, { param: "messages" });
    return { role: m.role, content: blocksText(m.content ?? "", `messages[${i}].content`) };
  });
}

function responsesInput(value: unknown): ChatMessage[] {
  if (typeof value === "string") return [{ role: "user", content: value }];
  if (!Array.isArray(value)) throw new ApiError(400, "`input` must be a string or an array of items", { param: "input" });
  const out: ChatMessage[] = [];
  value.forEach((item, i) => {
    if (typeof item === "string") return out.push({ role: "user", content: item });
    if (!isRecord(item)) throw new ApiError(400, `input[${i}] must be an object`, { param: "input" });
    if (item.type === "function_call") {
      const call: ToolCallPart = { name: typeof item.name === "string" ? item.name : "", arguments: typeof item.arguments === "string" ? item.arguments : "{}" };
      if (typeof item.call_id === "string") call.id = item.call_id;
      return out.push({ role: "assistant", content: "", toolCalls: [call] });
    }
    if (item.type === "function_call_output") {
      const output = typeof item.output === "string" ? item.output : JSON.stringify(item.output ?? "");
      const message: ChatMessage = { role: "tool", content: output };
      if (typeof item.call_id === "string") message.toolCallId = item.call_id;
      return out.push(message);
    }
    if (item.type === "reasoning") return;
    if (typeof item.role === "string") {
      return out.push({ role: item.role === "developer" ? "system" : item.role, content: partsText(item.content ?? "", `input[${i}].content`) });
    }
    out.push({ role: "user", content: JSON.stringify(item) });
  });
  if (out.length === 0) throw new ApiError(400, "`input` is empty", { param: "input" });
  return out;
}

function completionPrompt(value: unknown): string {
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.length === 1 && typeof value[0] === "string") return value[0];
  if (Array.isArray(value) && value.length > 1 && value.every((v) => typeof v === "string")) {
    throw new ApiError(400, "the sim takes one prompt per request (batched prompts are not simulated)", { param: "prompt" });
  }
  throw new ApiError(400, "`prompt` must be a string (token-id prompts are not simulated)", { param: "prompt" });
}

/** OpenAI content: a string or parts; text parts joined by newlines, media as placeholders. */
function partsText(value: unknown, where: string): string {
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) throw new ApiError(400, `${where} must be a string or an array of parts`);
  return value
    .map((part) => {
      if (!isRecord(part)) return "";
      if (typeof part.text === "string") return part.text;
      if (typeof part.refusal === "string") return part.refusal;
      if (part.type === "image_url" || part.type === "input_image" || part.type === "image") return "<image>";
      if (part.type === "input_audio") return "<audio>";
      if (part.type === "input_file" || part.type === "file") return "<file>";
      return JSON.stringify(part);
    })
    .join("\n");
}

/** Anthropic content: a string or blocks (text, tool_use, tool_result, image, …). */
function blocksText(value: unknown, where: string): string {
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) throw new ApiError(400, `${where} must be a string or an array of content blocks`);
  return value
    .map((block) => {
      if (!isRecord(block)) return "";
      switch (block.type) {
        case "text":
          return typeof block.text === "string" ? block.text : "";
        // Tool blocks stay inline (in every template mode): an Anthropic turn mixes them with text.
        case "tool_use":
          return chatmlToolCall(typeof block.name === "string" ? block.name : "", JSON.stringify(block.input ?? {}));
        case "tool_result":
          return `<tool_response>\n${block.content === undefined ? "" : blocksText(block.content, where)}\n</tool_response>`;
        case "image":
        case "document":
          return `<${block.type}>`;
        case "thinking":
          return typeof block.thinking === "string" ? `<think>${block.thinking}</think>` : "";
        default:
          return JSON.stringify(block);
      }
    })
    .join("\n");
}

function maxTokens(body: Record<string, unknown>, key: string): number | undefined {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1) {
    throw new ApiError(400, `\`${key}\` must be an integer >= 1`, { param: key });
  }
  return value;
}

function optionalString(body: Record<string, unknown>, key: string): string | undefined {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new ApiError(400, `\`${key}\` must be a string`, { param: key });
  return value;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
