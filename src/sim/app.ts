/**
 * One simulated replica as a fetch handler: `app.fetch(Request) → Response`. Testable
 * in-process; `server.ts` puts it behind Bun.serve.
 *
 * What a client sees — bodies, chunks, usage, errors, metrics, capacity endpoints — is the
 * chosen engine profile's (profiles/, `--engine`); how chat histories become prompts is the
 * chosen template's (chat-templates.ts, `--template`); the KV cache is the engine's
 * (engine-api.ts).
 *
 * Generation requests pass, in order: loading check (503) → parse and render (400/404) →
 * context-length check (400) → stall fault → fail fault → the engine. A client that goes
 * away (request signal or stream cancel) stops its sequence and frees its KV. Every
 * generation response carries `x-sim-prefix: cached=<tokens>; stop=<full|evicted|new|elsewhere>`
 * (and `; held=<tokens>` when the replica held more of the prefix than the request could use;
 * `; computed=<tokens>` when, its hit stopped at a prefix held `elsewhere`, it had computed more
 * of the prompt here and dropped that since):
 * why its prefix-cache hit stopped where it did (engine-api.ts, PrefixStop) — the truth the
 * bench compares the router's index corrections with.
 */
import { ApiError, errorResponse } from "./_api-error.ts";
import { idPrefix, tokenPiece, type FormatContext } from "./_formats.ts";
import { ReasoningReply, reasoningShape } from "./chat-templates.ts";
import { monotonicMicros, realClock, type Clock } from "./clock.ts";
import type { EngineStats, SequenceResult, SimEngineApi, SimSequence } from "./engine-api.ts";
import { SimEngine } from "./engine.ts";
import { Faults } from "./faults.ts";
import { resolveSimOptions, type SimOptions } from "./options.ts";
import { decodeCallsOf } from "./profiles/llamacpp.ts";
import { engineProfile, zeroCounters, type EngineProfile, type ReplicaCounters, type ReplicaView } from "./profiles/index.ts";
import { Residency } from "./residency.ts";
import { SlotEngine } from "./slots.ts";
import { isEndpoint, isRecord, parseRequest, tokenizeText, type ChatMessage, type Endpoint, type ParsedRequest } from "./prompt-text.ts";
import { outputSeed } from "./tokenizer.ts";

/** Sequences whose first-token times GET /sim/first-tokens keeps (a long trace replay's arm is a few thousand). */
const FIRST_TOKENS_KEPT = 100_000;

/** GET /sim/state: the engine's counters plus its configuration and pool. */
export interface SimState extends EngineStats {
  name: string;
  model: string;
  profile: string;
  /** The engine profile (`--engine`). */
  engine: string;
  /** The chat template (`--template`). */
  template: string;
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
  /** ollama: times its model was loaded (by a request) and unloaded (idle past keep_alive). */
  model_loads?: number;
  model_unloads?: number;
  /** ollama: chats that lost their oldest messages to fit the context. */
  prompts_cut?: number;
  faults: ReturnType<Faults["snapshot"]>;
}

