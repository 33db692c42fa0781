/**
 * The probe's HTTP: model discovery, /tokenize, /metrics and one timed chat request.
 * `fetch` and the clock are injected. Every way of failing to reach or use the endpoint
 * becomes a ProbeError (exit 2) whose message says what to check.
 */
import { LlmrouteError } from "../errors.ts";
import { parseScrape, type Scrape } from "./metrics.ts";
import { SseParser } from "../engines/sse.ts";
import type { RequestMeasure } from "./verdict.ts";

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface Http {
  fetch: FetchLike;
  /** Monotonic milliseconds. */
  now: () => number;
}

export interface Target {
  /** Shown in messages: a replica name or the URL. */
  label: string;
  /** Base URL without a trailing slash. */
  url: string;
  apiKey?: string;
}

/** Could not probe: connection, auth, model, or an engine error. Exit code 2. */
export class ProbeError extends LlmrouteError {
  readonly status?: number;
  /** The engine's own error message, when it sent one. */
  readonly detail?: string;
  constructor(message: string, options: { status?: number; detail?: string; cause?: unknown } = {}) {
    super(options.status === undefined ? "unreachable" : "upstream", message, { exitCode: 2, cause: options.cause });
    this.name = "ProbeError";
    if (options.status !== undefined) this.status = options.status;
    if (options.detail !== undefined) this.detail = options.detail;
  }
}

function headers(target: Target, json: boolean): Record<string, string> {
  const h: Record<string, string> = {};
  if (json) h["content-type"] = "application/json";
  if (target.apiKey) h.authorization = `Bearer ${target.apiKey}`;
  return h;
}

async function send(http: Http, target: Target, path: string, init: RequestInit, timeoutMs: number): Promise<Response> {
  const url = `${target.url}${path}`;
  try {
    return await http.fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    throw connectionError(target, url, error, timeoutMs);
  }
}

export function connectionError(target: Target, url: string, error: unknown, timeoutMs: number): ProbeError {
  const e = error as { code?: string; name?: string; message?: string };
  if (e?.name === "TimeoutError" || e?.name === "AbortError") {
    return new ProbeError(`${target.label}: no answer from ${url} within ${Math.round(timeoutMs / 1000)} s (--timeout)`, { cause: error });
  }
  const code = e?.code ?? "";
  const refused = /refused/i.test(code) || /refused|unable to connect/i.test(e?.message ?? "");
  const what = refused ? "connection refused" : `${code ? `${code}: ` : ""}${e?.message ?? String(error)}`;
  return new ProbeError(`${target.label}: could not connect to ${url} (${what}); is the engine running, and is the URL right?`, {
    cause: error,
  });
}

/** The engine's own error message from an OpenAI, FastAPI or plain-text error body. */
export function errorMessage(text: string): string {
  try {
    const body = JSON.parse(text) as Record<string, unknown>;
    const err = body.error;
    if (typeof err === "string") return err;
    if (err && typeof err === "object" && typeof (err as { message?: unknown }).message === "string") return (err as { message: string }).message;
    if (typeof body.detail === "string") return body.detail;
    if (typeof body.message === "string") return body.message;
  } catch {
    // not JSON
  }
  return text.trim().slice(0, 300) || "(empty body)";
}

async function failure(target: Target, path: string, res: Response): Promise<ProbeError> {
  const message = errorMessage(await res.text().catch(() => ""));
  if (res.status === 401 || res.status === 403) {
    return new ProbeError(
      `${target.label}: ${path} answered ${res.status} (${message}): the API key is missing or wrong — pass --api-key (or "env:NAME"), or set api_key in router.toml`,
      { status: res.status },
    );
  }
  if (res.status === 503) {
    return new ProbeError(`${target.label}: ${path} answered 503 (${message}): the engine is not ready (loading?) or overloaded`, { status: 503 });
  }
  return new ProbeError(`${target.label}: ${path} answered ${res.status}: ${message}`, { status: res.status, detail: message });
}

export interface ModelCard {
  id: string;
  /** The longest prompt + completion: vLLM/SGLang max_model_len; llama.cpp meta.n_ctx (a slot's context). */
  max_model_len?: number;
  owned_by?: string;
}

