/**
 * The few statistics the bench reports, pure. Percentiles use linear interpolation between
 * closest ranks (numpy's default), so the median of an even sample is the mean of the two
 * middle values and p90 of ten values lies between the 9th and 10th. Every summary carries
 * its sample size: a median of five turns says little, and the table must say so.
 */

/** The q-th quantile (0..1) of `values`; NaN for an empty sample. Does not mutate. */
export function quantile(values: readonly number[], q: number): number {
  if (!(q >= 0 && q <= 1)) throw new RangeError(`quantile: q must be in [0, 1], not ${q}`);
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export const median = (values: readonly number[]) => quantile(values, 0.5);
export const p90 = (values: readonly number[]) => quantile(values, 0.9);

export interface Summary {
  n: number;
  median: number;
  p90: number;
  mean: number;
  min: number;
  max: number;
}

export function summarize(values: readonly number[]): Summary {
  const n = values.length;
  return {
    n,
    median: median(values),
    p90: p90(values),
    mean: n === 0 ? NaN : values.reduce((a, b) => a + b, 0) / n,
    min: n === 0 ? NaN : Math.min(...values),
    max: n === 0 ? NaN : Math.max(...values),
  };
}

/** a / b, or NaN when either side is missing (an arm not run, an empty sample). */
export function ratio(a: number | undefined, b: number | undefined): number {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return NaN;
  return a / b;
}

/** Share of each key among `keys`, in the order of `universe` (keys never seen get 0). */
export function shares(keys: readonly string[], universe: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const u of universe) out[u] = 0;
  for (const k of keys) out[k] = (out[k] ?? 0) + 1;
  for (const k of Object.keys(out)) out[k] = keys.length === 0 ? 0 : out[k]! / keys.length;
  return out;
}
