/**
 * From measurements to a verdict and an exit code (pure).
 *
 * 0 — the cache works: warm TTFT at most half of cold, or the engine says it reused at
 *     least 90 % of the shared prefix.
 * 1 — no cache effect; the likely causes are listed, those the measurements point at first.
 * 2 — could not probe (raised by the runner as an LlmrouteError, never decided here).
 *
 * Either signal suffices: timing is what users feel, cached tokens are the engine's own
 * per-request truth. One exception: when the engine counts (about) none of the prefix cached
 * on the warm requests, a faster warm request is not a cache effect — a cold request slowed
 * by load on the machine looks the same (seen: --no-cache-prompt llama-server, a loaded
 * CI box, one pair). A lifetime counter is never used.
 */
import type { Load, PrefixCounters } from "./metrics.ts";
import { int, pct } from "../ops/table.ts";

/** Warm TTFT at most this fraction of cold TTFT counts as a cache effect. */
export const TTFT_RATIO_MAX = 0.5;
/** Cached tokens at least this fraction of the shared prefix count as a cache effect. */
export const CACHED_FRACTION_MIN = 0.9;
/** The engine counting less than this fraction of the prefix cached denies a cache effect, whatever the timing. */
export const CACHED_FRACTION_NONE = 0.1;
/** Below this many tokens prefill is too short for a cache effect to show above overhead. */
export const SMALL_PROMPT_TOKENS = 1024;
/** vLLM's default KV block: only full blocks are cached. */
export const BLOCK_TOKENS = 16;

export type ExitCode = 0 | 1 | 2;

/** One request as measured. */
export interface RequestMeasure {
  /** Time to the first streamed token; the total time when the engine did not stream. */
  ttftMs: number;
  totalMs: number;
  streamed: boolean;
  /** usage.prompt_tokens */
  promptTokens?: number;
  /** usage.prompt_tokens_details.cached_tokens, else llama.cpp timings.cache_n. */
  cachedTokens?: number;
  cachedSource?: "usage" | "timings";
  /** x-llmroute-replica / x-llmroute-route when a router answered. */
  replica?: string;
  route?: string;
  /** The reply text (sent back as the assistant turn in --via conversations). */
  content: string;
}

export interface PairMeasure {
  salt: string;
  /** The engine's count of the shared prefix. */
  prefixTokens: number;
  prefixTokensSource: "tokenize" | "usage" | "estimate";
  cold: RequestMeasure;
  warm: RequestMeasure;
  /** Prefix-cache counter deltas over each request (vLLM), when /metrics has them. */
  coldCounters?: PrefixCounters;
  warmCounters?: PrefixCounters;
}

export interface Cause {
  text: string;
  /** True when a measurement of this run points at it; false = a common cause to check. */
  evidence: boolean;
}

export interface Verdict {
  code: ExitCode;
  summary: string;
  causes: Cause[];
  notes: string[];
}

export function median(values: readonly number[]): number | undefined {
  const xs = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (xs.length === 0) return undefined;
  const mid = Math.floor(xs.length / 2);
  return xs.length % 2 === 1 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2;
}

export interface PairFigures {
  ratio: number;
  /** warm cached tokens / shared prefix tokens, when the engine reported cached tokens. */
  cachedFraction?: number;
}

export function pairFigures(pair: PairMeasure): PairFigures {
  const ratio = pair.cold.ttftMs > 0 ? pair.warm.ttftMs / pair.cold.ttftMs : Infinity;
  const cached = pair.warm.cachedTokens;
  return {
    ratio,
    ...(cached !== undefined && pair.prefixTokens > 0 ? { cachedFraction: cached / pair.prefixTokens } : {}),
  };
}

export interface EngineSummary {
  n: number;
  coldTtftMs: number;
  warmTtftMs: number;
  /** Median of the per-pair warm/cold ratios (not the ratio of medians: pairs differ in salt only). */
  ratio: number;
  cachedFraction?: number;
  prefixTokens: number;
}

export function summarise(pairs: readonly PairMeasure[]): EngineSummary {
  const figures = pairs.map(pairFigures);
  const fractions = figures.flatMap((f) => (f.cachedFraction === undefined ? [] : [f.cachedFraction]));
  const cachedFraction = median(fractions);
  return {
    n: pairs.length,
    coldTtftMs: median(pairs.map((p) => p.cold.ttftMs)) ?? NaN,
    warmTtftMs: median(pairs.map((p) => p.warm.ttftMs)) ?? NaN,
    ratio: median(figures.map((f) => f.ratio)) ?? NaN,
    ...(cachedFraction === undefined ? {} : { cachedFraction }),
    prefixTokens: median(pairs.map((p) => p.prefixTokens)) ?? 0,
  };
}

