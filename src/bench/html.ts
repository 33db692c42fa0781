/**
 * The HTML report: one self-contained file (inline CSS and SVG, no scripts, fonts or
 * images from anywhere) that can be mailed or attached to an issue. Charts: TTFT per turn
 * per policy (agent), burst wall per policy, and TTFT distributions (empirical CDFs) for
 * every workload; then the tables and headline ratios of the text report.
 */
import type { WorkloadName } from "./args.ts";
import { headlineLines, headlines, TITLES, workloadNote, workloadTable, type WorkloadSummary } from "./report.ts";
import type { BenchResult, Sample } from "./run.ts";

const COLOURS: Record<string, string> = {
  roundrobin: "#d62728",
  random: "#ff7f0e",
  "least-loaded": "#8c564b",
  affinity: "#1f77b4",
  hybrid: "#2ca02c",
  "cache-aware": "#9467bd",
  oracle: "#555555",
};
const colour = (arm: string) => COLOURS[arm] ?? "#17becf";

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

const W = 700;
const H = 300;
const M = { left: 64, right: 175, top: 16, bottom: 44 };
const PW = W - M.left - M.right;
const PH = H - M.top - M.bottom;

interface Axis {
  min: number;
  max: number;
  log: boolean;
}

function project(v: number, a: Axis, length: number): number {
  if (a.log) {
    const lo = Math.log10(a.min);
    const hi = Math.log10(a.max);
    return ((Math.log10(Math.max(v, a.min)) - lo) / (hi - lo || 1)) * length;
  }
  return ((v - a.min) / (a.max - a.min || 1)) * length;
}

/** Log-axis ticks at 1-2-5 steps between min and max (seconds). */
export function logTicks(min: number, max: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= min * 0.999 && v <= max * 1.001) ticks.push(Number(v.toPrecision(6)));
    }
  }
  return ticks;
}

export function linearTicks(min: number, max: number, count = 5): number[] {
  const span = max - min || 1;
  const raw = span / count;
  const step = [1, 2, 5, 10].map((m) => m * 10 ** Math.floor(Math.log10(raw))).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let v = Math.ceil(min / step) * step; v <= max + 1e-9; v += step) ticks.push(Number(v.toPrecision(6)));
  return ticks;
}

const num = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(0) : v >= 1 ? String(Number(v.toFixed(1))) : String(Number(v.toPrecision(2))));

