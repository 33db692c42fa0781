/**
 * The one table a person reads first: workloads × arms, each cell the workload's headline
 * figure relative to the best arm (1.00× = best; every headline is lower-is-better), with
 * the sample size. Over several runs a cell is the median of the runs' figures, and its
 * spread is how far the runs lay apart. Pure: the text and HTML reports and the JSON file
 * all read the same Matrix.
 */
import { int, table } from "../ops/table.ts";
import type { WorkloadName } from "./args.ts";
import type { ArmSummary, WorkloadSummary } from "./report.ts";
import { median } from "./stats.ts";

export interface MatrixCell {
  arm: string;
  /** Median over runs of the arm's headline figure (NaN: no samples). */
  value: number;
  /** value ÷ the row's best value. */
  relative: number;
  /** The figure of each run, in run order. */
  runs: number[];
  /** Sample size behind each run's figure. */
  n: number[];
  /** Requests of the workload that failed in this arm, over all runs: its figure is over the survivors. */
  failed: number;
}

export interface MatrixRow {
  /** The row block: which sim engine setup (setupLabel) it was measured on; undefined on real replicas. */
  engine?: string;
  workload: WorkloadName;
  /** What the figure is, e.g. "warm-turn TTFT p50". */
  what: string;
  unit: "ms" | "s";
  best: { arm: string; value: number };
  cells: MatrixCell[];
}

export interface Matrix {
  runs: number;
  arms: string[];
  rows: MatrixRow[];
}

// --- what each workload is judged by -----------------------------------------------------------

/** The figure of one arm that a workload is judged by, with its sample size. */
export function keyFigure(workload: WorkloadName, s: ArmSummary): { value: number; n: number; what: string; unit: "ms" | "s" } | undefined {
  switch (workload) {
    case "agent":
    case "capacity":
      return s.warm && { value: s.warm.median, n: s.warm.n, what: "warm-turn TTFT p50", unit: workload === "agent" ? "ms" : "s" };
    case "mixed":
      return s.warm && { value: s.warm.median, n: s.warm.n, what: "agent warm-turn TTFT p50", unit: "ms" };
    case "burst":
      return s.burstWall && { value: s.burstWall.median, n: s.burstWall.n, what: "wall p50", unit: "s" };
    case "shared":
    case "pressured":
      return s.ttft && { value: s.ttft.median, n: s.ttft.n, what: "TTFT p50", unit: "ms" };
    case "llmd":
      return s.ladder && { value: s.ladder.ttft.mean, n: s.ladder.ttft.n, what: "ladder TTFT mean", unit: "ms" };
    case "trace":
      return s.trace && { value: s.trace.ttft.p50, n: s.trace.ttft.n, what: "TTFT p50", unit: "ms" };
  }
}

/** A trace's second row: TTFT p90 (the tail a hot spot makes). */
export function traceP90Figure(_workload: WorkloadName, s: ArmSummary): ReturnType<typeof keyFigure> {
  return s.trace && { value: s.trace.ttft.p90, n: s.trace.ttft.n, what: "TTFT p90", unit: "ms" };
}

/** A trace on sims: the engines' own TTFT p50 and p90 (the cards' time, without the hops': docs/traces.md#engine-ttft). */
export function engineP50Figure(_workload: WorkloadName, s: ArmSummary): ReturnType<typeof keyFigure> {
  return s.trace?.engineTtft && { value: s.trace.engineTtft.p50, n: s.trace.engineTtft.n, what: "engine TTFT p50", unit: "ms" };
}
export function engineP90Figure(_workload: WorkloadName, s: ArmSummary): ReturnType<typeof keyFigure> {
  return s.trace?.engineTtft && { value: s.trace.engineTtft.p90, n: s.trace.engineTtft.n, what: "engine TTFT p90", unit: "ms" };
}

/** Burst wall p50 (mixed's second figure). */
export function burstFigure(_workload: WorkloadName, s: ArmSummary): ReturnType<typeof keyFigure> {
  return s.burstWall && { value: s.burstWall.median, n: s.burstWall.n, what: "burst wall p50", unit: "s" };
}

export function fmt(value: number, unit: "ms" | "s"): string {
  if (!Number.isFinite(value)) return "-";
  return unit === "ms" ? `${int(value)} ms` : `${(value / 1000).toFixed(1)} s`;
}

type Figure = (workload: WorkloadName, s: ArmSummary) => ReturnType<typeof keyFigure>;

/** A row per workload's headline; mixed also gets its burst wall, the other half of its trade; a trace its p90, and on sims the engines' own p50 and p90. */
function figuresOf(w: WorkloadSummary): Figure[] {
  if (w.workload === "mixed") return [keyFigure, burstFigure];
  if (w.workload !== "trace") return [keyFigure];
  return w.arms.some((a) => a.trace?.engineTtft) ? [keyFigure, traceP90Figure, engineP50Figure, engineP90Figure] : [keyFigure, traceP90Figure];
}

