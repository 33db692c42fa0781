/**
 * From samples to figures, pure: one summary per workload and arm (always with its sample
 * size, its hit-rate decomposition and, for llmd, its rungs), several runs pooled, the
 * headline ratios next to the reference measurements
 * (docs/bench-design.md#the-reference-measurements), and the plain-text tables. The HTML
 * report (html.ts) and the JSON file read the same summaries.
 */
import { int, pct, table } from "../ops/table.ts";
import type { StatusDocument } from "../ops/telemetry.ts";
import { SEEDED_WORKLOADS, type WorkloadName } from "./args.ts";
import type { ArmResult, BenchResult, Sample, WorkloadResult } from "./run.ts";
import { burstFigure, fmt, keyFigure, matrixText, type Matrix } from "./matrix.ts";
import { median, ratio, shares, summarize, type Summary } from "./stats.ts";
import type { TraceYardstick } from "./pooled.ts";
import { measuredOf, summarizeTraceArm, traceCardTable, TRACE_NOTE, traceTable, yardstickLine, type TraceArmSummary } from "./trace-report.ts";

export interface ArmSummary {
  arm: string;
  /** Requests sent and those that failed. */
  requests: number;
  errors: number;
  /** TTFT of warm conversation turns (turn ≥ 2): agent, mixed, capacity. */
  warm?: Summary;
  /** TTFT of first turns (cold on every arm). */
  first?: Summary;
  /** TTFT of every request: burst members, shared requests. */
  ttft?: Summary;
  /** Burst wall times. */
  burstWall?: Summary;
  /** Σ cached_tokens / Σ prompt_tokens over the requests the workload measures. */
  cachedShare: number;
  /** Completed requests per model second, first send to last byte. */
  throughput: number;
  /** Completion tokens per model second over the same span. */
  outputTps: number;
  /** Where the hits were lost: available → captured → delivered, over every request. */
  hits: HitDecomposition;
  /** llmd: TTFT, req/s and output tokens/s per rung (0 = warm-up), and over the ladder (rungs ≥ 1). */
  rungs?: RungSummary[];
  ladder?: RungSummary;
  /** Share of requests per replica. */
  replicaShare: Record<string, number>;
  /** Share of requests per x-llmroute-route reason. */
  routeShare: Record<string, number>;
  /** Warm-turn TTFT median per conversation (capacity: per family). */
  perGroup?: { group: number; warm: Summary; cachedShare: number; replicas: string[] }[];
  /** The router's capacity warnings at the end of the arm, and its KV walls during it (undefined: no router). */
  capacityWarnings?: string[];
  preemptions?: number;
  evictedBlocks?: number;
  /** Sims: first admissions by why their cache hit stopped (full, evicted, new). */
  simStops?: { full: number; evicted: number; new: number; elsewhere: number };
  /** The router's verdicts and index corrections, over the arm and per replica; undefined for the oracle (no index). */
  corrections?: Corrections;
  /** Conversations (agent, mixed, capacity): where the warm turns went and what they got. */
  turns?: TurnPlacement;
  /** The KV the router believed each replica holds at the end of the arm (tokens; 0 = unknown). */
  kvBelieved?: Record<string, number>;
  /** trace: the figures over the measured requests (trace-report.ts). */
  trace?: TraceArmSummary;
  wallMs: number;
}

/**
 * How the router judged the engine's per-request reports against its index. A `miss` is a
 * correction: the router dropped that replica's entries as evicted. It is false when the sim
 * says nothing was evicted there (its stop was `new` or `full`; or `elsewhere`, held in
 * another llama.cpp slot, unless what the index expected beyond that had been dropped: see
 * simEvicted): the
 * index lost entries the engine still held. `template`: a shortfall the router put down to the
 * chat template, correcting nothing.
 */
export interface CorrectionCount {
  /** Requests whose report the router judged (had a verdict). */
  judged: number;
  corrections: number;
  /** Corrections where the sim had evicted nothing; undefined when no correction could be checked (real replicas). */
  false?: number;
  /** Corrections whose sim stop is unknown (real replicas), so neither true nor false. */
  unchecked: number;
  templates: number;
}

export interface Corrections extends CorrectionCount {
  perReplica: Record<string, CorrectionCount>;
}

export interface TurnPlacement {
  /** Warm turns (turn ≥ 2 whose previous turn succeeded) sent to the replica that served the previous turn, ÷ such turns. */
  pinned: number;
  /** Those warm turns: the sample size of `pinned`. */
  warm: number;
  /** Σ delivered ÷ Σ prompt tokens over every conversation turn (turn 1 included). */
  delivered: number;
  /** delivered ÷ the oracle arm's on the same workload (the oracle places with perfect knowledge of the sims' caches); undefined without an oracle. */
  vsOracle?: number;
}

/** Three hit rates, each Σ tokens ÷ Σ prompt tokens of the same requests. */
export interface HitRates {
  requests: number;
  /** Cached on some replica at routing time, by the router's index (the oracle: by the sims); undefined when not reported. */
  available?: number;
  /** … on the replica chosen. */
  captured?: number;
  /** cached_tokens reported by the engine. */
  delivered: number;
}

export interface HitDecomposition extends HitRates {
  /** The same, over the requests each replica served. */
  perReplica: Record<string, HitRates>;
  /**
   * On sims (each response says why its hit stopped and how much of the prefix the card held:
   * x-sim-prefix), the prompt tokens the card had computed and evicted, and those it held
   * where the engine did not let the request use them (llama.cpp: another slot, busy), beyond
   * the hit — each Σ ÷ Σ prompt tokens. The rest of what was missed was not on that card.
   */
  lost?: { evicted: number; elsewhere: number };
}

export interface RungSummary {
  rung: number;
  ttft: Summary;
  /** Completed requests per model second, the rung's first send to its last byte. */
  throughput: number;
  outputTps: number;
}

const ok = (s: Sample) => !s.error;

/**
 * The decomposition over `samples`. available and captured count only requests whose
 * router reported them, over those requests' own prompt tokens; undefined when none did.
 */