function frame(x: Axis, y: Axis, xLabel: string, yLabel: string, xTicks: number[], yTicks: number[], body: string, legend: string[]): string {
  const px = (v: number) => M.left + project(v, x, PW);
  const py = (v: number) => M.top + PH - project(v, y, PH);
  const grid = yTicks
    .map((t) => `<line x1="${M.left}" x2="${M.left + PW}" y1="${py(t).toFixed(1)}" y2="${py(t).toFixed(1)}" class="grid"/><text x="${M.left - 6}" y="${(py(t) + 4).toFixed(1)}" text-anchor="end">${num(t)}</text>`)
    .join("");
  const xt = xTicks
    .map((t) => `<line x1="${px(t).toFixed(1)}" x2="${px(t).toFixed(1)}" y1="${M.top + PH}" y2="${M.top + PH + 4}" class="axis"/><text x="${px(t).toFixed(1)}" y="${M.top + PH + 17}" text-anchor="middle">${num(t)}</text>`)
    .join("");
  const leg = legend.map((l, i) => `<g transform="translate(${M.left + PW + 14},${M.top + 8 + i * 18})">${l}</g>`).join("");
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img">
${grid}${xt}
<line x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${M.top + PH}" class="axis"/><line x1="${M.left}" x2="${M.left + PW}" y1="${M.top + PH}" y2="${M.top + PH}" class="axis"/>
<text x="${M.left + PW / 2}" y="${H - 6}" text-anchor="middle" class="label">${escapeHtml(xLabel)}</text>
<text transform="translate(14,${M.top + PH / 2}) rotate(-90)" text-anchor="middle" class="label">${escapeHtml(yLabel)}</text>
${body}${leg}</svg>`;
}

const legendItem = (arm: string, extra = "") =>
  `<line x1="0" x2="18" y1="0" y2="0" stroke="${colour(arm)}" stroke-width="3"${arm === "oracle" ? ' stroke-dasharray="4 3"' : ""}/><text x="24" y="4">${escapeHtml(arm + extra)}</text>`;

/** TTFT of each turn of each conversation, one line per policy (log y). */
export function turnChart(series: { arm: string; turns: { turn: number; ttftMs: number }[] }[]): string {
  const all = series.flatMap((s) => s.turns.map((t) => t.ttftMs / 1000)).filter((v) => v > 0 && Number.isFinite(v));
  if (all.length === 0) return "";
  const maxTurn = Math.max(...series.flatMap((s) => s.turns.map((t) => t.turn)));
  const y: Axis = { min: Math.min(...all) * 0.8, max: Math.max(...all) * 1.25, log: true };
  const x: Axis = { min: 1, max: Math.max(2, maxTurn), log: false };
  const px = (v: number) => M.left + project(v, x, PW);
  const py = (v: number) => M.top + PH - project(v, y, PH);
  const body = series
    .map((s) => {
      const pts = s.turns.filter((t) => Number.isFinite(t.ttftMs) && t.ttftMs > 0).map((t) => `${px(t.turn).toFixed(1)},${py(t.ttftMs / 1000).toFixed(1)}`);
      const dots = pts.map((p) => `<circle cx="${p.split(",")[0]}" cy="${p.split(",")[1]}" r="2.5" fill="${colour(s.arm)}"/>`).join("");
      return `<polyline points="${pts.join(" ")}" fill="none" stroke="${colour(s.arm)}" stroke-width="2"${s.arm === "oracle" ? ' stroke-dasharray="4 3"' : ""}/>${dots}`;
    })
    .join("\n");
  const xTicks = linearTicks(1, x.max, Math.min(maxTurn, 10)).filter((t) => Number.isInteger(t));
  return frame(x, y, "turn", "TTFT, s (log)", xTicks, logTicks(y.min, y.max), body, series.map((s) => legendItem(s.arm)));
}

/** One bar per policy (the median), a dot per burst. */
export function barChart(bars: { arm: string; median: number; values: number[] }[], yLabel: string): string {
  if (bars.length === 0) return "";
  const max = Math.max(...bars.flatMap((b) => [b.median, ...b.values]).filter(Number.isFinite)) * 1.15 || 1;
  const y: Axis = { min: 0, max, log: false };
  const py = (v: number) => M.top + PH - project(v, y, PH);
  const slot = PW / bars.length;
  const body = bars
    .map((b, i) => {
      const x0 = M.left + i * slot + slot * 0.2;
      const w = slot * 0.6;
      const top = py(b.median);
      const labelY = py(Math.max(b.median, ...b.values.filter(Number.isFinite))) - 7;
      const dots = b.values.map((v, k) => `<circle cx="${(x0 + w * ((k + 1) / (b.values.length + 1))).toFixed(1)}" cy="${py(v).toFixed(1)}" r="3" fill="#000" fill-opacity="0.55"/>`).join("");
      return `<rect x="${x0.toFixed(1)}" y="${top.toFixed(1)}" width="${w.toFixed(1)}" height="${(M.top + PH - top).toFixed(1)}" fill="${colour(b.arm)}" fill-opacity="0.8"/>${dots}<text x="${(x0 + w / 2).toFixed(1)}" y="${labelY.toFixed(1)}" text-anchor="middle">${Number.isFinite(b.median) ? b.median.toFixed(1) : "-"}</text><text x="${(x0 + w / 2).toFixed(1)}" y="${M.top + PH + 17}" text-anchor="middle">${escapeHtml(b.arm)}</text>`;
    })
    .join("\n");
  return frame({ min: 0, max: 1, log: false }, y, "policy (bar = median, dots = each burst)", yLabel, [], linearTicks(0, max), body, []);
}

/** Empirical CDF of TTFT per policy (log x): the whole distribution, not two percentiles. */
export function cdfChart(series: { arm: string; values: number[] }[], xLabel: string): string {
  const all = series.flatMap((s) => s.values).filter((v) => v > 0 && Number.isFinite(v));
  if (all.length === 0) return "";
  const x: Axis = { min: Math.min(...all) * 0.8, max: Math.max(...all) * 1.25, log: true };
  const y: Axis = { min: 0, max: 1, log: false };
  const px = (v: number) => M.left + project(v, x, PW);
  const py = (v: number) => M.top + PH - project(v, y, PH);
  const body = series
    .map((s) => {
      const sorted = s.values.filter((v) => v > 0 && Number.isFinite(v)).sort((a, b) => a - b);
      if (sorted.length === 0) return "";
      let d = `M${px(sorted[0]!).toFixed(1)},${py(0).toFixed(1)}`;
      sorted.forEach((v, i) => {
        d += ` L${px(v).toFixed(1)},${py(i / sorted.length).toFixed(1)} L${px(v).toFixed(1)},${py((i + 1) / sorted.length).toFixed(1)}`;
      });
      return `<path d="${d}" fill="none" stroke="${colour(s.arm)}" stroke-width="2"${s.arm === "oracle" ? ' stroke-dasharray="4 3"' : ""}/>`;
    })
    .join("\n");
  return frame(x, y, xLabel, "share of requests ≤ x", logTicks(x.min, x.max), [0, 0.25, 0.5, 0.75, 1], body, series.map((s) => legendItem(s.arm, ` (n=${s.values.length})`)));
}

const CSS = `body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .label{font-size:12px}svg .grid{stroke:#e4e4e4}svg .axis{stroke:#888}
.note{color:#555}figure{margin:1em 0}figcaption{color:#555;font-size:12px}`;

function samplesOf(result: BenchResult, workload: WorkloadName): { arm: string; samples: Sample[] }[] {
  const w = result.workloads.find((x) => x.workload === workload);
  return w ? w.arms.map((a) => ({ arm: a.arm, samples: a.samples.filter((s) => !s.error) })) : [];
}

export function renderHtml(result: BenchResult, summaries: readonly WorkloadSummary[]): string {
  const t = result.target;
  const replicas = t.replicas.map((r) => r.name);
  const where =
    t.kind === "sim"
      ? `${t.replicas.length} simulated 3090-class replicas (${t.replicas[0]?.kvTokens.toLocaleString("en-US")} KV tokens each) at time scale ${t.timeScale}; all times are model time (real ÷ ${t.timeScale}).`
      : `${t.replicas.length} replicas from ${escapeHtml(result.options.config ?? "")}, model ${escapeHtml(t.model)}.`;
  const sections: string[] = [];
  for (const w of summaries) {
    const charts: string[] = [];
    const bySample = samplesOf(result, w.workload);
    if (w.workload === "agent") {
      charts.push(
        figure(
          turnChart(bySample.map(({ arm, samples }) => ({ arm, turns: samples.filter((s) => s.kind === "turn" && s.group === 0).map((s) => ({ turn: s.index, ttftMs: s.ttftMs })) }))),
          "TTFT of every turn of the conversation, per policy. Turn 1 is cold everywhere; after it, a policy that keeps the conversation on one replica stays low.",
        ),
      );
    }
    if (w.workload === "burst" || w.workload === "mixed") {
      const res = result.workloads.find((x) => x.workload === w.workload)!;
      charts.push(
        figure(
          barChart(
            res.arms.map((a) => ({ arm: a.arm, median: summaries.find((s) => s.workload === w.workload)!.arms.find((s) => s.arm === a.arm)!.burstWall?.median! / 1000, values: a.bursts.map((b) => b.wallMs / 1000) })),
            "burst wall, s",
          ),
          "Wall time of each burst (first request sent → last byte received), per policy.",
        ),
      );
    }
    const warmOnly = w.workload === "agent" || w.workload === "mixed" || w.workload === "capacity";
    charts.push(
      figure(
        cdfChart(
          bySample.map(({ arm, samples }) => ({ arm, values: samples.filter((s) => (warmOnly ? s.kind === "turn" && s.index > 1 : true)).map((s) => s.ttftMs / 1000) })),
          warmOnly ? "TTFT of warm turns, s (log)" : "TTFT, s (log)",
        ),
        `TTFT distribution${warmOnly ? " of warm conversation turns" : ""}: further left is faster; a step is one request.`,
      ),
    );
    const note = workloadNote(w.workload, result);
    sections.push(
      `<h2>${escapeHtml(TITLES[w.workload])}</h2>\n${charts.join("\n")}\n<pre>${escapeHtml(workloadTable(w, replicas))}</pre>${note ? `<p class="note">${escapeHtml(note)}</p>` : ""}`,
    );
  }
  const hl = headlines(summaries);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmroute bench ${escapeHtml(result.run)}</title><style>${CSS}</style></head>
<body>
<h1>llmroute bench</h1>
<p class="note">Run ${escapeHtml(result.run)}, ${escapeHtml(result.startedAt)}, ${result.elapsedS.toFixed(0)} s real. ${where}
Every arm starts from a cold, equal fleet; every prompt opens with a salt line unique to the run, workload and arm. n = sample size.</p>
${hl.length ? `<h2>Headline ratios</h2><pre>${escapeHtml(headlineLines(hl))}</pre>` : ""}
${sections.join("\n")}
</body></html>
`;
}

function figure(svg: string, caption: string): string {
  return svg ? `<figure>${svg}<figcaption>${escapeHtml(caption)}</figcaption></figure>` : "";
}
