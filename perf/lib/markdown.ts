/** Markdown tables for the results file and perf/README.md. */

export type Align = "left" | "right";

export function markdownTable(header: readonly string[], rows: readonly (readonly (string | number)[])[], align: readonly Align[] = []): string {
  const cell = (v: string | number) => String(v).replaceAll("|", "\\|").replaceAll("\n", " ");
  const rule = header.map((_, i) => ((align[i] ?? (i === 0 ? "left" : "right")) === "right" ? "---:" : "---"));
  return [header, rule, ...rows].map((r, i) => `| ${(i === 1 ? r : r.map((c) => cell(c as string | number))).join(" | ")} |`).join("\n");
}

/** Replace what lies between two marker lines (kept) in `text`; an error when a marker is missing. */
export function replaceBetween(text: string, begin: string, end: string, content: string): string {
  const a = text.indexOf(begin);
  const b = text.indexOf(end, a + begin.length);
  if (a < 0 || b < 0) throw new Error(`markers ${begin} … ${end} not found`);
  return `${text.slice(0, a + begin.length)}\n${content.trim()}\n${text.slice(b)}`;
}