/** GET /v1/models. Undefined when the endpoint has none (404); auth and connection errors throw. */
export async function listModels(http: Http, target: Target, timeoutMs: number): Promise<ModelCard[] | undefined> {
  const res = await send(http, target, "/v1/models", { headers: headers(target, false) }, timeoutMs);
  if (res.status === 401 || res.status === 403 || res.status === 503) throw await failure(target, "/v1/models", res);
  if (!res.ok) {
    await res.body?.cancel();
    return undefined;
  }
  const body = (await res.json().catch(() => undefined)) as { data?: unknown } | undefined;
  if (!body || !Array.isArray(body.data)) return undefined;
  return body.data.flatMap((card: unknown) => {
    const c = card as { id?: unknown; max_model_len?: unknown; owned_by?: unknown; meta?: { n_ctx?: unknown } };
    if (typeof c?.id !== "string") return [];
    // llama.cpp has no max_model_len: meta.n_ctx is the context of one slot (server-context.cpp get_res_model_info).
    const limit = typeof c.max_model_len === "number" ? c.max_model_len : typeof c.meta?.n_ctx === "number" ? c.meta.n_ctx : undefined;
    return [{ id: c.id, ...(limit !== undefined ? { max_model_len: limit } : {}), ...(typeof c.owned_by === "string" ? { owned_by: c.owned_by } : {}) }];
  });
}

export interface TokenCount {
  count: number;
  maxModelLen?: number;
  /** Which request shape the engine understood. */
  shape: "vllm" | "llamacpp";
}

/**
 * The engine's token count of `text`: vLLM/SGLang shape `{model, prompt}` first, then
 * llama.cpp's `{content}`. Undefined when neither exists (Ollama, a router); never throws
 * for an HTTP status, since the count is a nicety and usage.prompt_tokens is the fallback.
 */
export async function tokenize(http: Http, target: Target, model: string, text: string, timeoutMs: number): Promise<TokenCount | undefined> {
  const attempts: [TokenCount["shape"], unknown][] = [
    ["vllm", { model, prompt: text, add_special_tokens: false }],
    ["llamacpp", { content: text }],
  ];
  for (const [shape, body] of attempts) {
    const res = await send(http, target, "/tokenize", { method: "POST", headers: headers(target, true), body: JSON.stringify(body) }, timeoutMs);
    if (!res.ok) {
      await res.body?.cancel();
      if (res.status === 404 || res.status === 405) return undefined;
      continue;
    }
    const data = (await res.json().catch(() => undefined)) as { count?: unknown; tokens?: unknown; max_model_len?: unknown } | undefined;
    const count = typeof data?.count === "number" ? data.count : Array.isArray(data?.tokens) ? data.tokens.length : undefined;
    if (count === undefined || (count === 0 && text.length > 0)) continue;
    return { count, shape, ...(typeof data?.max_model_len === "number" ? { maxModelLen: data.max_model_len } : {}) };
  }
  return undefined;
}

