/**
 * One simulated replica as a fetch handler: `app.fetch(Request) → Response`. Testable
 * in-process; `server.ts` puts it behind Bun.serve.
 *
 * Generation requests pass, in order: loading check (503) → parse and render (400/404) →
 * context-length check (400) → stall fault → fail fault → the engine. A client that goes
 * away (request signal or stream cancel) stops its sequence and frees its KV.
 */
import { ApiError, errorResponse, type ErrorShape } from "./_api-error.ts";
import { idPrefix, jsonBody, streamFormat, type FormatContext } from "./_formats.ts";
import { realClock, type Clock } from "./clock.ts";
import { SimEngine, type EngineStats, type Sequence, type SequenceResult } from "./engine.ts";
import { Faults } from "./faults.ts";
import { renderMetrics } from "./metrics.ts";
import { resolveSimOptions, type SimOptions } from "./options.ts";
import { isEndpoint, isRecord, parseRequest, tokenizeText, type ChatMessage, type Endpoint, type ParsedRequest } from "./template.ts";

/** GET /sim/state: the engine's counters plus its configuration and pool. */
export interface SimState extends EngineStats {
  name: string;
  model: string;
  profile: string;
  ready: boolean;
  prefix_cache: boolean;
  time_scale: number;
  kv_tokens: number;
  block_tokens: number;
  max_model_len: number;
  max_seqs: number;
  total_blocks: number;
  /** Blocks no sequence holds (they may still cache content, evictable LRU). */
  free_blocks: number;
  /** Blocks held by running sequences. */
  used_blocks: number;
  /** Blocks holding a cached hash (held or free). */
  cached_blocks: number;
  evicted_blocks_total: number;
  kv_cache_usage: number;
  running: number;
  waiting: number;
  stored_responses: number;
  faults: ReturnType<Faults["snapshot"]>;
}

export interface SimApp {
  readonly name: string;
  readonly model: string;
  readonly options: SimOptions;
  readonly engine: SimEngine;
  readonly faults: Faults;
  fetch(request: Request): Promise<Response>;
  state(): SimState;
  /** Clear the cache, counters, stored responses and faults; end running sequences. */
  reset(): void;
  close(): void;
}

export interface SimAppDeps {
  clock?: Clock;
  /** Where verbose request lines go (default: stderr). */
  log?: (line: string) => void;
}

/** How long a cut stream stays open after its last event, so Bun flushes what was queued (real ms). */
const CUT_FLUSH_MS = 20;