export function hitRates(samples: readonly Sample[]): HitRates {
  const sum = (list: readonly Sample[], f: (s: Sample) => number) => list.reduce((a, s) => a + f(s), 0);
  const rate = (list: readonly Sample[], f: (s: Sample) => number) => {
    const prompt = sum(list, (s) => s.promptTokens);
    return list.length === 0 || prompt === 0 ? undefined : sum(list, f) / prompt;
  };
  const out: HitRates = { requests: samples.length, delivered: rate(samples, (s) => s.cachedTokens) ?? NaN };
  const available = rate(samples.filter((s) => s.availableTokens !== undefined), (s) => s.availableTokens!);
  const captured = rate(samples.filter((s) => s.capturedTokens !== undefined), (s) => s.capturedTokens!);
  if (available !== undefined) out.available = available;
  if (captured !== undefined) out.captured = captured;
  return out;
}

export function correctionCount(samples: readonly Sample[]): CorrectionCount {
  const misses = samples.filter((s) => s.verdict === "miss");
  const checked = misses.filter((s) => s.simStop !== undefined);
  const out: CorrectionCount = {
    judged: samples.filter((s) => s.verdict !== undefined).length,
    corrections: misses.length,
    unchecked: misses.length - checked.length,
    templates: samples.filter((s) => s.verdict === "template").length,
  };
  if (checked.length > 0 || misses.length === 0) out.false = checked.filter((s) => !simEvicted(s)).length;
  return out;
}

/**
 * Had the sim evicted part of what the index expected of this request's prompt on that card?
 * Its hit stopped at an evicted block; or it stopped at a prefix held where the request could
 * not use it (a busy llama.cpp slot), beyond which the card had computed more of the prompt
 * and dropped it, and the index expected more than that held prefix — so the correction
 * dropped the tail (the entries last used when the whole prompt was). An index that expected
 * no more than the held prefix dropped entries the card still held: false.
 */
function simEvicted(s: Sample): boolean {
  if (s.simStop === "evicted") return true;
  const held = s.simHeld ?? 0;
  return s.simStop === "elsewhere" && (s.simComputed ?? 0) > held && (s.capturedTokens ?? 0) > held;
}

export function corrections(samples: readonly Sample[], replicas: readonly string[]): Corrections {
  const names = [...new Set([...replicas, ...samples.map((s) => s.replica)])];
  return { ...correctionCount(samples), perReplica: Object.fromEntries(names.map((r) => [r, correctionCount(samples.filter((s) => s.replica === r))])) };
}

/** Conversation turns: the share of warm turns kept on the previous turn's replica, and the turns' delivered hit rate. */
export function turnPlacement(turns: readonly Sample[]): TurnPlacement {
  // Pooled runs reuse group numbers: a conversation is (run, group).
  const byConversation = new Map<string, Sample[]>();
  for (const s of turns) {
    const key = `${s.run ?? 0}/${s.group}`;
    byConversation.set(key, [...(byConversation.get(key) ?? []), s]);
  }
  let warm = 0;
  let pinned = 0;
  for (const list of byConversation.values()) {
    const at = new Map(list.map((s) => [s.index, s]));
    for (const s of list) {
      const previous = at.get(s.index - 1);
      if (s.index < 2 || !previous) continue;
      warm++;
      if (previous.replica === s.replica) pinned++;
    }
  }
  return { pinned: warm === 0 ? NaN : pinned / warm, warm, delivered: cachedShare(turns) };
}

export function hitDecomposition(samples: readonly Sample[], replicas: readonly string[]): HitDecomposition {
  const names = [...new Set([...replicas, ...samples.map((s) => s.replica)])];
  const out: HitDecomposition = { ...hitRates(samples), perReplica: Object.fromEntries(names.map((r) => [r, hitRates(samples.filter((s) => s.replica === r))])) };
  const prompt = samples.reduce((a, s) => a + s.promptTokens, 0);
  if (samples.length > 0 && prompt > 0 && samples.every((s) => s.simStop !== undefined)) {
    const missed = (stop: string) => samples.reduce((a, s) => a + (s.simStop === stop ? Math.max(0, (s.simHeld ?? s.cachedTokens) - s.cachedTokens) : 0), 0);
    // Beyond a prefix held elsewhere, what the card had computed of the prompt and dropped.
    const tails = samples.reduce((a, s) => a + (s.simStop === "elsewhere" ? Math.max(0, (s.simComputed ?? 0) - (s.simHeld ?? 0)) : 0), 0);
    out.lost = { evicted: (missed("evicted") + tails) / prompt, elsewhere: missed("elsewhere") / prompt };
  }
  return out;
}

/**
 * Requests and completion tokens per model second from the first send to the last byte;
 * pooled runs each have their own clock, so their spans add up.
 */
function rates(samples: readonly Sample[]): { throughput: number; outputTps: number } {
  if (samples.length === 0) return { throughput: NaN, outputTps: NaN };
  let span = 0;
  for (const run of new Set(samples.map((s) => s.run ?? 0))) {
    const mine = samples.filter((s) => (s.run ?? 0) === run);
    span += (Math.max(...mine.map((s) => s.startMs + s.totalMs)) - Math.min(...mine.map((s) => s.startMs))) / 1000;
  }
  return { throughput: samples.length / span, outputTps: samples.reduce((a, s) => a + s.completionTokens, 0) / span };
}

function rungSummary(rung: number, samples: readonly Sample[]): RungSummary {
  return { rung, ttft: summarize(samples.map((s) => s.ttftMs)), ...rates(samples) };
}
const cachedShare = (samples: readonly Sample[]) => {
  const prompt = samples.reduce((a, s) => a + s.promptTokens, 0);
  return prompt === 0 ? NaN : samples.reduce((a, s) => a + s.cachedTokens, 0) / prompt;
};

