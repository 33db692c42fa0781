/**
 * The probe runners: I/O in order, decisions delegated to the pure modules.
 *
 * `probeEngine`: K cold/warm pairs against one engine, each pair with a fresh salt, metrics
 * scraped before, between and after so each request's prefix-cache delta is its own.
 * `probeVia`: two conversations through a running llmroute — a long shared prefix (warm
 * turns must be fast and stay on one replica) and a short one (the identity-window trap).
 *
 * Everything outside comes in through `ProbeIO`: fetch, the clock, randomness, progress.
 */
import { chat, listModels, ProbeError, type ModelCard, scrapeMetrics, tokenize, type ChatMessage, type Http, type Target } from "./client.ts";
import {
  counterDelta,
  detectFamily,
  loadOf,
  presence,
  sglangHitRate,
  type FamilyPresence,
  type Load,
  type PrefixCounters,
  type Scrape,
} from "./metrics.ts";
import { profileOf } from "../engines/index.ts";
import { buildPrefix, calibrate, closeEnough, DEFAULT_CHARS_PER_TOKEN, makeSalt, shortPrefix, tail } from "./prompt.ts";
import {
  engineVerdict,
  pairFigures,
  viaVerdict,
  type ConversationFigures,
  type ConversationMeasure,
  type EngineSummary,
  type PairFigures,
  type PairMeasure,
  type RequestMeasure,
  type Verdict,
} from "./verdict.ts";

export interface Progress {
  /** A step that takes a while starts; call the returned function with its result. */
  step(label: string): (result: string) => void;
  /** A line worth seeing now (a warning). */
  note(line: string): void;
}

export interface ProbeIO extends Http {
  random: () => number;
  date: () => Date;
  progress: Progress;
}

export const silentProgress: Progress = { step: () => () => {}, note: () => {} };

/** Leave room for the chat template and the tail when comparing with max_model_len. */
const TEMPLATE_MARGIN_TOKENS = 64;

export interface EngineProbeOptions {
  model?: string;
  tokens: number;
  repeat: number;
  timeoutMs: number;
  metricsPath: string;
}

export interface MetricsReport {
  path: string;
  available: boolean;
  scrapes: number;
  families?: FamilyPresence[];
  family?: string;
  /** Prefix-cache counters over the whole probe (vLLM). */
  delta?: PrefixCounters;
  /** SGLang's gauge before and after (it has no counters). */
  sglangHitRate?: { before?: number; after?: number };
}

export interface EngineReport {
  mode: "engine";
  target: { label: string; url: string };
  model: string;
  notes: string[];
  tokens: { requested: number; prefix: number; source: PairMeasure["prefixTokensSource"]; charsPerToken: number };
  idle: { checked: boolean; load?: Load };
  metrics: MetricsReport;
  pairs: (PairMeasure & PairFigures)[];
  summary: EngineSummary;
  verdict: Verdict;
}

async function resolveModel(io: ProbeIO, target: Target, requested: string | undefined, timeoutMs: number) {
  const cards = await listModels(io, target, timeoutMs);
  const notes: string[] = [];
  if (requested !== undefined) {
    if (cards && cards.length > 0 && !cards.some((c) => c.id === requested)) {
      throw new ProbeError(`${target.label}: model ${JSON.stringify(requested)} is not served at ${target.url}; it serves: ${cards.map((c) => c.id).join(", ")}`);
    }
    const card = cards?.find((c) => c.id === requested);
    return { model: requested, maxModelLen: card?.max_model_len, limitName: limitNameOf(card), notes };
  }
  if (!cards) throw new ProbeError(`${target.label}: ${target.url}/v1/models is not available to discover the model; pass --model`);
  const first = cards[0];
  if (!first) throw new ProbeError(`${target.label}: ${target.url}/v1/models lists no model (still loading?); pass --model`);
  if (cards.length > 1) notes.push(`${cards.length} models served (${cards.map((c) => c.id).join(", ")}); probed ${first.id} — choose with --model`);
  return { model: first.id, maxModelLen: first.max_model_len, limitName: limitNameOf(first), notes };
}