export interface SimApp {
  readonly name: string;
  readonly model: string;
  readonly options: SimOptions;
  readonly profile: EngineProfile;
  readonly engine: SimEngineApi;
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

/** A unified KV that overflowed under the running requests fails each (slots.ts ensureRoom; llama.cpp server-context.cpp update_slots). */
const kvOverflow = () => new ApiError(500, "Context size has been exceeded.");

/** Output llama.cpp's chat parser rejected (faults.ts unparsable_next; common/chat.cpp common_chat_peg_parse). */
const unparsable = () => new ApiError(500, "The model produced output that does not match the expected peg-native format");

export function createSimApp(input: Partial<SimOptions> = {}, deps: SimAppDeps = {}): SimApp {
  const options = resolveSimOptions(input);
  const clock = deps.clock ?? realClock;
  const log = deps.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const profile = engineProfile(options.engine);
  // llama.cpp and Ollama (which runs llama-server) keep KV in slots; the others in one pool.
  const engine: SimEngineApi = profile.slotDefaults ? new SlotEngine(options, clock) : new SimEngine(options, clock);
  const faults = new Faults(options, clock);
  // Ollama loads its model at the first request and unloads it after keep_alive idle.
  const residency = profile.family === "ollama" ? new Residency(options.keepAlive < 0 ? -1 : options.keepAlive * 1000 * options.timeScale, clock, engine) : undefined;
  const store = new ResponseStore(options.responsesStoreMax);
  const baseHeaders = { "x-sim-replica": options.name };
  const encoder = new TextEncoder();
  let counters: ReplicaCounters = zeroCounters();
  /** Chats that lost their oldest messages to fit the context (profile.cutsChatToContext). */
  let promptsCut = 0;
  const replica: ReplicaView = {
    name: options.name,
    model: options.model,
    options,
    engine,
    get counters() {
      return counters;
    },
    startedAtUnixMs: Date.now(),
    startedAtMonotonicUs: monotonicMicros(),
    get contextLimit() {
      return contextLimit();
    },
    ...(residency ? { resident: residency } : {}),
  };

  /** The most tokens one request may hold: a llama.cpp slot's n_ctx, else max_model_len. */
  function contextLimit(): number {
    return Math.min(options.maxModelLen, engine.perSlotContext ?? options.maxModelLen);
  }

  const profileError = (e: ApiError) => profile.errorResponse(e, baseHeaders);
  const json = (body: unknown, status = 200) => Response.json(body, { status, headers: baseHeaders });

  engine.onSequenceEnd((_seq, r) => {
    account(r);
    residency?.ended();
  });

  /** Figures some families publish beyond the engine's counters (profiles/types.ts ReplicaCounters). */
  function account(r: SequenceResult): void {
    if (r.prefixStop === undefined) return; // never admitted: the engine never saw it
    const c = counters;
    c.finishedRequests++;
    if (r.reason !== "stop" && r.reason !== "length") c.abortedRequests++;
    c.finishedPromptTokens += r.promptTokens;
    c.finishedCachedTokens += r.cachedTokens;
    c.finishedCompletionTokens += r.completionTokens;
    if (r.ttftMs !== undefined) {
      const promptSeconds = r.ttftMs / 1000;
      const predictedSeconds = Math.max(0, r.durationMs - r.ttftMs) / 1000;
      c.promptTokensProcessed += r.promptTokens - r.cachedTokens;
      c.promptSeconds += promptSeconds;
      c.predictedTokens += r.completionTokens;
      c.predictedSeconds += predictedSeconds;
      c.window.promptTokens += r.promptTokens - r.cachedTokens;
      c.window.promptSeconds += promptSeconds;
      c.window.predictedSteps += Math.max(0, r.completionTokens - 1);
      c.window.predictedSeconds += predictedSeconds;
      const calls = decodeCallsOf(r, options.batchSize);
      c.decodeCalls += calls;
      c.busySlots += calls;
    }
    c.maxSequenceTokens = Math.max(c.maxSequenceTokens, r.promptTokens + r.completionTokens);
  }

  /** SGLang's last prefill batch: first admissions within one synchronous engine step. */
  let batchOpen = false;
  function onAdmitted(seq: SimSequence): void {
    if (!batchOpen) {
      batchOpen = true;
      counters.lastBatch = { tokens: 0, cached: 0 };
      counters.decodeStepsSinceBatch = 0;
      queueMicrotask(() => (batchOpen = false));
    }
    counters.lastBatch.tokens += seq.promptTokens;
    counters.lastBatch.cached += seq.cachedTokens;
  }
  function onDecoded(index: number): void {
    // One decode step advances every running sequence by a token.
    if (index > 0) counters.decodeStepsSinceBatch += 1 / Math.max(1, engine.runningCount);
  }

  function state(): SimState {
    engine.sync();
    const kv = engine.kv();
    return {
      name: options.name,
      model: options.model,
      profile: options.profile,
      engine: options.engine,
      template: options.template,
      ready: !faults.loading(),
      prefix_cache: options.prefixCache,
      time_scale: options.timeScale,
      kv_tokens: options.kvTokens,
      block_tokens: options.blockTokens,
      max_model_len: options.maxModelLen,
      // A slot engine runs one request per slot.
      max_seqs: engine.slots?.().length ?? options.maxSeqs,
      total_blocks: kv.totalBlocks,
      free_blocks: kv.freeBlocks,
      used_blocks: kv.usedBlocks,
      cached_blocks: kv.cachedBlocks,
      evicted_blocks_total: kv.evictedBlocksTotal,
      kv_cache_usage: kv.usage,
      running: engine.runningCount,
      waiting: engine.waitingCount,
      ...engine.stats,
      stored_responses: store.size,
      ...(residency ? { model_loads: residency.loads, model_unloads: residency.unloads } : {}),
      ...(profile.cutsChatToContext ? { prompts_cut: promptsCut } : {}),
      faults: faults.snapshot(),
    };
  }

  /**
   * Each finished sequence's time to first token in model time, by sequence id (x-sim-sequence):
   * what the card itself took, queueing and prefill, with none of the HTTP hops' or the
   * caller's own time in it (GET /sim/first-tokens; the bench's engine TTFT). The newest
   * FIRST_TOKENS_KEPT are kept.
   */
  const firstTokens = new Map<number, number>();
  function keepFirstToken(id: number, modelMs: number): void {
    firstTokens.set(id, modelMs);
    if (firstTokens.size > FIRST_TOKENS_KEPT) firstTokens.delete(firstTokens.keys().next().value!);
  }

  function reset(): void {
    engine.reset();
    firstTokens.clear();
    store.clear();
    faults.clear();
    counters = zeroCounters();
    promptsCut = 0;
    residency?.reset();
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
    if (profile.responsesState === "rejected" && isRecord(body) && typeof body.previous_response_id === "string" && body.previous_response_id !== "") {
      // llama.cpp server-chat.cpp: a stateless server says so.
      throw new ApiError(400, "llama.cpp does not support 'previous_response_id'.", { param: "previous_response_id" });
    }
    const previous = profile.responsesState === "stored" ? (id: string) => store.get(id) : undefined;
    const limit = contextLimit();
    const { parsed, cut } = cutToContext(endpoint, body, parseRequest(endpoint, body, previous, options.template), limit);
    const model = profile.resolveModel(parsed.model, options.model);
    const promptTokens = engine.tokenizer.count(parsed.prompt);
    if (promptTokens === 0) throw new ApiError(400, "The prompt is empty.", { param: "prompt" });
    const tooLong = profile.contextError(promptTokens, parsed.maxTokens, limit);
    if (tooLong) throw tooLong;
    const room = limit - promptTokens;
    // A profile that does not refuse a long max_tokens (llama.cpp) stops at the context end.
    const maxTokens = Math.min(parsed.maxTokens ?? options.defaultMaxTokens, room);
    const finishReason: "stop" | "length" = parsed.maxTokens !== undefined || options.defaultMaxTokens > room ? "length" : "stop";
    const shape = endpoint === "/v1/completions" ? undefined : reasoningShape(options.template);
    const seed = outputSeed(parsed.prompt);
    const reply = shape && new ReasoningReply(shape, maxTokens, options.charsPerToken, (i) => engine.tokenizer.word(seed, i));
    return { parsed, model, promptTokens, maxTokens, finishReason, reply, cut };
  }

  /**
   * A chat longer than the context, on an engine that cuts it (Ollama): without its oldest
   * messages, the fewest dropped that fit (system messages and the last one always kept).
   * `cut`: the messages dropped.
   */
  function cutToContext(endpoint: Endpoint, body: unknown, parsed: ParsedRequest, limit: number): { parsed: ParsedRequest; cut: number } {
    if (!profile.cutsChatToContext || endpoint !== "/v1/chat/completions" || !isRecord(body) || !Array.isArray(body.messages)) return { parsed, cut: 0 };
    if (engine.tokenizer.count(parsed.prompt) < limit) return { parsed, cut: 0 };
    const messages: unknown[] = body.messages;
    if (messages.length < 2) return { parsed, cut: 0 };
    const from = (i: number) => {
      const system = messages.slice(0, i).filter((m) => isRecord(m) && m.role === "system");
      return parseRequest(endpoint, { ...body, messages: [...system, ...messages.slice(i)] }, undefined, options.template);
    };
    // The fewest dropped that fit (dropping more only shortens it, so a binary search finds
    // what chatPrompt's scan finds); the last message is kept whatever its length.
    let low = 1;
    let high = messages.length - 1;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (engine.tokenizer.count(from(mid).prompt) < limit) high = mid;
      else low = mid + 1;
    }
    const dropped = messages.slice(0, low).filter((m) => !(isRecord(m) && m.role === "system")).length;
    return { parsed: from(low), cut: dropped };
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

  type Prepared = ReturnType<typeof prepare>;

  async function generate(endpoint: Endpoint, request: Request): Promise<Response> {
    engine.stats.requests_total++;
    const errorOf = (error: ApiError) => (endpoint === "/v1/messages" ? errorResponse(error, "anthropic", baseHeaders) : profileError(error));
    const refuse = (error: ApiError, counter: "faulted_total" | "rejected_total") => {
      engine.stats[counter]++;
      if (options.verbose) log(`${options.name} POST ${endpoint} ${error.status} ${error.message}`);
      return errorOf(error);
    };
    if (faults.loading()) return refuse(new ApiError(503, "Loading model"), "faulted_total");
    let prepared: Prepared;
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
    if (profile.queueFull && faults.takeQueueFull()) return refuse(profile.queueFull(), "faulted_total");
    const { parsed } = prepared;
    if (prepared.cut > 0) promptsCut++;
    residency?.use();
    const started = clock.now();
    const ctx: FormatContext = {
      endpoint,
      id: responseId(endpoint),
      itemId: `msg_${crypto.randomUUID().replaceAll("-", "")}`,
      model: prepared.model,
      created: Math.floor(Date.now() / 1000),
      includeUsage: endpoint === "/v1/chat/completions" || endpoint === "/v1/completions" ? profile.streamUsage(parsed.streamOptions) : true,
      maxTokens: parsed.maxTokens,
      plannedTokens: prepared.maxTokens,
      finishReason: prepared.finishReason,
      instructions: parsed.instructions,
      previousResponseId: profile.responsesState === "stored" ? parsed.previousResponseId : undefined,
      store: profile.responsesState === "stored" ? parsed.store : false,
      reply: prepared.reply,
      elapsedMs: () => clock.now() - started,
    };
    const onEnd = (result: SequenceResult) => {
      if (result.ttftModelMs !== undefined) keepFirstToken(result.id, result.ttftModelMs);
      if ((result.reason === "stop" || result.reason === "length") && endpoint === "/v1/responses" && ctx.store) {
        store.set(ctx.id, [...(parsed.conversation ?? []), replyMessage(ctx, result.text)]);
      }
      if (options.verbose) {
        const ttft = result.ttftMs === undefined ? "-" : `${result.ttftMs.toFixed(1)}ms (model ${result.ttftModelMs!.toFixed(0)}ms)`;
        log(
          `${options.name} POST ${endpoint} ${result.reason} prompt=${result.promptTokens} cached=${result.cachedTokens} stop=${result.prefixStop ?? "-"} out=${result.completionTokens} ttft=${ttft}`,
        );
      }
    };
    return parsed.stream ? streamed(ctx, parsed, prepared, request, onEnd) : whole(ctx, parsed, prepared, request, onEnd);
  }

  /** Each family's response id (llama.cpp: 32 random characters, chatcmpl- for completions too; Ollama: a number below 999). */
  function responseId(endpoint: Endpoint): string {
    const hex = crypto.randomUUID().replaceAll("-", "");
    if (profile.family === "llamacpp") return `${endpoint === "/v1/responses" ? "resp_" : endpoint === "/v1/messages" ? "msg_" : "chatcmpl-"}${hex}`;
    if (profile.family === "ollama" && endpoint !== "/v1/messages") {
      return endpoint === "/v1/responses" ? `resp_${Math.floor(Math.random() * 999_999)}` : `${idPrefix(endpoint)}${Math.floor(Math.random() * 999)}`;
    }
    return `${idPrefix(endpoint)}${hex}`;
  }

  /** The assistant message a stored Responses conversation keeps (reasoning apart when the template separates it). */
  function replyMessage(ctx: FormatContext, text: string): ChatMessage {
    if (!ctx.reply?.shape.separate) return { role: "assistant", content: text };
    const { content, reasoning } = ctx.reply.split(text);
    return { role: "assistant", content, reasoning };
  }

  // `held` only when the replica held more of the prefix than the request could use;
  // `computed` only when, beyond what it held elsewhere, it had computed more and dropped it.
  // `x-sim-sequence` names the sequence in GET /sim/first-tokens.
  const prefixHeader = (seq: Pick<SimSequence, "id" | "cachedTokens" | "prefixStop" | "heldTokens" | "computedTokens">): Record<string, string> =>
    seq.prefixStop === undefined
      ? {}
      : {
          "x-sim-prefix": `cached=${seq.cachedTokens}; stop=${seq.prefixStop}${seq.heldTokens > seq.cachedTokens ? `; held=${seq.heldTokens}` : ""}${seq.computedTokens > seq.heldTokens ? `; computed=${seq.computedTokens}` : ""}`,
          "x-sim-sequence": String(seq.id),
        };

  async function whole(ctx: FormatContext, parsed: ParsedRequest, prepared: Prepared, request: Request, onEnd: (r: SequenceResult) => void): Promise<Response> {
    const seq = engine.submit({
      prompt: parsed.prompt,
      maxTokens: prepared.maxTokens,
      finishReason: prepared.finishReason,
      salt: parsed.salt,
      ...(prepared.reply ? { output: (i: number) => prepared.reply!.token(i) } : {}),
      listener: { onAdmit: onAdmitted, onToken: (_t, i) => onDecoded(i) },
    });
    const onAbort = () => engine.cancel(seq, "cancelled");
    request.signal.addEventListener("abort", onAbort, { once: true });
    if (request.signal.aborted) onAbort();
    const result = await seq.done;
    request.signal.removeEventListener("abort", onAbort);
    onEnd(result);
    if (result.reason === "cancelled") return new Response(null, { status: 499, headers: baseHeaders });
    const headers: Record<string, string> = { ...baseHeaders, ...prefixHeader(result) };
    if (result.reason !== "stop" && result.reason !== "length") {
      const error = result.reason === "overflow" ? kvOverflow() : new ApiError(503, `sim ${options.name}: request ended (${result.reason})`);
      return ctx.endpoint === "/v1/messages" ? errorResponse(error, "anthropic", headers) : profile.errorResponse(error, headers);
    }
    // The answer is parsed once the slot has sent it: the prompt stays cached either way.
    if (profile.family === "llamacpp" && ctx.endpoint === "/v1/chat/completions" && faults.takeUnparsable()) return profile.errorResponse(unparsable(), headers);
    return Response.json(profile.jsonBody(ctx, result), { headers });
  }

  async function streamed(ctx: FormatContext, parsed: ParsedRequest, prepared: Prepared, request: Request, onEnd: (r: SequenceResult) => void): Promise<Response> {
    const format = profile.streamFormat(ctx);
    const cutAfter = faults.takeClose();
    const errorAfter = faults.takeStreamError();
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let written = 0;
    let finished = false;
    let seq: SimSequence | undefined;
    // The response (and its x-sim-prefix header) goes out once the engine has admitted the
    // sequence, when its cached tokens are known — or when it ended without.
    let admitted!: () => void;
    const admission = new Promise<void>((resolve) => (admitted = resolve));
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
    /** The engine fails the request after it began: its error event ends the stream (faults.ts error_after_chunks). */
    const fail = () => {
      finished = true;
      engine.stats.faulted_total++;
      if (seq) engine.cancel(seq, "fault");
      for (const frame of profile.streamError!(new ApiError(500, "sim fault: error_after_chunks"))) controller.enqueue(encoder.encode(frame));
      controller.close();
    };
    const write = (frames: string[]) => {
      for (const frame of frames) {
        if (finished) return;
        // K = 0: not even the first (a tiny prompt's first token is written inside submit()).
        if (cutAfter === 0) return cut();
        if (errorAfter === 0) return fail();
        controller.enqueue(encoder.encode(frame));
        written++;
        if (cutAfter >= 0 && written >= cutAfter) return cut();
        if (errorAfter >= 0 && written >= errorAfter) return fail();
      }
    };
    seq = engine.submit({
      prompt: parsed.prompt,
      maxTokens: prepared.maxTokens,
      finishReason: prepared.finishReason,
      salt: parsed.salt,
      ...(prepared.reply ? { output: (i: number) => prepared.reply!.token(i) } : {}),
      listener: {
        onAdmit(self) {
          seq ??= self;
          onAdmitted(self);
          admitted();
        },
        // May run inside submit() (a tiny prompt can finish prefill at once), so use the argument.
        onToken(text, index, self) {
          seq ??= self;
          onDecoded(index);
          if (index === 0) write(format.start({ promptTokens: self.promptTokens, cachedTokens: self.cachedTokens }));
          write(format.delta(tokenPiece(ctx, text, index, options.charsPerToken)));
        },
        onEnd(result) {
          admitted();
          onEnd(result);
          if (finished) return;
          if (result.reason === "stop" || result.reason === "length") {
            write(format.end(result));
            if (!finished) {
              finished = true;
              controller.close();
            }
          } else if (result.reason === "overflow" && profile.streamError) {
            write(profile.streamError(kvOverflow()));
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
    if (cutAfter === 0 && !finished) cut();
    if (errorAfter === 0 && !finished) fail();
    await admission;
    return new Response(stream, {
      headers: { ...baseHeaders, ...prefixHeader(seq), "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
    });
  }

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname;
    const method = request.method;
    if (method === "POST" && isEndpoint(path)) return generate(path, request);
    if (path.startsWith("/sim/")) return simRoute(path, method, request, url);
    if (faults.loading() && path !== "/metrics") throw new ApiError(503, "Loading model");
    const answered = profile.route(method, path, replica, baseHeaders);
    if (answered) return answered;
    if (method === "POST" && path === "/tokenize" && profile.family !== "ollama") {
      const body = await readJson(request);
      if (profile.family !== "llamacpp" && isRecord(body) && typeof body.model === "string") profile.resolveModel(body.model, options.model);
      const { text, llamacpp } = tokenizeText(body, options.template);
      const tokens = engine.tokenizer.ids(text);
      return json(llamacpp ? { tokens } : { count: tokens.length, max_model_len: contextLimit(), tokens, token_strs: null });
    }
    return profile.notFound(baseHeaders);
  }

  async function simRoute(path: string, method: string, request: Request, url: URL): Promise<Response> {
    if (path === "/sim/state" && method === "GET") return json(state());
    if (path === "/sim/first-tokens" && method === "GET") return json({ first_token_model_ms: Object.fromEntries(firstTokens) });
    if (path === "/sim/faults" && method === "GET") return json(faults.snapshot());
    if (path === "/sim/faults" && method === "POST") {
      const body = await readJson(request);
      // An engine's own fault: another profile would take it and never use it.
      if (profile.family !== "llamacpp" && isRecord(body) && "unparsable_next" in body) {
        throw new ApiError(400, `unparsable_next imitates llama.cpp's chat parser: this sim runs the ${options.engine} profile`, { param: "unparsable_next" });
      }
      if (!profile.streamError && isRecord(body) && "error_after_chunks" in body) {
        throw new ApiError(400, `error_after_chunks imitates the error event llama.cpp and vLLM end a failed stream with: this sim runs the ${options.engine} profile`, { param: "error_after_chunks" });
      }
      if (!profile.queueFull && isRecord(body) && "queue_full_next" in body) {
        throw new ApiError(400, `queue_full_next imitates Ollama's scheduler queue and vLLM's admission control: this sim runs the ${options.engine} profile`, { param: "queue_full_next" });
      }
      faults.update(body);
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
      residency?.settle();
      const match = engine.match(parsed.prompt, parsed.salt);
      return json({ prompt_tokens: match.promptTokens, cached_tokens: match.cachedTokens, running: engine.runningCount, waiting: engine.waitingCount });
    }
    throw new ApiError(404, `Not Found: ${method} ${path}`);
  }

  return {
    name: options.name,
    model: options.model,
    options,
    profile,
    engine,
    faults,
    state,
    reset,
    close: () => engine.close(),
    async fetch(request) {
      const sim = new URL(request.url).pathname.startsWith("/sim/");
      try {
        return await route(request);
      } catch (error) {
        // /sim/* is the sim's own API: always OpenAI-shaped errors; the rest speaks the engine's.
        const answer = (e: ApiError) => (sim ? errorResponse(e, "openai", baseHeaders) : profileError(e));
        if (error instanceof ApiError) return answer(error);
        log(`${options.name}: internal error: ${(error as Error)?.stack ?? error}`);
        return answer(new ApiError(500, `sim internal error: ${(error as Error)?.message ?? error}`));
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