export function summarizeArm(workload: WorkloadName, arm: ArmResult, replicas: readonly string[], yardstick?: TraceYardstick): ArmSummary {
  // A trace's warm-up is sent, not measured: its requests count as errors only.
  const good = (workload === "trace" ? measuredOf(arm.samples) : arm.samples).filter(ok);
  const turns = good.filter((s) => s.kind === "turn");
  const warmTurns = turns.filter((s) => s.index > 1);
  const others = good.filter((s) => s.kind !== "turn");
  const out: ArmSummary = {
    arm: arm.arm,
    requests: arm.samples.length,
    errors: arm.samples.filter((s) => !ok(s)).length,
    cachedShare: cachedShare(workload === "agent" || workload === "mixed" || workload === "capacity" ? warmTurns : others),
    ...rates(good),
    hits: hitDecomposition(good, replicas),
    replicaShare: shares(
      good.map((s) => s.replica),
      replicas,
    ),
    routeShare: shares(
      good.map((s) => s.route),
      [],
    ),
    wallMs: arm.wallMs,
  };
  if (turns.length > 0) {
    out.warm = summarize(warmTurns.map((s) => s.ttftMs));
    out.first = summarize(turns.filter((s) => s.index === 1).map((s) => s.ttftMs));
    const groups = [...new Set(turns.map((s) => s.group))].sort((a, b) => a - b);
    out.perGroup = groups.map((group) => {
      const mine = warmTurns.filter((s) => s.group === group);
      return { group, warm: summarize(mine.map((s) => s.ttftMs)), cachedShare: cachedShare(mine), replicas: [...new Set(turns.filter((s) => s.group === group).map((s) => s.replica))] };
    });
  }
  if (others.length > 0) out.ttft = summarize(others.map((s) => s.ttftMs));
  if (workload === "llmd") {
    const rungs = [...new Set(others.map((s) => s.rung ?? 0))].sort((a, b) => a - b);
    out.rungs = rungs.map((r) => rungSummary(r, others.filter((s) => (s.rung ?? 0) === r)));
    out.ladder = rungSummary(-1, others.filter((s) => (s.rung ?? 0) >= 1));
  }
  if (arm.bursts.length > 0) out.burstWall = summarize(arm.bursts.map((b) => b.wallMs));
  if (arm.warnings) out.capacityWarnings = arm.warnings.filter(isCapacityWarning);
  if (arm.sim) {
    out.preemptions = arm.sim.preemptions;
    out.evictedBlocks = arm.sim.evictedBlocks;
    if (arm.sim.stops) out.simStops = arm.sim.stops;
  }
  // The oracle routes without an index: it has nothing to correct.
  if (arm.arm !== "oracle") out.corrections = corrections(good, replicas);
  if (CONVERSING.has(workload)) out.turns = turnPlacement(turns);
  if (arm.kvBelieved) out.kvBelieved = arm.kvBelieved;
  if (workload === "trace") out.trace = summarizeTraceArm(arm, replicas, yardstick);
  return out;
}

/** The workloads whose requests are conversations (each turn re-sends the previous one and its reply). */
export const CONVERSING: ReadonlySet<WorkloadName> = new Set(["agent", "mixed", "capacity"]);

/**
 * The router's capacity findings among its /status warnings: over a KV, whichever figure it
 * took (router.toml's kv_tokens, the engine's published KV, the KV its evictions show), and
 * a kv_tokens the evidence contradicts.
 */
export function isCapacityWarning(warning: string): boolean {
  return /: working set ~|conversations active on \d+ slots|kv_tokens|: KV full /.test(warning);
}

/**
 * The router's capacity findings at the end of an arm (kind "capacity", in the words /status
 * warns with), and each replica whose engine turned requests away as full during it: a KV
 * wall's finding lasts a capacity window after the last one, and the router then holds
 * requests below the wall, so by the end it has often lapsed (llama.cpp's unified KV, where
 * requests took turns). Its count is what the router said.
 */
export function routerCapacityWarnings(status: Pick<StatusDocument, "findings" | "warnings" | "replicas">): string[] {
  const findings = status.findings ? status.findings.filter((f) => f.kind === "capacity").map((f) => `${f.replica}: ${f.line}`) : status.warnings;
  const walls = status.replicas.filter((r) => r.kv_full > 0).map((r) => `${r.name}: KV full ${r.kv_full}×: requests there took turns`);
  // The wall's own finding (src/ops/telemetry.ts status, "KV full with ~N prompt tokens in
  // flight"): its count says it already.
  return [...findings.filter((w) => !/^\S+: KV full with ~/.test(w)), ...walls];
}

export interface WorkloadSummary {
  workload: WorkloadName;
  arms: ArmSummary[];
  /** The best achievable hit rate, from the plan (shared, pressured, llmd; trace: the infinite cache). */
  ceiling?: number;
  /** trace: the infinite and the pooled cache over the measured requests. */
  yardstick?: TraceYardstick;
}

export function summarizeWorkload(w: WorkloadResult, replicas: readonly string[]): WorkloadSummary {
  const arms = w.arms.map((a) => summarizeArm(w.workload, a, replicas, w.yardstick));
  // What the engine could deliver: the oracle's placement, with perfect knowledge of the sims' caches.
  const oracle = arms.find((a) => a.arm === "oracle")?.turns?.delivered;
  if (oracle !== undefined) for (const a of arms) if (a.turns) a.turns.vsOracle = ratio(a.turns.delivered, oracle);
  return { workload: w.workload, arms, ...(w.ceiling === undefined ? {} : { ceiling: w.ceiling }), ...(w.yardstick ? { yardstick: w.yardstick } : {}) };
}

// --- headline ratios ------------------------------------------------------------------------

export interface Headline {
  /** What is compared, e.g. "agent warm-turn TTFT p50: roundrobin / hybrid". */
  label: string;
  value: number;
  /** The same ratio in the reference measurements (docs/bench-design.md#the-reference-measurements), when they have it. */
  reference?: number;
  referenceNote?: string;
  /** The figures divided, with their sample sizes, e.g. "2,142 ms (n=15) / 1,610 ms (n=15)". */
  detail: string;
}

