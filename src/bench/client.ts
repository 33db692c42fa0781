/**
 * The bench's client: one streamed chat completion over plain fetch, timed the way a user
 * feels it. TTFT is the time from sending to the first chunk that carries content (not the
 * first byte: a role-only chunk is not an answer); usage comes from the final chunk that
 * `stream_options.include_usage` adds, which is the per-request cache truth.
 */
import { SseParser } from "../engines/sse.ts";

export interface Outcome {
  /** Where it went: the router's x-llmroute-replica header, or the oracle's choice. */
  replica: string;
  /** x-llmroute-route (pin, spread, hash, load, …) or "oracle". */
  route: string;
  status: number;
  /** Real milliseconds from sending to the first content chunk. */
  ttftMs: number;
  /** Real milliseconds from sending to the end of the stream. */
  totalMs: number;
  /** The reply's text, to send back in the next turn. */
  text: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  /** Prompt tokens cached on some replica at routing time (the router's index, or the oracle's /sim/match). */
  availableTokens?: number;
  /** … cached on the chosen replica. */
  capturedTokens?: number;
  /** Set when the request failed; the other figures are then partial. */
  error?: string;
}

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface SendOptions {
  fetch?: FetchLike;
  now?: () => number;
  /** The replica and route chosen before sending (the oracle); otherwise the router's x-llmroute-* headers say. */
  replica?: string;
  route?: string;
  headers?: Record<string, string>;
}

/** POST a streamed chat completion to `${baseUrl}/v1/chat/completions` and time it. */
export async function sendChat(baseUrl: string, body: unknown, options: SendOptions = {}): Promise<Outcome> {
  const doFetch = options.fetch ?? fetch;
  const now = options.now ?? (() => performance.now());
  const started = now();
  const outcome: Outcome = {
    replica: options.replica ?? "?",
    route: options.route ?? "?",
    status: 0,
    ttftMs: NaN,
    totalMs: NaN,
    text: "",
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
  };
  let res: Response;
  try {
    res = await doFetch(`${baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...options.headers },
      body: JSON.stringify(body),
    });
  } catch (error) {
    outcome.error = (error as Error).message;
    outcome.totalMs = now() - started;
    return outcome;
  }
  outcome.status = res.status;
  // A choice made before sending (the oracle's, through its single-replica router) stands.
  outcome.replica = options.replica ?? res.headers.get("x-llmroute-replica") ?? outcome.replica;
  outcome.route = options.route ?? res.headers.get("x-llmroute-route") ?? outcome.route;
  if (!res.ok || !res.body) {
    outcome.error = `HTTP ${res.status}: ${(await res.text().catch(() => "")).slice(0, 300)}`;
    outcome.totalMs = now() - started;
    return outcome;
  }
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const onData = (data: string) => {
    if (data === "[DONE]") return;
    let chunk: StreamChunk;
    try {
      chunk = JSON.parse(data) as StreamChunk;
    } catch {
      return;
    }
    if (chunk.error) outcome.error = typeof chunk.error === "string" ? chunk.error : (chunk.error.message ?? "stream error");
    const content = chunk.choices?.[0]?.delta?.content;
    if (content) {
      if (Number.isNaN(outcome.ttftMs)) outcome.ttftMs = now() - started;
      outcome.text += content;
    }
    if (chunk.usage) {
      outcome.promptTokens = chunk.usage.prompt_tokens ?? 0;
      outcome.completionTokens = chunk.usage.completion_tokens ?? 0;
      outcome.cachedTokens = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
  };
  try {
    for await (const bytes of res.body) {
      for (const data of parser.push(decoder.decode(bytes, { stream: true }))) onData(data);
    }
    for (const data of parser.end()) onData(data);
  } catch (error) {
    outcome.error = `stream failed: ${(error as Error).message}`;
  }
  outcome.totalMs = now() - started;
  if (!outcome.error && Number.isNaN(outcome.ttftMs)) outcome.error = "the stream carried no content";
  return outcome;
}

interface StreamChunk {
  choices?: { delta?: { content?: string | null } }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
  error?: string | { message?: string };
}