/** llama.cpp's limit is a slot's context, not a model length: say which it is. */
const limitNameOf = (card: ModelCard | undefined) => (card?.owned_by === "llamacpp" ? "a slot's context, meta.n_ctx" : "max_model_len");

const seconds = (ms: number) => (ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`);

/** Chat with streaming, falling back to a plain request once if the engine rejects streaming. */
function createRequester(io: ProbeIO, target: Target, timeoutMs: number) {
  let stream = true;
  return async (model: string, messages: ChatMessage[]): Promise<RequestMeasure> => {
    try {
      return await chat(io, target, { model, messages, stream, timeoutMs });
    } catch (error) {
      if (stream && error instanceof ProbeError && (error.status === 400 || error.status === 422) && /stream/i.test(error.detail ?? "")) {
        stream = false;
        io.progress.note(`${target.label}: streaming was rejected (${error.message}); timing whole requests instead`);
        return chat(io, target, { model, messages, stream, timeoutMs });
      }
      throw error;
    }
  };
}

export async function probeEngine(target: Target, options: EngineProbeOptions, io: ProbeIO): Promise<EngineReport> {
  const { model, maxModelLen, limitName, notes } = await resolveModel(io, target, options.model, options.timeoutMs);
  const scrapes: Scrape[] = [];
  const scrape = async () => {
    const s = await scrapeMetrics(io, target, options.metricsPath, options.timeoutMs);
    if (s) scrapes.push(s);
    return s;
  };

  const first = await scrape();
  const idle = first ? loadOf(first) : undefined;
  if (idle && idle.running + idle.waiting > 0) {
    io.progress.note(`warning: ${target.label} is not idle (running ${idle.running}, waiting ${idle.waiting}): other work skews TTFT`);
  }

  const request = createRequester(io, target, options.timeoutMs);
  const pairs: (PairMeasure & PairFigures)[] = [];
  let charsPerToken = DEFAULT_CHARS_PER_TOKEN;
  let before = first;
  for (let i = 0; i < options.repeat; i++) {
    const salt = makeSalt(io.random, io.date());
    let prefix = buildPrefix(salt, options.tokens, charsPerToken);
    let count = await tokenize(io, target, model, prefix, options.timeoutMs);
    if (count && !closeEnough(count.count, options.tokens)) {
      // One calibration from the engine's own tokenizer, then the size is right for every pair.
      charsPerToken = calibrate(prefix.length, count.count);
      prefix = buildPrefix(salt, options.tokens, charsPerToken);
      count = await tokenize(io, target, model, prefix, options.timeoutMs);
    }
    const limit = count?.maxModelLen ?? maxModelLen;
    const size = count?.count ?? options.tokens;
    if (limit !== undefined && size + TEMPLATE_MARGIN_TOKENS > limit) {
      throw new ProbeError(
        `${target.label}: a ${size}-token prompt does not fit model ${model} (${count?.maxModelLen !== undefined ? "max_model_len" : limitName} ${limit}); use --tokens ${Math.max(1, limit - 2 * TEMPLATE_MARGIN_TOKENS)} or less`,
      );
    }
    const tag = options.repeat > 1 ? `pair ${i + 1}/${options.repeat}: ` : "";

    let done = io.progress.step(`${tag}cold request (${size.toLocaleString("en-US")} tokens, salt ${salt})`);
    const cold = await request(model, [{ role: "user", content: prefix + tail(`cold ${salt}`) }]);
    done(`TTFT ${seconds(cold.ttftMs)}`);
    const mid = await scrape();

    done = io.progress.step(`${tag}warm request (same prefix, new tail)`);
    const warm = await request(model, [{ role: "user", content: prefix + tail(`warm ${salt}`) }]);
    done(`TTFT ${seconds(warm.ttftMs)}`);
    const after = await scrape();

    const coldCounters = counterDelta(before, mid);
    const warmCounters = counterDelta(mid, after);
    before = after;
    const pair: PairMeasure = {
      salt,
      prefixTokens: count?.count ?? cold.promptTokens ?? Math.round(prefix.length / charsPerToken),
      prefixTokensSource: count ? "tokenize" : cold.promptTokens !== undefined ? "usage" : "estimate",
      cold,
      warm,
      ...(coldCounters ? { coldCounters } : {}),
      ...(warmCounters ? { warmCounters } : {}),
    };
    pairs.push({ ...pair, ...pairFigures(pair) });
  }

  const families = scrapes.length > 0 ? presence(scrapes) : undefined;
  const family = families && detectFamily(families);
  const last = scrapes.at(-1);
  const delta = counterDelta(first, last);
  const hitBefore = first && sglangHitRate(first);
  const hitAfter = last && sglangHitRate(last);
  const metrics: MetricsReport = {
    path: options.metricsPath,
    available: scrapes.length > 0,
    scrapes: scrapes.length,
    ...(families ? { families } : {}),
    ...(family ? { family } : {}),
    ...(delta ? { delta } : {}),
    ...(hitBefore !== undefined || hitAfter !== undefined
      ? { sglangHitRate: { ...(hitBefore === undefined ? {} : { before: hitBefore }), ...(hitAfter === undefined ? {} : { after: hitAfter }) } }
      : {}),
  };
  const profile = family ? profileOf(family) : undefined;
  const blockTokens = last && profile?.capacityFromMetrics?.(last)?.blockTokens;
  const { summary, verdict } = engineVerdict({
    pairs,
    ...(idle ? { idle } : {}),
    ...(blockTokens ? { blockTokens } : {}),
    ...(profile?.usage.zeroOmitted ? { zeroOmitted: true } : {}),
  });
  return {
    mode: "engine",
    target: { label: target.label, url: target.url },
    model,
    notes,
    tokens: { requested: options.tokens, prefix: summary.prefixTokens, source: pairs[0]!.prefixTokensSource, charsPerToken },
    idle: { checked: idle !== undefined, ...(idle ? { load: idle } : {}) },
    metrics,
    pairs,
    summary,
    verdict,
  };
}

// ---------------------------------------------------------------------------------------

export interface ViaProbeOptions {
  model?: string;
  tokens: number;
  turns: number;
  timeoutMs: number;
}

export interface ViaReport {
  mode: "via";
  target: { label: string; url: string };
  model: string;
  notes: string[];
  conversations: ConversationMeasure[];
  figures: ConversationFigures[];
  verdict: Verdict;
}

export async function probeVia(target: Target, options: ViaProbeOptions, io: ProbeIO): Promise<ViaReport> {
  const { model, notes } = await resolveModel(io, target, options.model, options.timeoutMs);
  const request = createRequester(io, target, options.timeoutMs);

  const converse = async (label: ConversationMeasure["label"], system: string, estimate: number): Promise<ConversationMeasure> => {
    const history: ChatMessage[] = [{ role: "system", content: system }];
    const turns: RequestMeasure[] = [];
    for (let k = 1; k <= options.turns; k++) {
      const question = `Turn ${k}: reply with one word.`;
      const done = io.progress.step(`${label} prefix, turn ${k}/${options.turns}`);
      const m = await request(model, [...history, { role: "user", content: question }]);
      if (m.replica === undefined) {
        throw new ProbeError(
          `${target.label}: the response carries no x-llmroute-replica header, so pinning cannot be checked; --via expects a running llmroute (probe an engine with --url)`,
        );
      }
      done(`${m.replica} (${m.route ?? "?"}) TTFT ${seconds(m.ttftMs)}`);
      turns.push(m);
      // The engine's own reply goes back verbatim: the next turn then starts with exactly
      // the text the engine computed, as an agent loop's does.
      history.push({ role: "user", content: question }, { role: "assistant", content: m.content });
    }
    return {
      label,
      prefixTokens: turns[0]?.promptTokens ?? estimate,
      prefixBytes: new TextEncoder().encode(system).length,
      turns,
    };
  };

  const long = await converse("long", buildPrefix(makeSalt(io.random, io.date()), options.tokens), options.tokens);
  const short = shortPrefix(makeSalt(io.random, io.date()));
  const shortConversation = await converse("short", short, Math.ceil(short.length / DEFAULT_CHARS_PER_TOKEN));
  const conversations = [long, shortConversation];
  const { figures, verdict } = viaVerdict(conversations);
  return { mode: "via", target: { label: target.label, url: target.url }, model, notes, conversations, figures, verdict };
}