export function headlines(summaries: readonly WorkloadSummary[]): Headline[] {
  const out: Headline[] = [];
  const find = (w: WorkloadName) => summaries.find((s) => s.workload === w);
  const arm = (w: WorkloadSummary | undefined, name: string) => w?.arms.find((a) => a.arm === name);
  const pair = (w: WorkloadName, a: string, b: string, label = "", reference?: number, referenceNote?: string, figure = keyFigure) => {
    const ws = find(w);
    const x = arm(ws, a);
    const y = arm(ws, b);
    if (!x || !y) return;
    const fx = figure(w, x);
    const fy = figure(w, y);
    if (!fx || !fy) return;
    out.push({
      label: `${w} ${fx.what}: ${a} / ${b}${label ? ` (${label})` : ""}`,
      value: ratio(fx.value, fy.value),
      ...(reference === undefined ? {} : { reference }),
      ...(referenceNote ? { referenceNote } : {}),
      detail: `${fmt(fx.value, fx.unit)} (n=${fx.n}) / ${fmt(fy.value, fy.unit)} (n=${fy.n})`,
    });
  };
  pair("agent", "roundrobin", "hybrid", "round-robin loses every other hit", 2676 / 1096, "2,676 / 1,096 ms at 90k");
  pair("agent", "affinity", "hybrid", "both pin", 1096 / 1095, "pinned 1,096 / hybrid 1,095 ms");
  pair("burst", "affinity", "hybrid", "pinning loses a card", 30.1 / 18.6, "30.1 s pinned / 18.6 s spread; hybrid 19.97 s");
  pair("burst", "hybrid", "roundrobin", "both spread", 19.97 / 18.6, "19.97 s hybrid / 18.6 s spread");
  pair("mixed", "roundrobin", "hybrid");
  pair("mixed", "affinity", "hybrid");
  pair("mixed", "affinity", "hybrid", "", undefined, undefined, burstFigure);
  pair("mixed", "roundrobin", "hybrid", "", undefined, undefined, burstFigure);
  const shared = find("shared");
  const base = arm(shared, "roundrobin");
  if (shared && base?.ttft) {
    for (const a of shared.arms) {
      if (a.arm === "roundrobin" || !a.ttft) continue;
      out.push({
        label: `shared TTFT p50 change: ${a.arm} vs roundrobin`,
        value: a.ttft.median / base.ttft.median - 1,
        reference: -0.74,
        referenceNote: "SageMaker prefix-aware vs random: −71…77 %",
        detail: `${fmt(a.ttft.median, "ms")} vs ${fmt(base.ttft.median, "ms")} (n=${a.ttft.n}, ${base.ttft.n})`,
      });
      out.push({
        label: `shared TTFT p90 change: ${a.arm} vs roundrobin`,
        value: a.ttft.p90 / base.ttft.p90 - 1,
        reference: -0.35,
        referenceNote: "SageMaker: −33…37 %",
        detail: `${fmt(a.ttft.p90, "ms")} vs ${fmt(base.ttft.p90, "ms")}`,
      });
      out.push({
        label: `shared cache hit rate: ${a.arm} vs roundrobin`,
        value: a.cachedShare - base.cachedShare,
        referenceNote: "SageMaker: ~25 % → ~82 %",
        detail: `${pct(a.cachedShare)} vs ${pct(base.cachedShare)}`,
      });
    }
  }
  for (const w of summaries) {
    const oracle = arm(w, "oracle");
    if (!oracle) continue;
    for (const a of w.arms) if (a.arm !== "oracle" && a.arm !== "pooled") pair(w.workload, a.arm, "oracle", "vs perfect cache knowledge");
  }
  return out;
}

// --- text ------------------------------------------------------------------------------------


const ms = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "-" : int(v));
const sec = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "-" : (v / 1000).toFixed(1));
const share = (r: number) => (Number.isFinite(r) ? pct(r) : "-");
const split = (s: ArmSummary) =>
  Object.values(s.replicaShare)
    .map((v) => pct(v))
    .join("/");
const routes = (s: ArmSummary) =>
  Object.entries(s.routeShare)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => (v === 1 ? k : `${k} ${pct(v)}`))
    .join(", ");

export const TITLES: Record<WorkloadName, string> = {
  agent: "agent — one conversation growing turn by turn (sequential-turn client)",
  burst: "burst — distinct cold requests sharing a system prompt, all at once",
  mixed: "mixed — agent loops running while bursts arrive",
  shared: "shared — many users over a few long shared prefixes, Poisson arrivals",
  pressured: "pressured — shared with documents that overflow one card and nearly fill the fleet: placement decides the hit rate",
  llmd: "llmd — llm-d's shared_prefix: groups of prompts sharing a system prompt, a Poisson ladder of rates",
  capacity: "capacity — concurrent large conversation families vs per-card KV",
  trace: "trace — a production trace replayed: its conversations, documents and arrivals",
};

