/**
 * Reads a relayed response on the side, without holding it up: time to first byte, the
 * final usage (cached tokens included), a Responses API id, and the error event an engine
 * ends a failed stream with. SSE is parsed event by event and only lines that can carry
 * usage, an id or an error are parsed; a JSON body is parsed once at the end (up to a cap).
 */

import { SseParser } from "../engines/sse.ts";

export interface Usage {
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
}

export interface TapResult extends Usage {
  responseId?: string;
  /**
   * A stream event was an error (its message): the engine failed the request after the
   * stream began — llama.cpp ends the stream with it (server-context.cpp
   * handle_completions_impl), vLLM sends `data: [DONE]` after it (chat_completion/serving.py
   * chat_completion_stream_generator); Anthropic's and the Responses API's `type: "error"`.
   */
  streamError?: string;
  /** That event, parsed (for EngineProfile.kvFull). */
  streamErrorEvent?: unknown;
}

const JSON_CAP = 8 << 20;

export class ResponseTap {
  readonly result: TapResult = {};
  private readonly decoder = new TextDecoder();
  private readonly events = new SseParser();
  private buffered = "";
  private size = 0;
  private readonly sse: boolean;
  private readonly json: boolean;

  constructor(contentType: string | null) {
    this.sse = (contentType ?? "").includes("text/event-stream");
    this.json = (contentType ?? "").includes("json");
  }

  push(chunk: Uint8Array): void {
    if (!this.sse && !this.json) return;
    this.size += chunk.byteLength;
    if (this.json) {
      if (this.size <= JSON_CAP) this.buffered += this.decoder.decode(chunk, { stream: true });
      return;
    }
    for (const data of this.events.push(this.decoder.decode(chunk, { stream: true }))) this.event(data);
  }

  finish(): TapResult {
    if (this.json && this.size <= JSON_CAP) {
      this.buffered += this.decoder.decode();
      try {
        this.absorb(JSON.parse(this.buffered));
      } catch {
        // not JSON after all (or cut off): no usage to report
      }
    } else if (this.sse) {
      for (const data of this.events.push(this.decoder.decode())) this.event(data);
      for (const data of this.events.end()) this.event(data);
    }
    this.buffered = "";
    return this.result;
  }

  private event(data: string): void {
    // Only events that can carry usage, a response id or an error are worth a JSON.parse.
    if (!/"(usage|timings|error)"|"response\.(created|completed)"/.test(data)) return;
    try {
      this.absorb(JSON.parse(data));
    } catch {
      // a malformed event is the client's problem to see, not ours to fix
    }
  }

  private absorb(event: unknown): void {
    if (!event || typeof event !== "object") return;
    const e = event as Record<string, any>;
    if (this.sse && ((e.error && typeof e.error === "object") || e.type === "error")) {
      const message = e.error?.message ?? e.message;
      this.result.streamError = typeof message === "string" ? message : "(no message)";
      this.result.streamErrorEvent = event;
    }
    const response = e.response && typeof e.response === "object" ? e.response : undefined;
    if (typeof response?.id === "string") this.result.responseId = response.id;
    else if (e.object === "response" && typeof e.id === "string") this.result.responseId = e.id;
    Object.assign(this.result, readUsage(e.usage ?? response?.usage ?? e.message?.usage, e.timings));
  }
}

/** Usage in any of the engines' shapes: OpenAI chat/completions, Responses, Anthropic, llama.cpp timings. */
export function readUsage(usage: unknown, timings?: unknown): Usage {
  const out: Usage = {};
  const u = usage && typeof usage === "object" ? (usage as Record<string, any>) : undefined;
  if (u) {
    if (typeof u.prompt_tokens === "number") {
      out.promptTokens = u.prompt_tokens;
      if (typeof u.prompt_tokens_details?.cached_tokens === "number") out.cachedTokens = u.prompt_tokens_details.cached_tokens;
    } else if ("cache_read_input_tokens" in u || "cache_creation_input_tokens" in u) {
      // Anthropic: input_tokens excludes what was read from or written to the cache.
      const read = num(u.cache_read_input_tokens);
      out.cachedTokens = read;
      if (typeof u.input_tokens === "number") out.promptTokens = u.input_tokens + read + num(u.cache_creation_input_tokens);
    } else if (typeof u.input_tokens === "number") {
      out.promptTokens = u.input_tokens;
      if (typeof u.input_tokens_details?.cached_tokens === "number") out.cachedTokens = u.input_tokens_details.cached_tokens;
    }
    const completion = u.completion_tokens ?? u.output_tokens;
    if (typeof completion === "number") out.completionTokens = completion;
  }
  const t = timings && typeof timings === "object" ? (timings as Record<string, any>) : undefined;
  if (t && typeof t.cache_n === "number") {
    out.cachedTokens ??= t.cache_n;
    if (typeof t.prompt_n === "number") out.promptTokens ??= t.prompt_n + t.cache_n;
  }
  return out;
}

function num(v: unknown): number {
  return typeof v === "number" ? v : 0;
}
