/**
 * From runs to figures: each cell (arm × body × concurrency) is the median of its runs, and
 * carries its spread so a reader can tell a difference from noise. Streams are summarised
 * by the gaps between the reads a client sees, and by how many reads it took (fewer than
 * the engine's chunks means something coalesced them).
 */
import { median, quantile } from "../../src/bench/stats.ts";

/** One wrk run of one arm. CPU figures are µs per completed request; `armUs` is absent for direct. */
export interface Sample {
  arm: string;
  body: string;
  concurrency: number;
  run: number;
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  armUs?: number;
  engineUs: number;
  clientUs: number;
}

export interface Cell {
  arm: string;
  body: string;
  concurrency: number;
  runs: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  armUs?: number;
  engineUs: number;
  clientUs: number;
  /** Errors summed over the runs. */
  errors: number;
  /** (max − min) ÷ median of the runs' req/s. */
  spread: number;
}

/** (max − min) ÷ median: 0.1 = the runs lay within 10 % of their median. */
export function spread(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  return (Math.max(...values) - Math.min(...values)) / median(values);
}

export function summarizeCells(samples: readonly Sample[]): Cell[] {
  const groups = new Map<string, Sample[]>();
  for (const s of samples) {
    const key = `${s.arm}\u0000${s.body}\u0000${s.concurrency}`;
    groups.set(key, [...(groups.get(key) ?? []), s]);
  }
  return [...groups.values()].map((g) => {
    const of = (f: (s: Sample) => number) => median(g.map(f));
    const arm = g.filter((s) => s.armUs !== undefined).map((s) => s.armUs!);
    return {
      arm: g[0]!.arm,
      body: g[0]!.body,
      concurrency: g[0]!.concurrency,
      runs: g.length,
      rps: of((s) => s.rps),
      p50Ms: of((s) => s.p50Ms),
      p99Ms: of((s) => s.p99Ms),
      ...(arm.length > 0 ? { armUs: median(arm) } : {}),
      engineUs: of((s) => s.engineUs),
      clientUs: of((s) => s.clientUs),
      errors: g.reduce((n, s) => n + s.errors, 0),
      spread: spread(g.map((s) => s.rps)),
    };
  });
}

export function findCell(cells: readonly Cell[], arm: string, body: string, concurrency: number): Cell | undefined {
  return cells.find((c) => c.arm === arm && c.body === body && c.concurrency === concurrency);
}

/** One stream as a client saw it: when each read arrived (ms) and how many SSE events it held. */
export interface StreamTrace {
  readsAt: number[];
  events: number[];
}

export interface StreamSample {
  arm: string;
  run: number;
  gapP50Ms: number;
  gapP99Ms: number;
  /** Mean reads per stream, and what the engine sent (one write per chunk). */
  reads: number;
  expectedReads: number;
  /** Share of reads that held more than one token event (the last read holds usage + [DONE] by design). */
  coalesced: number;
}

/** Gaps between consecutive reads of each stream (the wait for the first byte is not a gap). */
export function streamGaps(traces: readonly StreamTrace[]): number[] {
  const gaps: number[] = [];
  for (const t of traces) for (let i = 1; i < t.readsAt.length; i++) gaps.push(t.readsAt[i]! - t.readsAt[i - 1]!);
  return gaps;
}

export function summarizeStreams(arm: string, run: number, traces: readonly StreamTrace[], expectedReads: number): StreamSample {
  const gaps = streamGaps(traces);
  let reads = 0;
  let merged = 0;
  for (const t of traces) {
    reads += t.readsAt.length;
    // The engine's last write carries the usage chunk and [DONE]: two events, one write.
    for (let i = 0; i < t.events.length; i++) if (t.events[i]! > (i === t.events.length - 1 ? 2 : 1)) merged++;
  }
  return {
    arm,
    run,
    gapP50Ms: quantile(gaps, 0.5),
    gapP99Ms: quantile(gaps, 0.99),
    reads: traces.length > 0 ? reads / traces.length : NaN,
    expectedReads,
    coalesced: reads > 0 ? merged / reads : NaN,
  };
}

export interface StreamCell {
  arm: string;
  runs: number;
  gapP50Ms: number;
  gapP99Ms: number;
  reads: number;
  expectedReads: number;
  coalesced: number;
}

export function summarizeStreamCells(samples: readonly StreamSample[]): StreamCell[] {
  const arms = [...new Set(samples.map((s) => s.arm))];
  return arms.map((arm) => {
    const g = samples.filter((s) => s.arm === arm);
    return {
      arm,
      runs: g.length,
      gapP50Ms: median(g.map((s) => s.gapP50Ms)),
      gapP99Ms: median(g.map((s) => s.gapP99Ms)),
      reads: median(g.map((s) => s.reads)),
      expectedReads: g[0]!.expectedReads,
      coalesced: median(g.map((s) => s.coalesced)),
    };
  });
}

/** Arms in a different order each run, so slow drift (another job starting) hits every arm alike. */
export function rotate<T>(items: readonly T[], by: number): T[] {
  if (items.length === 0) return [];
  const k = ((by % items.length) + items.length) % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}