export function workloadTable(w: WorkloadSummary, replicas: readonly string[]): string {
  const errs = (s: ArmSummary) => (s.errors === 0 ? "0" : `${s.errors}/${s.requests}`);
  const who = replicas.join("/");
  switch (w.workload) {
    case "agent":
      return table(
        ["policy", "n", "warm p50 ms", "warm p90 ms", "turn 1 ms", "cached", `requests ${who}`, "routes", "errors"],
        w.arms.map((s) => [s.arm, s.warm?.n ?? 0, ms(s.warm?.median), ms(s.warm?.p90), ms(s.first?.median), share(s.cachedShare), split(s), routes(s), errs(s)]),
        { right: [1, 2, 3, 4, 5] },
      );
    case "burst":
      return table(
        ["policy", "bursts", "wall p50 s", "wall max s", "requests", "ttft p50 ms", "cached", `requests ${who}`, "errors"],
        w.arms.map((s) => [s.arm, s.burstWall?.n ?? 0, sec(s.burstWall?.median), sec(s.burstWall?.max), s.requests, ms(s.ttft?.median), share(s.cachedShare), split(s), errs(s)]),
        { right: [1, 2, 3, 4, 5, 6] },
      );
    case "mixed":
      return table(
        ["policy", "turns", "agent p50 ms", "agent p90 ms", "bursts", "burst wall p50 s", "burst ttft p50 ms", `requests ${who}`, "errors"],
        w.arms.map((s) => [s.arm, s.warm?.n ?? 0, ms(s.warm?.median), ms(s.warm?.p90), s.burstWall?.n ?? 0, sec(s.burstWall?.median), ms(s.ttft?.median), split(s), errs(s)]),
        { right: [1, 2, 3, 4, 5, 6] },
      );
    case "shared":
    case "pressured":
      return table(
        ["policy", "n", "ttft p50 ms", "ttft p90 ms", "hit rate", "req/s", `requests ${who}`, "capacity warning", "errors"],
        w.arms.map((s) => [s.arm, s.ttft?.n ?? 0, ms(s.ttft?.median), ms(s.ttft?.p90), share(s.cachedShare), rate(s.throughput), split(s), warned(s), errs(s)]),
        { right: [1, 2, 3, 4, 5] },
      );
    case "llmd":
      return table(
        ["policy", "n", "ttft mean ms", "ttft p90 ms", "req/s", "out tok/s", "hit rate", `requests ${who}`, "errors"],
        w.arms.map((s) => [s.arm, s.ladder?.ttft.n ?? 0, ms(s.ladder?.ttft.mean), ms(s.ladder?.ttft.p90), rate(s.ladder?.throughput), ms(s.ladder?.outputTps), share(s.cachedShare), split(s), errs(s)]),
        { right: [1, 2, 3, 4, 5, 6] },
      );
    case "capacity": {
      const groups = w.arms[0]?.perGroup?.map((g) => g.group) ?? [];
      return table(
        ["policy", "n", "warm p50 s", "warm p90 s", "cached", ...groups.map((g) => `family ${g} p50 s (cached)`), "evicted blocks", "capacity warning", "errors"],
        w.arms.map((s) => [
          s.arm,
          s.warm?.n ?? 0,
          sec(s.warm?.median),
          sec(s.warm?.p90),
          share(s.cachedShare),
          ...groups.map((g) => {
            const pg = s.perGroup?.find((x) => x.group === g);
            return pg ? `${sec(pg.warm.median)} (${share(pg.cachedShare)}) ${pg.replicas.join("+")}` : "-";
          }),
          s.evictedBlocks === undefined ? "-" : int(s.evictedBlocks),
          warned(s),
          errs(s),
        ]),
        { right: [1, 2, 3, 4] },
      );
    }
    case "trace":
      return [yardstickLine(w.yardstick, replicas.length), traceTable(w.arms), traceCardTable(w.arms), TRACE_NOTE].filter(Boolean).join("\n");
  }
}

const rate = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "-" : v.toFixed(2));

/** llmd, rung by rung: TTFT mean / p90 and completed req/s at each offered rate. */
export function rungTable(w: WorkloadSummary, options: BenchResult["options"]): string | undefined {
  if (w.workload !== "llmd") return undefined;
  const l = options.llmd;
  const label = (rung: number) => (rung === 0 ? `warm-up ${l.warmupRate}/s` : `${l.rates[rung - 1]}/s`);
  const rungs = [...new Set(w.arms.flatMap((s) => s.rungs?.map((r) => r.rung) ?? []))].sort((a, b) => a - b);
  const n = (rung: number) => {
    const counts = new Set(w.arms.map((s) => s.rungs?.find((r) => r.rung === rung)?.ttft.n ?? 0));
    return counts.size === 1 ? `n=${[...counts][0]}` : `n=${Math.min(...counts)}–${Math.max(...counts)}`;
  };
  return table(
    ["per rung: ttft mean / p90 ms, req/s", ...rungs.map((r) => `${label(r)} (${n(r)})`)],
    w.arms.map((s) => [
      s.arm,
      ...rungs.map((rung) => {
        const r = s.rungs?.find((x) => x.rung === rung);
        return r ? `${ms(r.ttft.mean)} / ${ms(r.ttft.p90)}, ${rate(r.throughput)}` : "-";
      }),
    ]),
    { right: rungs.map((_, i) => i + 1) },
  );
}

/** "3 (0)": corrections and how many were false; "?" where the engine's truth is unknown. */
export function correctionText(c: CorrectionCount | undefined): string {
  if (!c) return "-";
  // An engine whose usage carries no cached tokens (vLLM by default, Ollama) gets no per-request verdict.
  if (c.judged === 0) return "none judged";
  const wrong = c.false === undefined ? "?" : c.unchecked > 0 ? `${c.false}+${c.unchecked}?` : String(c.false);
  return `${c.corrections} (${wrong})`;
}

/**
 * Where the hits were lost, per arm and per replica: available → captured → delivered; the
 * router's corrections of its index (and how many were false) and template verdicts; and on
 * conversations, how many warm turns stayed on the previous turn's replica and what their
 * turns got against the oracle's.
 */
export function hitTable(w: WorkloadSummary, replicas: readonly string[]): string {
  const ceiling = w.ceiling;
  const conversing = CONVERSING.has(w.workload);
  const lost = w.arms.some((s) => s.hits.lost);
  const three = (h: HitRates | undefined) => (h ? `${h.available === undefined ? "-" : pct(h.available)}/${h.captured === undefined ? "-" : pct(h.captured)}/${share(h.delivered)}` : "-");
  const header = [
    "hit rate (all requests)",
    "available",
    "captured",
    "delivered",
    ...(ceiling === undefined ? [] : ["ceiling", "÷ ceiling"]),
    ...(lost ? ["lost evicted/elsewhere"] : []),
    "corrections (false)",
    "template",
    ...(conversing ? ["warm pinned", "turns delivered", "÷ oracle"] : []),
    ...replicas.map((r) => `${r} n a/c/d corrections (false)`),
  ];
  return table(
    header,
    w.arms.map((s) => [
      s.arm,
      s.hits.available === undefined ? "-" : pct(s.hits.available),
      s.hits.captured === undefined ? "-" : pct(s.hits.captured),
      share(s.hits.delivered),
      ...(ceiling === undefined ? [] : [share(ceiling), share(s.hits.delivered / ceiling)]),
      ...(lost ? [s.hits.lost ? `${pct(s.hits.lost.evicted)}/${pct(s.hits.lost.elsewhere)}` : "-"] : []),
      correctionText(s.corrections),
      s.corrections && s.corrections.judged > 0 ? String(s.corrections.templates) : "-",
      ...(conversing ? [s.turns && s.turns.warm > 0 ? `${share(s.turns.pinned)} of ${s.turns.warm}` : "-", share(s.turns?.delivered ?? NaN), share(s.turns?.vsOracle ?? NaN)] : []),
      ...replicas.map((r) => {
        const cell = `${s.hits.perReplica[r]?.requests ?? 0} ${three(s.hits.perReplica[r])}`;
        return s.corrections ? `${cell} ${correctionText(s.corrections.perReplica[r])}` : cell;
      }),
    ]),
    { right: header.map((_, i) => i).filter((i) => i >= 1 && i < header.length - replicas.length) },
  );
}