/** GET the metrics path. Undefined when absent or not Prometheus text (the probe then says so). */
export async function scrapeMetrics(http: Http, target: Target, path: string, timeoutMs: number): Promise<Scrape | undefined> {
  const res = await send(http, target, path, { headers: headers(target, false) }, timeoutMs);
  if (!res.ok) {
    await res.body?.cancel();
    return undefined;
  }
  return parseScrape(await res.text());
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface ChatOptions {
  model: string;
  messages: ChatMessage[];
  stream: boolean;
  timeoutMs: number;
}

/**
 * One chat completion with a 1-token answer, timed. Streaming: TTFT is the arrival of the
 * first token (the first non-empty delta; else the first chunk with a choice); usage comes
 * from the final chunk (`stream_options.include_usage`). Not streaming, or an engine that
 * answers JSON anyway: TTFT is the total time, which max_tokens 1 keeps close to prefill.
 */
export async function chat(http: Http, target: Target, options: ChatOptions): Promise<RequestMeasure> {
  const body: Record<string, unknown> = {
    model: options.model,
    messages: options.messages,
    max_tokens: 1,
    temperature: 0,
    stream: options.stream,
  };
  if (options.stream) body.stream_options = { include_usage: true };
  const started = http.now();
  const res = await send(
    http,
    target,
    "/v1/chat/completions",
    { method: "POST", headers: headers(target, true), body: JSON.stringify(body) },
    options.timeoutMs,
  );
  const replica = res.headers.get("x-llmroute-replica") ?? undefined;
  const route = res.headers.get("x-llmroute-route") ?? undefined;
  const routing = { ...(replica ? { replica } : {}), ...(route ? { route } : {}) };
  if (!res.ok) {
    const error = await failure(target, "/v1/chat/completions", res);
    if (res.status === 404) {
      throw new ProbeError(`${error.message} (is model ${JSON.stringify(options.model)} served there? pass --model)`, { status: 404 });
    }
    throw error;
  }

  const isStream = options.stream && (res.headers.get("content-type") ?? "").includes("text/event-stream");
  if (!isStream) {
    const text = await readAll(res, target, options.timeoutMs);
    const totalMs = http.now() - started;
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch (error) {
      throw new ProbeError(`${target.label}: /v1/chat/completions answered something that is not JSON: ${text.slice(0, 200)}`, { cause: error });
    }
    const d = data as { choices?: { message?: { content?: unknown } }[] };
    const content = typeof d.choices?.[0]?.message?.content === "string" ? (d.choices[0]!.message!.content as string) : "";
    return { ttftMs: totalMs, totalMs, streamed: false, content, ...usageOf(data), ...routing };
  }

  const parser = new SseParser();
  const decoder = new TextDecoder();
  let firstChoiceAt: number | undefined;
  let firstTokenAt: number | undefined;
  let content = "";
  let usage: ReturnType<typeof usageOf> = {};
  const handle = (payload: string) => {
    if (payload === "[DONE]") return;
    let chunk: Record<string, unknown>;
    try {
      chunk = JSON.parse(payload) as Record<string, unknown>;
    } catch {
      return;
    }
    if (chunk.error !== undefined) {
      throw new ProbeError(`${target.label}: the stream ended with an error: ${errorMessage(payload)}`, { status: 502 });
    }
    const choices = Array.isArray(chunk.choices) ? (chunk.choices as Record<string, unknown>[]) : [];
    if (choices.length > 0) {
      const at = http.now();
      firstChoiceAt ??= at;
      const delta = (choices[0]!.delta ?? {}) as Record<string, unknown>;
      const piece = [delta.content, delta.reasoning_content, delta.reasoning, choices[0]!.text].find((p) => typeof p === "string" && p !== "");
      if (typeof piece === "string") {
        firstTokenAt ??= at;
        if (typeof delta.content === "string") content += delta.content;
      }
    }
    const u = usageOf(chunk);
    usage = { ...usage, ...u };
  };
  try {
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      for (const payload of parser.push(decoder.decode(value, { stream: true }))) handle(payload);
    }
    for (const payload of parser.end()) handle(payload);
  } catch (error) {
    if (error instanceof ProbeError) throw error;
    throw connectionError(target, `${target.url}/v1/chat/completions`, error, options.timeoutMs);
  }
  const totalMs = http.now() - started;
  const first = firstTokenAt ?? firstChoiceAt;
  return { ttftMs: first === undefined ? totalMs : first - started, totalMs, streamed: first !== undefined, content, ...usage, ...routing };
}

async function readAll(res: Response, target: Target, timeoutMs: number): Promise<string> {
  try {
    return await res.text();
  } catch (error) {
    throw connectionError(target, `${target.url}/v1/chat/completions`, error, timeoutMs);
  }
}

/** Per-request truth: usage.prompt_tokens, cached tokens from usage or llama.cpp timings. */
export function usageOf(data: unknown): Pick<RequestMeasure, "promptTokens" | "cachedTokens" | "cachedSource"> {
  const d = (data ?? {}) as {
    usage?: { prompt_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } | null } | null;
    timings?: { cache_n?: unknown } | null;
  };
  const out: Pick<RequestMeasure, "promptTokens" | "cachedTokens" | "cachedSource"> = {};
  if (typeof d.usage?.prompt_tokens === "number") out.promptTokens = d.usage.prompt_tokens;
  const cached = d.usage?.prompt_tokens_details?.cached_tokens;
  if (typeof cached === "number") {
    out.cachedTokens = cached;
    out.cachedSource = "usage";
  } else if (typeof d.timings?.cache_n === "number") {
    out.cachedTokens = d.timings.cache_n;
    out.cachedSource = "timings";
  }
  return out;
}
