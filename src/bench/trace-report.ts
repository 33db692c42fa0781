/**
 * The trace workload's figures, pure: per arm the delivered hit rate against the two
 * yardsticks (the infinite cache and the pooled one, pooled.ts), TTFT p50/p90/p99, each
 * card's share of the requests and of the prompt tokens, its evicted blocks, and the route
 * reasons (over the arm and per card) that explain where the requests went — every figure
 * over the measured requests (the warm-up's are sent, not counted), with its n.
 */
import { int, pct, table } from "../ops/table.ts";
import type { TraceYardstick } from "./pooled.ts";
import type { ArmResult, Sample } from "./run.ts";
import { quantile, ratio } from "./stats.ts";

export interface TraceCard {
  requests: number;
  /** Share of the arm's measured requests. */
  requestShare: number;
  promptTokens: number;
  /** Share of the arm's measured prompt tokens. */
  tokenShare: number;
  /** Σ cached ÷ Σ prompt tokens of the requests it served. */
  hitRate: number;
  /** Blocks the card's engine evicted over the whole arm, warm-up included (sims; undefined on real replicas). */
  evictedBlocks?: number;
  /** Route reason (x-llmroute-route) → requests. */
  routes: Record<string, number>;
}

export interface TraceArmSummary {
  /** Measured requests that succeeded: the n of every figure below. */
  n: number;
  /** Requests sent in the warm-up (not measured). */
  warmup: number;
  /** Delivered: Σ engine-reported cached tokens ÷ Σ prompt tokens. */
  hitRate: number;
  /** hitRate ÷ the infinite cache's; ÷ the pooled cache's (NaN when unknown). */
  vsCeiling: number;
  vsPooled: number;
  ttft: { n: number; p50: number; p90: number; p99: number };
  /**
   * Sims: the engines' own time to first token (Sample.engineTtftMs), over the measured
   * requests the sims timed: what the cards took, without the hops' and this machine's time.
   */
  engineTtft?: TraceArmSummary["ttft"];
  /** Per card, in the fleet's order (the pooled arm: its one sim). */
  cards: Record<string, TraceCard>;
  /** The busiest card's shares. */
  maxRequestShare: number;
  maxTokenShare: number;
  /** Route reason → requests, over the arm. */
  routes: Record<string, number>;
}

const count = (keys: readonly string[]): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const k of keys) out[k] = (out[k] ?? 0) + 1;
  return Object.fromEntries(Object.entries(out).sort((a, b) => b[1] - a[1]));
};

/** The measured requests of a trace arm: not the warm-up's. */
export const measuredOf = (samples: readonly Sample[]) => samples.filter((s) => !s.warmup);

/** n, p50, p90 and p99 of a TTFT sample (the client's or the engines'). */
function spread(values: readonly number[]): TraceArmSummary["ttft"] {
  return { n: values.length, p50: quantile(values, 0.5), p90: quantile(values, 0.9), p99: quantile(values, 0.99) };
}

/** One arm's trace figures over its successful measured requests; `replicas` orders the cards. */
export function summarizeTraceArm(arm: ArmResult, replicas: readonly string[], yardstick?: TraceYardstick): TraceArmSummary {
  const measured = measuredOf(arm.samples).filter((s) => !s.error);
  const prompt = (list: readonly Sample[]) => list.reduce((a, s) => a + s.promptTokens, 0);
  const hit = (list: readonly Sample[]) => {
    const p = prompt(list);
    return p === 0 ? NaN : list.reduce((a, s) => a + s.cachedTokens, 0) / p;
  };
  const total = prompt(measured);
  // Every card of the fleet, idle ones too; the pooled arm has its one sim.
  const seen = [...new Set(measured.map((s) => s.replica))];
  const names = arm.arm === "pooled" ? seen : [...replicas, ...seen.filter((r) => !replicas.includes(r))];
  const cards: Record<string, TraceCard> = {};
  for (const name of names) {
    const mine = measured.filter((s) => s.replica === name);
    const evicted = arm.sim?.perReplica?.[name]?.evictedBlocks;
    cards[name] = {
      requests: mine.length,
      requestShare: measured.length === 0 ? NaN : mine.length / measured.length,
      promptTokens: prompt(mine),
      tokenShare: total === 0 ? NaN : prompt(mine) / total,
      hitRate: hit(mine),
      ...(evicted === undefined ? {} : { evictedBlocks: evicted }),
      routes: count(mine.map((s) => s.route)),
    };
  }
  const ttfts = measured.map((s) => s.ttftMs);
  const engine = measured.flatMap((s) => (s.engineTtftMs === undefined ? [] : [s.engineTtftMs]));
  const hitRate = hit(measured);
  const shares = Object.values(cards);
  return {
    n: measured.length,
    warmup: arm.samples.filter((s) => s.warmup).length,
    hitRate,
    vsCeiling: ratio(hitRate, yardstick?.ceiling.hitRate),
    vsPooled: ratio(hitRate, yardstick?.pooled?.hitRate),
    ttft: spread(ttfts),
    ...(engine.length > 0 ? { engineTtft: spread(engine) } : {}),
    cards,
    maxRequestShare: shares.length === 0 ? NaN : Math.max(...shares.map((c) => c.requestShare)),
    maxTokenShare: shares.length === 0 ? NaN : Math.max(...shares.map((c) => c.tokenShare)),
    routes: count(measured.map((s) => s.route)),
  };
}