/** What the decomposition columns mean, printed once under the first hit table. */
export const HIT_NOTE =
  "available: prompt tokens cached on some replica when the request was routed, by the router's index (oracle: by the sims); captured: on the replica chosen; " +
  "delivered: on sims, the prompt tokens the sim found cached (its x-sim-prefix header: the vllm and ollama profiles report none in usage), on real replicas usage's cached_tokens. " +
  "Each Σ ÷ Σ prompt tokens; - = the router does not report it. ceiling: the best any placement can deliver (each document's, group's or prompt's first request misses).\n" +
  "lost evicted/elsewhere (sims): prompt tokens the chosen card had computed and evicted, or held where the engine did not let the request use them (llama.cpp: in another slot, busy with another request: no placement avoids it while only one copy exists; hybrid holds such a request for that slot when it frees sooner than the prefill would take), beyond the hit, ÷ Σ prompt tokens; the rest of what was missed was not on that card.\n" +
  "corrections (false): responses the router judged a miss and corrected its index for (dropped that replica's entries as evicted), and in brackets how many of them were false: " +
  "the sim had evicted nothing there (its stop was new or full, not evicted); ? = not checkable (real replicas); none judged: no response carried cached tokens to judge (vllm, ollama). template: shortfalls the router put down to the chat template (no correction).\n" +
  "warm pinned: conversation turns ≥ 2 sent to the replica that served the previous turn, of all such turns; turns delivered: the same hit rate over the conversations' turns; " +
  "÷ oracle: that ÷ the oracle arm's, which places each turn with perfect knowledge of the sims' caches: what the engine could deliver.";

function warned(s: ArmSummary): string {
  if (s.capacityWarnings === undefined) return "n/a";
  if (s.capacityWarnings.length === 0) return "no";
  // One entry per replica, its largest working set (pooled runs each warned on their own).
  const largest = new Map<string, number>();
  const turns = new Map<string, number>();
  const other: string[] = [];
  for (const w of s.capacityWarnings) {
    // The router's finding: "gpu1: working set ~130,000 tokens, 106% of kv_tokens …".
    const m = w.match(/^(\S+): working set ~([\d,]+)/);
    // A KV wall: "gpu1: KV full 12×: requests there took turns" (the most of the runs pooled).
    const full = w.match(/^(\S+): KV full (\d+)×/);
    if (m) largest.set(m[1]!, Math.max(largest.get(m[1]!) ?? 0, Number(m[2]!.replaceAll(",", ""))));
    else if (full) turns.set(full[1]!, Math.max(turns.get(full[1]!) ?? 0, Number(full[2]!)));
    else other.push(w);
  }
  return `yes: ${[
    ...[...largest].map(([replica, tokens]) => `${replica} ~${int(tokens)}`),
    ...[...turns].map(([replica, count]) => `${replica} KV full ×${count}`),
    ...other,
  ].join(", ")}`;
}

export function headlineLines(list: readonly Headline[]): string {
  const rows = list.map((h) => {
    const isShare = h.label.includes("change") || h.label.includes("hit rate");
    const value = !Number.isFinite(h.value)
      ? "-"
      : h.label.includes("hit rate")
        ? `${h.value >= 0 ? "+" : ""}${Math.round(h.value * 100)} pts`
        : isShare
          ? `${h.value >= 0 ? "+" : ""}${Math.round(h.value * 100)} %`
          : `${h.value.toFixed(2)}×`;
    const reference = h.reference === undefined ? (h.referenceNote ?? "") : `${isShare ? "" : `${h.reference.toFixed(2)}× `}${h.referenceNote ? `(${h.referenceNote})` : ""}`;
    return [h.label, value, h.detail, reference];
  });
  return table(["headline", "measured", "from", "reference"], rows, { right: [1] });
}

/**
 * What a reader needs to compare a table with the reference measurements. The agent note is arithmetic, not
 * tuning: a replica that last saw the conversation two turns ago misses one more turn's
 * new tokens than the pinned one, so round-robin / pinned depends on how much a turn adds.
 */
export function workloadNote(workload: WorkloadName, result: BenchResult): string | undefined {
  if (workload !== "agent") return undefined;
  const a = result.options.agent;
  return (
    `Each turn adds ${int(a.turnTokens)} tool-result + ${int(a.replyTokens)} reply tokens; round-robin re-prefills one more turn's worth than a pinned replica.\n` +
    "The 2,676 / 1,096 ms measured on two RTX 3090s imply ~6k new tokens a turn: --turns 8 --turn-tokens 100 --reply-tokens 6000 reproduces it on the sim (measured 2,592 / 1,112 ms, n=7)."
  );
}

/**
 * One engine setup's bench (a row block of the matrix): every run's result, the runs pooled,
 * the pooled summaries (the detailed tables) and each run's own (the matrix).
 */
export interface EngineBlock {
  /** The block's name (setupLabel: "vllm", "sglang · qwen3-reasoning"); undefined on real replicas. */
  label?: string;
  results: BenchResult[];
  result: BenchResult;
  summaries: WorkloadSummary[];
  perRun: WorkloadSummary[][];
}