export interface EngineVerdictInput {
  pairs: readonly PairMeasure[];
  /** Load before the probe, when /metrics told it. */
  idle?: Load;
  /** Tokens per cached block, when the engine publishes it (vLLM cache_config_info; hybrid models use hundreds). */
  blockTokens?: number;
  /** The family omits a zero cached_tokens (vLLM's older versions, SGLang): an absent field on a warm request may be 0. */
  zeroOmitted?: boolean;
}

/** A ratio as the report prints it: "0.053x". */
export const times = (x: number) => (!Number.isFinite(x) ? "-" : `${x < 0.095 ? x.toFixed(3) : x.toFixed(2)}x`);

export function engineVerdict(input: EngineVerdictInput): { summary: EngineSummary; verdict: Verdict } {
  const { pairs, idle } = input;
  const block = input.blockTokens ?? BLOCK_TOKENS;
  const s = summarise(pairs);
  const notes: string[] = [];
  const denied = s.cachedFraction !== undefined && s.cachedFraction < CACHED_FRACTION_NONE;
  const byTime = s.ratio <= TTFT_RATIO_MAX && !denied;
  const byCached = s.cachedFraction !== undefined && s.cachedFraction >= CACHED_FRACTION_MIN;
  // The engine's own counters over each warm request, where it reports no per-request count
  // (vLLM without --enable-prompt-tokens-details): its prefix-cache hits during that request.
  const warmHits = pairs.map((p) => (p.warmCounters && p.prefixTokens > 0 ? p.warmCounters.hits / p.prefixTokens : undefined)).filter((x): x is number => x !== undefined);
  const counterFraction = median(warmHits);
  const counterName = pairs.find((p) => p.warmCounters)?.warmCounters?.names[0];
  const byCounters = s.cachedFraction === undefined && counterFraction !== undefined && counterFraction >= CACHED_FRACTION_MIN;
  const busy = idle !== undefined && idle.running + idle.waiting > 0;

  if (busy) notes.push(`the replica was not idle before the probe (running ${idle!.running}, waiting ${idle!.waiting}): timings are skewed`);
  if (pairs.some((p) => !p.cold.streamed || !p.warm.streamed)) {
    notes.push("the engine did not stream: TTFT is the total request time (max_tokens 1 keeps decode negligible)");
  }
  if (s.n < 3) notes.push(`n=${s.n}: a single pair can be noise; --repeat 3 or more for a median that means something`);

  if (byTime || byCached || byCounters) {
    const source = pairs.find((p) => p.warm.cachedSource)?.warm.cachedSource === "timings" ? "timings.cache_n" : "usage cached_tokens";
    const why = [
      byTime ? `warm TTFT ${times(s.ratio)} cold (<= ${TTFT_RATIO_MAX}x; by time to first token)` : undefined,
      byCached ? `${pct(s.cachedFraction!)} of the shared prefix cached (by ${source})` : undefined,
      byCounters ? `${pct(counterFraction!)} of the shared prefix hit the cache (by ${counterName} over each warm request)` : undefined,
    ].filter(Boolean);
    if (byCached && !byTime) {
      notes.push(
        `the engine reports the prefix cached but warm TTFT is ${times(s.ratio)} cold: prefill is not what dominates at ${int(s.prefixTokens)} tokens (queueing, a slow first decode step); try a larger --tokens`,
      );
    }
    return { summary: s, verdict: { code: 0, summary: `prefix cache works: ${why.join(", ")} (n=${s.n})`, causes: [], notes } };
  }

  const causes: Cause[] = [];
  const cachedReported = s.cachedFraction !== undefined;
  const disabledGeneric =
    "prefix caching disabled on the engine (vLLM --no-enable-prefix-caching, SGLang --disable-radix-cache, llama.cpp --no-cache-prompt or cache_prompt=false)";
  let disabledShown = false;
  if (denied) {
    causes.push({ text: `the engine reports ${pct(s.cachedFraction!)} of the prefix cached on the warm request: ${disabledGeneric}`, evidence: true });
    disabledShown = true;
    if (s.ratio <= TTFT_RATIO_MAX) {
      notes.push(`warm TTFT was ${times(s.ratio)} cold, but the engine counted ${pct(s.cachedFraction!)} cached: a timing effect it does not confirm (a cold request slowed by other load) is not taken as a cache`);
    }
  }
  const warmCounters = pairs.map((p) => p.warmCounters).filter((c): c is PrefixCounters => c !== undefined);
  if (warmCounters.length > 0) {
    const hits = warmCounters.reduce((a, c) => a + c.hits, 0);
    const queries = warmCounters.reduce((a, c) => a + c.queries, 0);
    if (queries > 0 && hits / queries < 0.1) {
      causes.push({
        text: `${warmCounters[0]!.names[0]} rose by ${int(hits)} of ${int(queries)} queried tokens during the warm requests${disabledShown ? "" : `: ${disabledGeneric}`}`,
        evidence: true,
      });
      disabledShown = true;
    }
  }
  const split = pairs.find((p) => p.cold.replica !== undefined && p.warm.replica !== undefined && p.cold.replica !== p.warm.replica);
  if (split) {
    causes.push({
      text: `a router in between sent the cold request to ${split.cold.replica} and the warm one to ${split.warm.replica}: probe the engine itself (--url, --replica) or the router with --via`,
      evidence: true,
    });
  }
  if (busy) causes.push({ text: `replica busy: ${idle!.running} running and ${idle!.waiting} waiting before the probe`, evidence: true });
  if (s.prefixTokens < block) {
    causes.push({ text: `prompt below one cache block (${int(s.prefixTokens)} tokens; the engine caches whole ${int(block)}-token blocks)`, evidence: true });
  } else if (s.prefixTokens < SMALL_PROMPT_TOKENS) {
    causes.push({ text: `prompt too short (${int(s.prefixTokens)} tokens) for prefill time to stand out from overhead: try --tokens 16000`, evidence: true });
  }

  if (!disabledShown) causes.push({ text: disabledGeneric, evidence: false });
  if (s.prefixTokens >= SMALL_PROMPT_TOKENS) {
    causes.push({ text: `cached blocks evicted before the warm request (a KV pool too small for ${int(s.prefixTokens)} tokens, or other traffic)`, evidence: false });
  }
  if (!busy) causes.push({ text: "replica busy: other traffic evicting the prefix or delaying the warm request", evidence: false });
  if (!split) causes.push({ text: "a proxy or load balancer in between that spreads requests over replicas or rewrites the prompt", evidence: false });
  if (!cachedReported) {
    notes.push(
      input.zeroOmitted
        ? "the engine reported no cached_tokens: it omits a zero, or its flag is off (vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report)"
        : "the engine reported no cached_tokens (vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report; Ollama reports none)",
    );
  }

  return {
    summary: s,
    verdict: { code: 1, summary: `no cache effect: warm TTFT ${times(s.ratio)} cold (needs <= ${TTFT_RATIO_MAX}x) (n=${s.n})`, causes, notes },
  };
}

