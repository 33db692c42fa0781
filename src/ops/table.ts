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