/** `perRun[r]` is run r's workload summaries, in the same workload and arm order every run; `engine` names the row block. */
export function buildMatrix(perRun: readonly (readonly WorkloadSummary[])[], engine?: string): Matrix {
  const first = perRun[0] ?? [];
  // Every arm of any workload gets a column; a workload it did not run shows "-".
  const arms = [...new Set(first.flatMap((w) => w.arms.map((a) => a.arm)))];
  const rows: MatrixRow[] = [];
  for (const w of first) {
    for (const figure of figuresOf(w)) {
      let what = "";
      let unit: MatrixRow["unit"] = "ms";
      const cells = arms.map((arm): MatrixCell => {
        const runs: number[] = [];
        const n: number[] = [];
        let failed = 0;
        for (const run of perRun) {
          const s = run.find((x) => x.workload === w.workload)?.arms.find((x) => x.arm === arm);
          const f = s && figure(w.workload, s);
          runs.push(f ? f.value : NaN);
          n.push(f ? f.n : 0);
          failed += s?.errors ?? 0;
          if (f) ({ what, unit } = f);
        }
        const measured = runs.filter(Number.isFinite);
        return { arm, value: measured.length === 0 ? NaN : median(measured), relative: NaN, runs, n, failed };
      });
      // An arm whose requests failed is measured over the survivors (a conversation that
      // failed is not continued): it sets the row's best only when every arm lost some.
      const finite = cells.filter((c) => Number.isFinite(c.value));
      const whole = finite.filter((c) => c.failed === 0);
      const candidates = whole.length > 0 ? whole : finite;
      const best = candidates.length === 0 ? { arm: "-", value: NaN } : candidates.reduce((b, c) => (c.value < b.value ? c : b));
      for (const c of cells) c.relative = c.value / best.value;
      rows.push({ ...(engine === undefined ? {} : { engine }), workload: w.workload, what, unit, best: { arm: best.arm, value: best.value }, cells });
    }
  }
  return { runs: perRun.length, arms, rows };
}

/** Row blocks one under the other (one per engine setup); an arm one block lacks shows "-" there. */
export function stackMatrices(blocks: readonly Matrix[]): Matrix {
  if (blocks.length === 1) return blocks[0]!;
  const arms = [...new Set(blocks.flatMap((m) => m.arms))];
  const rows = blocks.flatMap((m) =>
    m.rows.map((r) => ({ ...r, cells: arms.map((arm) => r.cells.find((c) => c.arm === arm) ?? { arm, value: NaN, relative: NaN, runs: [], n: [], failed: 0 }) })),
  );
  return { runs: Math.max(...blocks.map((m) => m.runs)), arms, rows };
}

/** Whether the matrix has several row blocks (then each row names its engine setup). */
export function hasBlocks(m: Matrix): boolean {
  return new Set(m.rows.map((r) => r.engine)).size > 1;
}

/** The mark of a relative figure: the issue's target band (5 %), near (25 %), far. */
export type Tier = "best" | "near" | "far";
export function tierOf(relative: number): Tier | undefined {
  if (!Number.isFinite(relative)) return undefined;
  return relative <= 1.05 ? "best" : relative <= 1.25 ? "near" : "far";
}
export const TIER_MARK: Record<Tier, string> = { best: "●", near: "◐", far: "○" };

/** Half the runs' range as a share of the median: "±4%" (empty for one run). */
export function spreadOf(cell: MatrixCell): string {
  const measured = cell.runs.filter(Number.isFinite);
  if (measured.length < 2 || !Number.isFinite(cell.value) || cell.value === 0) return "";
  return `±${Math.round(((Math.max(...measured) - Math.min(...measured)) / 2 / cell.value) * 100)}%`;
}

/** "15" when every arm and run had the same sample size, else "12–15". */
export function sampleSize(row: MatrixRow): string {
  const all = row.cells.flatMap((c) => c.n).filter((n) => n > 0);
  if (all.length === 0) return "0";
  const lo = Math.min(...all);
  const hi = Math.max(...all);
  return lo === hi ? String(lo) : `${lo}–${hi}`;
}


export function cellText(cell: MatrixCell): string {
  const tier = tierOf(cell.relative);
  if (!tier) return "-";
  const spread = spreadOf(cell);
  return `${cell.relative.toFixed(2)}×${spread ? ` ${spread}` : ""} ${TIER_MARK[tier]}${cell.failed > 0 ? FAILED_MARK : ""}`;
}

/** After a cell whose arm had failed requests in that workload. */
export const FAILED_MARK = "†";

export function matrixText(m: Matrix): string {
  const many = m.runs > 1;
  const head = [
    `Each arm's headline figure ÷ the best arm's (lower is better; 1.00× = the best)${many ? `, median of ${m.runs} runs, ± half their range` : ""}.`,
    `● within 5 % of the best   ◐ within 25 %   ○ further   n = samples per arm${many ? " and run" : ""}`,
    ...(m.rows.some((r) => r.cells.some((c) => c.failed > 0))
      ? [`${FAILED_MARK} requests failed in that arm: its figure is over the survivors, so it is not the best unless every arm lost some`]
      : []),
  ];
  const blocks = hasBlocks(m);
  const lead = blocks ? 1 : 0;
  const body = table(
    [...(blocks ? ["engine"] : []), "workload", "headline", "n", ...m.arms, "best"],
    m.rows.map((r) => [
      ...(blocks ? [r.engine ?? "-"] : []),
      r.workload,
      r.what,
      sampleSize(r),
      ...r.cells.map(cellText),
      Number.isFinite(r.best.value) ? `${fmt(r.best.value, r.unit)} ${r.best.arm}` : "-",
    ]),
    { right: [lead + 2, ...m.arms.map((_, i) => lead + i + 3)] },
  );
  return [...head, body].join("\n");
}