// ---------------------------------------------------------------------------------------
// --via: a conversation through the router

export interface ConversationMeasure {
  /** "long" proves warm turns; "short" proves the identity-window trap is absent. */
  label: "long" | "short";
  prefixTokens: number;
  prefixBytes: number;
  turns: RequestMeasure[];
}

export interface ConversationFigures {
  label: ConversationMeasure["label"];
  pinned: boolean;
  replicas: string[];
  routes: string[];
  /** Median warm-turn TTFT / first-turn TTFT. */
  ratio: number;
  /** Median over warm turns of cached tokens / the previous turn's prompt (all of it is shared). */
  cachedFraction?: number;
  warm: boolean;
  /** 1-based turns after the first that were cold again (TTFT above the ratio): the cache hits lost. */
  coldTurns: number[];
}

export function conversationFigures(c: ConversationMeasure): ConversationFigures {
  const replicas = c.turns.map((t) => t.replica ?? "?");
  const [first, ...rest] = c.turns;
  const ratio = first && first.ttftMs > 0 ? (median(rest.map((t) => t.ttftMs)) ?? NaN) / first.ttftMs : NaN;
  const fractions: number[] = [];
  c.turns.forEach((t, i) => {
    if (i === 0 || t.cachedTokens === undefined) return;
    const shared = c.turns[i - 1]!.promptTokens ?? c.prefixTokens;
    if (shared > 0) fractions.push(t.cachedTokens / shared);
  });
  const cachedFraction = median(fractions);
  return {
    label: c.label,
    pinned: replicas.every((r) => r !== "?" && r === replicas[0]),
    replicas,
    routes: c.turns.map((t) => t.route ?? "?"),
    ratio,
    ...(cachedFraction === undefined ? {} : { cachedFraction }),
    // As for the engine verdict: the engine's count of ~0 cached denies a timing effect.
    warm: cachedFraction === undefined ? ratio <= TTFT_RATIO_MAX : cachedFraction >= CACHED_FRACTION_MIN || (cachedFraction >= CACHED_FRACTION_NONE && ratio <= TTFT_RATIO_MAX),
    coldTurns: first ? rest.flatMap((t, i) => (t.ttftMs > first.ttftMs * TTFT_RATIO_MAX ? [i + 2] : [])) : [],
  };
}

