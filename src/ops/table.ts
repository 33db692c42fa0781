/** Plain-text tables for terminal output: columns padded to their widest cell. */
export function table(header: string[], rows: (string | number)[][], options: { right?: number[] } = {}): string {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  const right = new Set(options.right ?? []);
  return cells
    .map((r) =>
      r
        .map((c, i) => (right.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

export const int = (n: number) => Math.round(n).toLocaleString("en-US");
export const pct = (r: number) => `${Math.round(r * 100)}%`;

/** 42s, 3m05s, 2h10m. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