export function engineBlock(results: readonly BenchResult[], label?: string): EngineBlock {
  const replicas = results[0]!.target.replicas.map((r) => r.name);
  const result = poolRuns(results);
  return {
    ...(label === undefined ? {} : { label }),
    results: [...results],
    result,
    summaries: result.workloads.map((w) => summarizeWorkload(w, replicas)),
    perRun: results.map((r) => r.workloads.map((w) => summarizeWorkload(w, replicas))),
  };
}

/** What router.toml's kv_tokens said, in words ("none", "true", "6x" as --kv-tokens takes them). */
export function kvTokensText(label: string, realKv: number): string {
  if (label === "none") return "router.toml kv_tokens: none (each router takes the KV the engine publishes, or learns it from evictions)";
  if (label === "true") return `router.toml kv_tokens: the sims' real KV (${int(realKv)})`;
  const factor = Number(label.replace(/x$/, ""));
  return `router.toml kv_tokens: ${label.replace(/x$/, "×")} the sims' real KV (${int(realKv * factor)})`;
}

/** What a card profile simulates, in words: "3090-class", "h100-8b (Llama-3.1-8B on one H100)". */
export function cardText(card: string | undefined): string {
  const what: Record<string, string> = { "h100-8b": "Llama-3.1-8B on one H100", "4xh100-70b": "Llama-3.1-70B on four H100s" };
  if (card === undefined || card === "3090") return "3090-class";
  return what[card] ? `${card} (${what[card]})` : card;
}

/** Where and how long: the report's first lines. */
export function describeRun(blocks: readonly EngineBlock[], runs: number): { title: string; where: string } {
  const first = blocks[0]!.result;
  const t = first.target;
  let where: string;
  if (t.kind === "sim") {
    const kv = t.replicas[0]?.kvTokens ?? 0;
    const setups = blocks.map((b) => b.result.target.sim).filter((x) => x !== undefined);
    const engines =
      setups.length === 0
        ? ""
        : blocks.length === 1
          ? `, engine profile ${setups[0]!.engine}, chat template ${setups[0]!.template}`
          : `, fresh for each engine setup (${blocks.map((b) => b.label).join("; ")})`;
    where =
      `${t.replicas.length} simulated ${cardText(setups[0]?.card)} replicas (${int(kv)} KV tokens each)${engines}` +
      `${setups[0] ? `; ${kvTokensText(setups[0].kvTokens, kv)}` : ""}; time scale ${t.timeScale}: times are model time (real ÷ ${t.timeScale})`;
  } else where = `${t.replicas.length} replicas from ${first.options.config}${t.engine ? ` (${t.engine})` : ""}, model ${t.model}: real time`;
  const elapsed = blocks.reduce((a, b) => a + b.result.elapsedS, 0);
  // Run r draws the shared, pressured and llmd arrivals from --seed + r − 1 (args.ts runOptions);
  // named only when one of them ran.
  const seed = first.options.shared.seed;
  const seeded = first.options.workloads.some((w) => SEEDED_WORKLOADS.includes(w));
  const seeds = seeded ? `, arrivals seed${runs > 1 ? `s ${seed}–${seed + runs - 1}` : ` ${seed}`}` : "";
  const title =
    blocks.length > 1
      ? `${blocks.length} engine setups × ${runs} run${runs > 1 ? "s" : ""}${seeds}, ${elapsed.toFixed(0)} s real`
      : `${runs > 1 ? `${runs} runs ${first.run.split("+").join(", ")}` : `run ${first.run}`}${seeds}, ${elapsed.toFixed(0)} s real`;
  return { title, where };
}

export interface CorrectionSummary {
  judged: number;
  corrections: number;
  false: number;
  unchecked: number;
  templates: number;
  /** Where false corrections happened: "vllm · mistral3-tools agent hybrid 3/4". */
  where: string[];
  /** One sentence for the report, under the matrix. */
  text: string;
}

/**
 * Every arm's index corrections, summed over engine setups and workloads: the line under the
 * matrix, so that a false correction (the router dropped entries as evicted where the sim
 * had evicted nothing) cannot go unseen.
 */
export function correctionSummary(blocks: readonly EngineBlock[]): CorrectionSummary {
  const out: CorrectionSummary = { judged: 0, corrections: 0, false: 0, unchecked: 0, templates: 0, where: [], text: "" };
  for (const b of blocks) {
    for (const w of b.summaries) {
      for (const a of w.arms) {
        const c = a.corrections;
        if (!c) continue;
        out.judged += c.judged;
        out.corrections += c.corrections;
        out.false += c.false ?? 0;
        out.unchecked += c.unchecked;
        out.templates += c.templates;
        if ((c.false ?? 0) > 0) out.where.push(`${b.label ? `${b.label} ` : ""}${w.workload} ${a.arm} ${c.false}/${c.corrections}`);
      }
    }
  }
  const templates = `${out.templates} template verdict${out.templates === 1 ? "" : "s"}`;
  if (out.false > 0) {
    out.text = `FALSE INDEX CORRECTIONS: ${out.false} of ${out.corrections} corrections dropped index entries the engine still held (the sim had evicted nothing there): ${out.where.join(", ")}. ${templates}; ${out.judged} responses judged.`;
  } else if (out.judged === 0) {
    out.text = "Index corrections: none; no response carried a cached-token figure the routers could judge (engines without per-request cached tokens are judged by counter windows, which correct nothing).";
  } else if (out.unchecked === out.corrections && out.corrections > 0) {
    out.text = `Index corrections: ${out.corrections} (not checkable: only a sim says what it evicted); ${templates}; ${out.judged} responses judged.`;
  } else {
    out.text = `Index corrections: ${out.corrections}, none false (each matched an eviction the sim made)${out.unchecked > 0 ? `, ${out.unchecked} not checkable` : ""}; ${templates}; ${out.judged} responses judged.`;
  }
  return out;
}

/**
 * How late the bench process's timers fired, in model time: with sims, everything shares one
 * event loop (lag.ts), so a TTFT difference within this is noise. Undefined on real replicas.
 */
