/**
 * Issue 12's targets, each with its measured figure and a verdict: "met", or by how much it
 * was missed (in the target's own unit and as a share of the limit). A target whose figure
 * was not measured in this run says so instead of passing.
 */

export interface Target {
  text: string;
  measured: number;
  limit: number;
  op: "<=" | ">=";
  /** Appended to numbers: "×", " ms", " B", " MB", "" … */
  unit: string;
  digits: number;
  /** Why it was not measured, when it was not. */
  missing?: string;
}

export interface Verdict {
  status: "met" | "missed" | "not measured";
  text: string;
}

export function formatNumber(x: number, digits: number): string {
  return Math.abs(x) >= 10_000 ? Math.round(x).toLocaleString("en-US") : x.toFixed(digits);
}

export function judge(t: Target): Verdict {
  if (!Number.isFinite(t.measured)) return { status: "not measured", text: `not measured${t.missing ? ` (${t.missing})` : ""}` };
  const met = t.op === "<=" ? t.measured <= t.limit : t.measured >= t.limit;
  if (met) return { status: "met", text: "met" };
  const gap = Math.abs(t.measured - t.limit);
  const share = t.limit !== 0 ? Math.round((gap / Math.abs(t.limit)) * 100) : NaN;
  return { status: "missed", text: `missed by ${formatNumber(gap, t.digits)}${t.unit}${Number.isFinite(share) ? ` (${share} % of the limit)` : ""}` };
}

/** "≥ 0.8×", "≤ 0.5 ms" */
export function limitText(t: Pick<Target, "op" | "limit" | "unit" | "digits">): string {
  return `${t.op === "<=" ? "≤" : "≥"} ${formatNumber(t.limit, t.digits)}${t.unit}`;
}