const share = (r: number) => (Number.isFinite(r) ? pct(r) : "-");
const ms = (v: number) => (Number.isFinite(v) ? int(v) : "-");
const times = (r: number) => (Number.isFinite(r) ? `${r.toFixed(2)}×` : "-");
const reasons = (routes: Record<string, number>) =>
  Object.entries(routes)
    .map(([k, v]) => `${k} ${int(v)}`)
    .join(", ");

/** The busiest cards of an arm: by requests, then by prompt tokens ("gpu1 38% · gpu0 41%"). */
function busiest(t: TraceArmSummary): string {
  const top = (f: (c: TraceCard) => number) => Object.entries(t.cards).sort((a, b) => f(b[1]) - f(a[1]))[0];
  const [byRequests, byTokens] = [top((c) => c.requestShare), top((c) => c.tokenShare)];
  return byRequests && byTokens ? `${byRequests[0]} ${share(byRequests[1].requestShare)} · ${byTokens[0]} ${share(byTokens[1].tokenShare)}` : "-";
}

/** The yardsticks in one line. */
export function yardstickLine(y: TraceYardstick | undefined, cards: number): string {
  if (!y) return "";
  const pooled = y.pooled
    ? `one LRU cache of the ${cards} cards' ${int(y.pooled.kvTokens)} KV tokens ${share(y.pooled.hitRate)} in ${y.pooled.blockTokens}-token blocks` +
      `${y.pooledFine ? ` (${share(y.pooledFine.hitRate)} in ${y.pooledFine.blockTokens}-token blocks)` : ""}`
    : "pooled cache unknown (a card's kv_tokens is not set)";
  return `yardsticks over the same ${int(y.requests)} measured requests (${int(y.promptTokens)} prompt tokens, the warm-up's filling the cache first): infinite cache ${share(y.ceiling.hitRate)}; ${pooled}`;
}

/**
 * Per arm: n, TTFT p50/p90/p99 (and on sims the engines' own p50/p90), the delivered hit rate
 * against both yardsticks, the busiest card and the route reasons.
 */
export function traceTable(arms: readonly { arm: string; errors: number; requests: number; trace?: TraceArmSummary }[]): string {
  const engine = arms.some((a) => a.trace?.engineTtft);
  const blank = engine ? ["-", "-"] : [];
  return table(
    ["policy", "n", "ttft p50 ms", "p90 ms", "p99 ms", ...(engine ? ["engine p50 ms", "p90 ms"] : []), "hit rate", "÷ ceiling", "÷ pooled", "most requests · most tokens", "routes", "errors"],
    arms.map((a) => {
      const t = a.trace;
      if (!t) return [a.arm, 0, "-", "-", "-", ...blank, "-", "-", "-", "-", "-", a.errors === 0 ? "0" : `${a.errors}/${a.requests}`];
      return [
        a.arm,
        t.n,
        ms(t.ttft.p50),
        ms(t.ttft.p90),
        ms(t.ttft.p99),
        ...(engine ? (t.engineTtft ? [ms(t.engineTtft.p50), ms(t.engineTtft.p90)] : blank) : []),
        share(t.hitRate),
        times(t.vsCeiling),
        times(t.vsPooled),
        busiest(t),
        reasons(t.routes),
        a.errors === 0 ? "0" : `${a.errors}/${a.requests}`,
      ];
    }),
    { right: engine ? [1, 2, 3, 4, 5, 6, 7, 8, 9] : [1, 2, 3, 4, 5, 6, 7] },
  );
}

/** One row per arm and card: requests and prompt tokens (and their shares), its hit rate, evicted blocks, route reasons. */
export function traceCardTable(arms: readonly { arm: string; trace?: TraceArmSummary }[]): string {
  const rows: (string | number)[][] = [];
  for (const a of arms) {
    if (!a.trace) continue;
    Object.entries(a.trace.cards).forEach(([name, c], i) => {
      rows.push([
        i === 0 ? a.arm : "",
        name,
        c.requests,
        share(c.requestShare),
        int(c.promptTokens),
        share(c.tokenShare),
        share(c.hitRate),
        c.evictedBlocks === undefined ? "-" : int(c.evictedBlocks),
        reasons(c.routes) || "-",
      ]);
    });
  }
  return table(["per card", "card", "requests", "share", "prompt tokens", "share", "hit rate", "evicted blocks", "routes"], rows, { right: [2, 3, 4, 5, 6, 7] });
}

export const TRACE_NOTE =
  "engine p50, p90 (sims): the cards' own time to first token, queue and prefill, by the sims' clocks — the ttft columns add what the client, the router and the HTTP hops took, which at time scale F counts 1/F times over. " +
  "hit rate: Σ cached ÷ Σ prompt tokens as the engine reported them (on sims, the sim's own count), over the measured requests; ÷ ceiling: ÷ an infinite cache's hit rate over the same requests; " +
  "÷ pooled: ÷ one LRU cache holding every card's KV (the same requests in arrival order, in the trace's blocks): what the fleet's KV could deliver were it one card. " +
  "most requests · most tokens: the card with the largest share of the requests, and the one with the largest share of the prompt tokens. evicted blocks: the card's own count over the whole arm, warm-up included (sims). routes: the router's reason for each placement (x-llmroute-route).";