export function timerLagText(blocks: readonly EngineBlock[]): string | undefined {
  const arms = blocks.flatMap((b) => b.result.workloads.flatMap((w) => w.arms.flatMap((a) => (a.timerLag ? [{ where: `${b.label ? `${b.label} ` : ""}${w.workload} ${a.arm}`, lag: a.timerLag }] : []))));
  if (arms.length === 0) return undefined;
  const scale = blocks[0]!.result.target.timeScale;
  const model = (ms: number) => int(ms / scale);
  const worst = arms.reduce((w, a) => (a.lag.p99Ms > w.lag.p99Ms ? a : w));
  const magnified = scale === 1 ? "" : `, magnified ${+(1 / scale).toFixed(1)}× by the time scale`;
  const who = blocks.every((b) => b.result.target.sim?.threads) ? "the routers and client (the sims on threads of their own)" : "the sims, routers and client";
  return (
    `Timer lag: ${who} share this process's event loop${magnified}; its timers fired late by a median ` +
    `${model(median(arms.map((a) => a.lag.p50Ms)))} ms (p50) and ${model(median(arms.map((a) => a.lag.p99Ms)))} ms (p99) of model time an arm, ` +
    `worst p99 ${model(worst.lag.p99Ms)} ms (${worst.where}). A TTFT difference within that is noise.`
  );
}

/** The whole text report: the matrix and the corrections line, then per engine setup and workload its table(s), then the headline ratios. */
export function renderText(blocks: readonly EngineBlock[], matrix: Matrix): string {
  const { title, where } = describeRun(blocks, matrix.runs);
  const parts = [`llmroute bench · ${title} · ${where}`, "", matrixText(matrix), correctionSummary(blocks).text];
  const lag = timerLagText(blocks);
  if (lag) parts.push(lag);
  let explained = false;
  for (const block of blocks) {
    const { result, summaries } = block;
    const replicas = result.target.replicas.map((r) => r.name);
    if (blocks.length > 1) parts.push("", `━━ ${block.label ?? "replicas"} ━━`);
    for (const w of summaries) {
      parts.push("", `${blocks.length > 1 && block.label ? `${block.label}: ` : ""}${TITLES[w.workload]}`, workloadTable(w, replicas));
      const rungs = rungTable(w, result.options);
      if (rungs) parts.push(rungs);
      parts.push(hitTable(w, replicas));
      if (!explained) parts.push(HIT_NOTE);
      explained = true;
      const note = workloadNote(w.workload, result);
      if (note) parts.push(note);
    }
    const hl = headlines(summaries);
    if (hl.length > 0) parts.push("", headlineLines(hl));
  }
  return parts.join("\n");
}

// --- several runs ------------------------------------------------------------------------------

/**
 * Several runs as one: each arm's samples and bursts side by side (so the detailed tables
 * are over every run's requests, n included), warnings united, sim counters summed. The
 * matrix takes each run's own figures instead (buildMatrix), to show their spread.
 */
export function poolRuns(results: readonly BenchResult[]): BenchResult {
  const first = results[0]!;
  if (results.length === 1) return first;
  const workloads = first.workloads.map((w, i): WorkloadResult => {
    const arms = w.arms.map((a, j): ArmResult => {
      const all = results.map((r) => r.workloads[i]!.arms[j]!);
      const pooled: ArmResult = {
        arm: a.arm,
        samples: all.flatMap((x, run) => x.samples.map((s) => ({ ...s, run }))),
        bursts: all.flatMap((x) => x.bursts),
        wallMs: all.reduce((sum, x) => sum + x.wallMs, 0),
      };
      if (all.some((x) => x.warnings)) pooled.warnings = [...new Set(all.flatMap((x) => x.warnings ?? []))];
      const lags = all.flatMap((x) => (x.timerLag ? [x.timerLag] : []));
      if (lags.length > 0) pooled.timerLag = lags.reduce((worst, l) => (l.p99Ms > worst.p99Ms ? l : worst));
      if (all.every((x) => x.sim)) {
        const sum = (f: (x: ArmResult) => number) => all.reduce((total, x) => total + f(x), 0);
        pooled.sim = { preemptions: sum((x) => x.sim!.preemptions), evictedBlocks: sum((x) => x.sim!.evictedBlocks) };
        if (all.every((x) => x.sim!.perReplica)) {
          const names = [...new Set(all.flatMap((x) => Object.keys(x.sim!.perReplica!)))];
          const of = (x: ArmResult, name: string) => x.sim!.perReplica![name] ?? { preemptions: 0, evictedBlocks: 0 };
          pooled.sim.perReplica = Object.fromEntries(
            names.map((name) => [name, { preemptions: sum((x) => of(x, name).preemptions), evictedBlocks: sum((x) => of(x, name).evictedBlocks) }]),
          );
        }
        if (all.every((x) => x.sim!.stops)) {
          pooled.sim.stops = {
            full: sum((x) => x.sim!.stops!.full),
            evicted: sum((x) => x.sim!.stops!.evicted),
            new: sum((x) => x.sim!.stops!.new),
            elsewhere: sum((x) => x.sim!.stops!.elsewhere),
          };
        }
      }
      // What the router ended up believing is each run's own (under runs[] in the JSON).
      return pooled;
    });
    // Each run's arrivals are its own (args.ts runOptions), and so is its ceiling; every run offers the
    // same number of prompt tokens (sizes do not depend on the seed), so the pooled ceiling is
    // the runs' mean.
    const ceilings = results.map((r) => r.workloads[i]!.ceiling);
    const ceiling = ceilings.every((c) => c !== undefined) ? ceilings.reduce((a, c) => a + c!, 0) / ceilings.length : undefined;
    // A trace's runs replay the same requests: one yardstick serves them all.
    return { ...w, arms, ...(ceiling === undefined ? {} : { ceiling }) };
  });
  return { ...first, run: results.map((r) => r.run).join("+"), elapsedS: results.reduce((sum, r) => sum + r.elapsedS, 0), workloads };
}