export function viaVerdict(conversations: readonly ConversationMeasure[]): { figures: ConversationFigures[]; verdict: Verdict } {
  const figures = conversations.map(conversationFigures);
  const long = figures.find((f) => f.label === "long");
  const short = figures.find((f) => f.label === "short");
  const causes: Cause[] = [];
  const notes: string[] = [];
  const path = (f: ConversationFigures) => f.replicas.join(" -> ");

  // A turn the router failed over moved because its replica failed before the first byte
  // (refused, reset, a 5xx, the first-byte deadline), not because of the policy or the
  // conversation's identity: named first, and a move it explains is not blamed on either.
  const movedBy = new Map<ConversationFigures, { failedOver: number[]; otherMoves: number }>();
  for (const f of figures) {
    const failedOver = f.routes.flatMap((r, i) => (r.split(",").includes("failover") ? [i + 1] : []));
    if (failedOver.length === 0) continue;
    // 1-based turns that landed elsewhere than the turn before.
    const moves = f.replicas.flatMap((r, i) => (i > 0 && r !== f.replicas[i - 1] ? [i + 1] : []));
    const moved = failedOver.filter((t) => moves.includes(t));
    if (moved.length === 0) {
      notes.push(`${f.label} conversation: turn ${failedOver.join(", ")} failed over, without moving the conversation (routes ${f.routes.join(", ")})`);
      continue;
    }
    movedBy.set(f, { failedOver: moved, otherMoves: moves.length - moved.length });
    causes.push({
      text: `${f.label} conversation: turn ${moved.join(", ")} failed over (${path(f)}; routes ${f.routes.join(", ")}): the router could not use the conversation's replica before the first byte (connection refused or reset, a 5xx, first_byte_timeout), so the turn went to another and paid a cold prefill — a replica's failure, not the policy; the router's failover log line says why. Probe again once its replicas are healthy`,
      evidence: true,
    });
  }
  const unexplained = (f: ConversationFigures) => !f.pinned && (movedBy.get(f)?.otherMoves ?? 1) > 0;

  if (long && unexplained(long)) {
    causes.push({
      text: `long conversation not pinned: turns went to ${path(long)} (routes ${long.routes.join(", ")})${long.coldTurns.length > 0 ? `, and turn ${long.coldTurns.join(", ")} paid a cold prefill again` : ""}; the router's policy does not keep a conversation on one replica (roundrobin, random, least-loaded do not): use hybrid, affinity or cache-aware`,
      evidence: true,
    });
  }
  if (short && unexplained(short)) {
    causes.push({
      text:
        long && (long.pinned || !unexplained(long))
          ? `short-prefix conversation not pinned (${path(short)}) while the long one was: the identity-window trap — the router identifies a conversation by a leading window longer than this shared prefix`
          : `short-prefix conversation not pinned either: turns went to ${path(short)}`,
      evidence: true,
    });
  }
  if (long && long.pinned && !long.warm) {
    causes.push({
      text: `every turn landed on ${long.replicas[0]} but warm turns were not faster (${long.ratio.toFixed(2)}x turn 1): that replica's prefix cache shows no effect — probe it directly (llmroute probe --replica ${long.replicas[0]})`,
      evidence: true,
    });
  }
  if (long && long.replicas.length < 3) notes.push(`n=${long.replicas.length} turns: use --turns 4 or more to see more than one warm turn`);

  const ok = causes.length === 0;
  const n = long ? long.replicas.length : 0;
  const failedOver = [...movedBy].map(([f, m]) => `${f.label} turn ${m.failedOver.join(", ")}`);
  const summary = ok
    ? `pinned and warm: every turn of both conversations stayed on one replica (long: ${long?.replicas[0]}, short: ${short?.replicas[0]}), warm turns ${long?.ratio.toFixed(2)}x the first (n=${n} turns each)`
    : failedOver.length > 0
      ? `a turn failed over (${failedOver.join("; ")}): ${[long, short].filter((f) => f && !f.pinned).map((f) => `${f!.label} ${path(f!)}`).join(", ") || "every turn still on one replica"} (n=${n} turns)`
      : long && !long.pinned
      ? `not pinned: ${path(long)} (n=${n} turns)`
      : short && !short.pinned
        ? `not pinned with a short shared prefix: ${path(short)} (n=${n} turns)`
        : `pinned but not warm (n=${n} turns)`;
  return { figures, verdict: { code: ok ? 0 : 1, summary, causes, notes } };
}
