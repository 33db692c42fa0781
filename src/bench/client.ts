/**
 * The bench's client: one streamed chat completion over plain fetch, timed the way a user
 * feels it. TTFT is the time from sending to the first chunk that carries generated text,
 * content or reasoning (not the first byte: a role-only chunk is not an answer); usage
 * comes from the final chunk that `stream_options.include_usage` adds, the engine's
 * per-request cache report where it gives one. A sim also says, in `x-sim-prefix`, how
 * many prompt tokens it really found cached and why the hit stopped there (docs/sim.md):
 * the truth on engines whose usage carries no cached figure.
 */
import type { CacheVerdict } from "../route/evidence.ts";
import { SseParser } from "../engines/sse.ts";

/** Why the sim's prefix hit stopped (src/sim/engine-api.ts PrefixStop): all of it hit, evicted, never computed here, or held where this request cannot use it (another llama.cpp slot). */
export type SimStop = "full" | "evicted" | "new" | "elsewhere";

export interface Outcome {
  /** Where it went: the router's x-llmroute-replica header, or the oracle's choice. */
  replica: string;
  /** x-llmroute-route (pin, spread, hash, load, …) or "oracle". */
  route: string;
  status: number;
  /** Real milliseconds from sending to the first content chunk (or the finish chunk, when the reply has none). */
  ttftMs: number;
  /** Real milliseconds from sending to the end of the stream. */
  totalMs: number;
  /** The reply's text (content), to send back in the next turn. */
  text: string;
  /** The reply's reasoning, when the engine returned it apart (`reasoning_content`, Ollama `reasoning`), and under which field. */
  reasoning?: { text: string; field: "reasoning_content" | "reasoning" };
  promptTokens: number;
  /** usage's cached_tokens; 0 when usage carries none (see cachedReported). */
  cachedTokens: number;
  /** Whether usage carried a cached figure at all (vLLM without --enable-prompt-tokens-details, Ollama: never). */
  cachedReported: boolean;
  completionTokens: number;
  /**
   * A sim's own account (`x-sim-prefix: cached=<tokens>; stop=<full|evicted|new|elsewhere>[; held=<tokens>][; computed=<tokens>]`,
   * and `x-sim-sequence`, its sequence id in GET /sim/first-tokens); undefined from real engines.
   */
  sim?: { cachedTokens: number; stop: SimStop; heldTokens: number; computedTokens?: number; sequence?: number };
  /** How the router judged the engine's report against its index (its request record); undefined: no router, or no report to judge. */
  verdict?: CacheVerdict;
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
    cachedReported: false,
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
  const sim = parseSimPrefix(res.headers.get("x-sim-prefix"));
  const sequence = Number(res.headers.get("x-sim-sequence") ?? NaN);
  if (sim) outcome.sim = Number.isInteger(sequence) ? { ...sim, sequence } : sim;
  if (!res.ok || !res.body) {
    outcome.error = `HTTP ${res.status}: ${(await res.text().catch(() => "")).slice(0, 300)}`;
    outcome.totalMs = now() - started;
    return outcome;
  }
  const parser = new SseParser();
  const decoder = new TextDecoder();
  // A model whose first generated token ends the reply (EOS; a random-weight test model
  // does this) streams a finish chunk and no content: the prompt was computed, and that
  // chunk is its first token.
  let finishedMs = NaN;
  const onData = (data: string) => {
    if (data === "[DONE]") return;
    let chunk: StreamChunk;
    try {
      chunk = JSON.parse(data) as StreamChunk;
    } catch {
      return;
    }
    if (chunk.error) outcome.error = typeof chunk.error === "string" ? chunk.error : (chunk.error.message ?? "stream error");
    const delta = chunk.choices?.[0]?.delta;
    const content = delta?.content;
    // A reasoning model's first tokens are its reasoning: they are generated tokens too.
    const field = typeof delta?.reasoning_content === "string" ? "reasoning_content" : typeof delta?.reasoning === "string" ? "reasoning" : undefined;
    const reasoning = field ? delta![field]! : "";
    if ((content || reasoning) && Number.isNaN(outcome.ttftMs)) outcome.ttftMs = now() - started;
    if (chunk.choices?.[0]?.finish_reason && Number.isNaN(finishedMs)) finishedMs = now() - started;
    if (content) outcome.text += content;
    if (reasoning) outcome.reasoning = { text: (outcome.reasoning?.text ?? "") + reasoning, field: field! };
    if (chunk.usage) {
      outcome.promptTokens = chunk.usage.prompt_tokens ?? 0;
      outcome.completionTokens = chunk.usage.completion_tokens ?? 0;
      const cached = chunk.usage.prompt_tokens_details?.cached_tokens;
      outcome.cachedReported = typeof cached === "number";
      outcome.cachedTokens = cached ?? 0;
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
  if (Number.isNaN(outcome.ttftMs)) outcome.ttftMs = finishedMs;
  if (!outcome.error && Number.isNaN(outcome.ttftMs)) outcome.error = "the stream carried no content";
  return outcome;
}

/** `cached=<tokens>; stop=<full|evicted|new|elsewhere>[; held=<tokens>][; computed=<tokens>]` (src/sim/app.ts); undefined when absent or malformed. */
export function parseSimPrefix(header: string | null): Outcome["sim"] {
  const m = header && /^cached=(\d+); stop=(full|evicted|new|elsewhere)(?:; held=(\d+))?(?:; computed=(\d+))?$/.exec(header.trim());
  if (!m) return undefined;
  const cachedTokens = Number(m[1]);
  return { cachedTokens, stop: m[2] as SimStop, heldTokens: m[3] === undefined ? cachedTokens : Number(m[3]), ...(m[4] === undefined ? {} : { computedTokens: Number(m[4]) }) };
}

interface StreamChunk {
  choices?: { delta?: { content?: string | null; reasoning_content?: string | null; reasoning?: string | null }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
  error?: string | { message?: string };
}