export function createSimApp(input: Partial<SimOptions> = {}, deps: SimAppDeps = {}): SimApp {
  const options = resolveSimOptions(input);
  const clock = deps.clock ?? realClock;
  const log = deps.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const engine = new SimEngine(options, clock);
  const faults = new Faults(options, clock);
  const store = new ResponseStore(options.responsesStoreMax);
  const baseHeaders = { "x-sim-replica": options.name };
  const encoder = new TextEncoder();

  const openaiError = (e: ApiError) => errorResponse(e, "openai", baseHeaders);
  const json = (body: unknown, status = 200) => Response.json(body, { status, headers: baseHeaders });

  function state(): SimState {
    engine.sync();
    const pool = engine.pool;
    return {
      name: options.name,
      model: options.model,
      profile: options.profile,
      ready: !faults.loading(),
      prefix_cache: options.prefixCache,
      time_scale: options.timeScale,
      kv_tokens: options.kvTokens,
      block_tokens: options.blockTokens,
      max_model_len: options.maxModelLen,
      max_seqs: options.maxSeqs,
      total_blocks: pool.numBlocks,
      free_blocks: pool.freeBlocks,
      used_blocks: pool.usedBlocks,
      cached_blocks: pool.cachedBlocks,
      evicted_blocks_total: pool.evictions,
      kv_cache_usage: pool.usage,
      running: engine.runningCount,
      waiting: engine.waitingCount,
      ...engine.stats,
      stored_responses: store.size,
      faults: faults.snapshot(),
    };
  }

  function reset(): void {
    engine.reset();
    store.clear();
    faults.clear();
  }

  async function readJson(request: Request): Promise<unknown> {
    const text = await request.text();
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new ApiError(400, `Invalid JSON body: ${(error as Error).message}`, { cause: error });
    }
  }

  /** Parse, render and check a generation body the way a request is checked (shared with /sim/match). */
  function prepare(endpoint: Endpoint, body: unknown) {
    const parsed = parseRequest(endpoint, body, (id) => store.get(id));
    if (parsed.model !== undefined && parsed.model !== options.model) {
      throw new ApiError(404, `The model \`${parsed.model}\` does not exist.`, { type: "NotFoundError", param: "model" });
    }
    const promptTokens = engine.tokenizer.count(parsed.prompt);
    const limit = options.maxModelLen;
    if (promptTokens === 0) throw new ApiError(400, "The prompt is empty.", { param: "prompt" });
    if (promptTokens >= limit) {
      throw new ApiError(
        400,
        `This model's maximum context length is ${limit} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
      );
    }
    if (parsed.maxTokens !== undefined && promptTokens + parsed.maxTokens > limit) {
      throw new ApiError(
        400,
        `This model's maximum context length is ${limit} tokens. However, you requested ${promptTokens + parsed.maxTokens} tokens (${promptTokens} in the messages, ${parsed.maxTokens} in the completion). Please reduce the length of the messages or completion.`,
      );
    }
    const room = limit - promptTokens;
    const maxTokens = parsed.maxTokens ?? Math.min(options.defaultMaxTokens, room);
    const finishReason: "stop" | "length" = parsed.maxTokens !== undefined || options.defaultMaxTokens > room ? "length" : "stop";
    return { parsed, promptTokens, maxTokens, finishReason };
  }

  /** The stall fault: true when it is over (its time passed, or stall_ms was cleared), false if the client left. */
  function stall(ms: number, signal: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve(false);
      const end = (over: boolean) => {
        clock.clearTimer(timer);
        signal.removeEventListener("abort", onAbort);
        unsubscribe();
        resolve(over);
      };
      const onAbort = () => end(false);
      const timer = clock.setTimer(ms, () => end(true));
      const unsubscribe = faults.onStallCleared(() => end(true));
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  async function generate(endpoint: Endpoint, request: Request): Promise<Response> {
    const shape: ErrorShape = endpoint === "/v1/messages" ? "anthropic" : "openai";
    engine.stats.requests_total++;
    const refuse = (error: ApiError, counter: "faulted_total" | "rejected_total") => {
      engine.stats[counter]++;
      if (options.verbose) log(`${options.name} POST ${endpoint} ${error.status} ${error.message}`);
      return errorResponse(error, shape, baseHeaders);
    };
    if (faults.loading()) return refuse(new ApiError(503, "Loading model"), "faulted_total");
    let prepared: ReturnType<typeof prepare>;
    try {
      prepared = prepare(endpoint, await readJson(request));
    } catch (error) {
      if (error instanceof ApiError) return refuse(error, "rejected_total");
      throw error;
    }
    const stallMs = faults.takeStall();
    if (stallMs > 0 && !(await stall(stallMs, request.signal))) {
      return new Response(null, { status: 499, headers: baseHeaders });
    }
    const failStatus = faults.takeFailure();
    if (failStatus !== undefined) {
      return refuse(new ApiError(failStatus, `sim ${options.name}: injected failure (fail_next)`), "faulted_total");
    }
    const { parsed } = prepared;
    const ctx: FormatContext = {
      endpoint,
      id: `${idPrefix(endpoint)}${crypto.randomUUID().replaceAll("-", "")}`,
      itemId: `msg_${crypto.randomUUID().replaceAll("-", "")}`,
      model: options.model,
      created: Math.floor(Date.now() / 1000),
      includeUsage: parsed.includeUsage,
      maxTokens: parsed.maxTokens,
      instructions: parsed.instructions,
      previousResponseId: parsed.previousResponseId,
      store: parsed.store,
    };
    const onEnd = (result: SequenceResult) => {
      if ((result.reason === "stop" || result.reason === "length") && endpoint === "/v1/responses" && parsed.store) {
        store.set(ctx.id, [...(parsed.conversation ?? []), { role: "assistant", content: result.text }]);
      }
      if (options.verbose) {
        const ttft = result.ttftMs === undefined ? "-" : `${result.ttftMs.toFixed(1)}ms (model ${result.ttftModelMs!.toFixed(0)}ms)`;
        log(
          `${options.name} POST ${endpoint} ${result.reason} prompt=${result.promptTokens} cached=${result.cachedTokens} out=${result.completionTokens} ttft=${ttft}`,
        );
      }
    };
    return parsed.stream ? streamed(ctx, parsed, prepared, request, onEnd) : whole(ctx, parsed, prepared, request, onEnd);
  }

  async function whole(
    ctx: FormatContext,
    parsed: ParsedRequest,
    prepared: ReturnType<typeof prepare>,
    request: Request,
    onEnd: (r: SequenceResult) => void,
  ): Promise<Response> {
    const seq = engine.submit({ prompt: parsed.prompt, maxTokens: prepared.maxTokens, finishReason: prepared.finishReason, salt: parsed.salt });
    const onAbort = () => engine.cancel(seq, "cancelled");
    request.signal.addEventListener("abort", onAbort, { once: true });
    if (request.signal.aborted) onAbort();
    const result = await seq.done;
    request.signal.removeEventListener("abort", onAbort);
    onEnd(result);
    if (result.reason === "cancelled") return new Response(null, { status: 499, headers: baseHeaders });
    if (result.reason !== "stop" && result.reason !== "length") {
      return errorResponse(new ApiError(503, `sim ${options.name}: request ended (${result.reason})`), ctx.endpoint === "/v1/messages" ? "anthropic" : "openai", baseHeaders);
    }
    return json(jsonBody(ctx, result));
  }

  function streamed(
    ctx: FormatContext,
    parsed: ParsedRequest,
    prepared: ReturnType<typeof prepare>,
    request: Request,
    onEnd: (r: SequenceResult) => void,
  ): Response {
    const format = streamFormat(ctx);
    const cutAfter = faults.takeClose();
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let written = 0;
    let finished = false;
    let seq: Sequence | undefined;
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
      },
      cancel() {
        finished = true;
        if (seq) engine.cancel(seq, "cancelled");
      },
    });
    const cut = () => {
      finished = true;
      engine.stats.faulted_total++;
      if (seq) engine.cancel(seq, "fault");
      // Erroring the stream destroys the connection; Bun drops chunks still queued when it
      // errors in the same tick, so give the ones already written a moment to leave.
      if (written === 0) controller.error();
      else setTimeout(() => controller.error(), CUT_FLUSH_MS);
    };
    const write = (frames: string[]) => {
      for (const frame of frames) {
        if (finished) return;
        controller.enqueue(encoder.encode(frame));
        written++;
        if (cutAfter >= 0 && written >= cutAfter) return cut();
      }
    };
    seq = engine.submit({
      prompt: parsed.prompt,
      maxTokens: prepared.maxTokens,
      finishReason: prepared.finishReason,
      salt: parsed.salt,
      listener: {
        // May run inside submit() (a tiny prompt can finish prefill at once), so use the argument.
        onToken(text, index, self) {
          seq ??= self;
          if (index === 0) write(format.start({ promptTokens: self.promptTokens, cachedTokens: self.cachedTokens }));
          write(format.delta(text));
        },
        onEnd(result) {
          onEnd(result);
          if (finished) return;
          if (result.reason === "stop" || result.reason === "length") {
            write(format.end(result));
            if (!finished) {
              finished = true;
              controller.close();
            }
          } else if (result.reason !== "cancelled") {
            finished = true;
            controller.error();
          }
        },
      },
    });
    const onAbort = () => {
      finished = true;
      engine.cancel(seq!, "cancelled");
    };
    request.signal.addEventListener("abort", onAbort, { once: true });
    if (request.signal.aborted) onAbort();
    if (cutAfter === 0) cut();
    return new Response(stream, {
      headers: { ...baseHeaders, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
    });
  }

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname;
    const method = request.method;
    if (method === "POST" && isEndpoint(path)) return generate(path, request);
    if (path.startsWith("/sim/")) return simRoute(path, method, request, url);
    if (method === "GET" && path === "/metrics") {
      return new Response(renderMetrics(engine, options.model), {
        headers: { ...baseHeaders, "content-type": "text/plain; version=0.0.4; charset=utf-8" },
      });
    }
    if (faults.loading() && (path === "/health" || path.startsWith("/v1/") || path === "/tokenize")) {
      return openaiError(new ApiError(503, "Loading model"));
    }
    if (method === "GET" && path === "/health") return json({ status: "ok" });
    if (method === "GET" && path === "/v1/models") {
      return json({
        object: "list",
        data: [
          {
            id: options.model,
            object: "model",
            created: 0,
            owned_by: "llmroute-sim",
            root: options.model,
            parent: null,
            max_model_len: options.maxModelLen,
            permission: [],
          },
        ],
      });
    }
    if (method === "POST" && path === "/tokenize") {
      const body = await readJson(request);
      if (isRecord(body) && typeof body.model === "string" && body.model !== options.model) {
        throw new ApiError(404, `The model \`${body.model}\` does not exist.`, { param: "model" });
      }
      const { text, llamacpp } = tokenizeText(body);
      const tokens = engine.tokenizer.ids(text);
      return json(llamacpp ? { tokens } : { count: tokens.length, max_model_len: options.maxModelLen, tokens, token_strs: null });
    }
    throw new ApiError(404, `Not Found: ${method} ${path}`);
  }

  async function simRoute(path: string, method: string, request: Request, url: URL): Promise<Response> {
    if (path === "/sim/state" && method === "GET") return json(state());
    if (path === "/sim/faults" && method === "GET") return json(faults.snapshot());
    if (path === "/sim/faults" && method === "POST") {
      faults.update(await readJson(request));
      return json(faults.snapshot());
    }
    if (path === "/sim/reset" && method === "POST") {
      reset();
      return json(state());
    }
    if (path === "/sim/match" && method === "POST") {
      const endpoint = url.searchParams.get("endpoint") ?? "/v1/chat/completions";
      if (!isEndpoint(endpoint)) throw new ApiError(400, `endpoint must be one of the generation endpoints, not ${JSON.stringify(endpoint)}`, { param: "endpoint" });
      const { parsed } = prepare(endpoint, await readJson(request));
      const match = engine.match(parsed.prompt, parsed.salt);
      return json({ prompt_tokens: match.promptTokens, cached_tokens: match.cachedTokens, running: engine.runningCount, waiting: engine.waitingCount });
    }
    throw new ApiError(404, `Not Found: ${method} ${path}`);
  }

  return {
    name: options.name,
    model: options.model,
    options,
    engine,
    faults,
    state,
    reset,
    close: () => engine.close(),
    async fetch(request) {
      try {
        return await route(request);
      } catch (error) {
        if (error instanceof ApiError) return openaiError(error);
        log(`${options.name}: internal error: ${(error as Error)?.stack ?? error}`);
        return openaiError(new ApiError(500, `sim internal error: ${(error as Error)?.message ?? error}`));
      }
    },
  };
}

/** Stored Responses API conversations of one replica, oldest dropped first. */
class ResponseStore {
  private readonly max: number;
  private readonly map = new Map<string, ChatMessage[]>();

  constructor(max: number) {
    this.max = max;
  }

  get size(): number {
    return this.map.size;
  }

  get(id: string): ChatMessage[] | undefined {
    return this.map.get(id);
  }

  set(id: string, conversation: ChatMessage[]): void {
    this.map.set(id, conversation);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value as string);
  }

  clear(): void {
    this.map.clear();
  }
}
