/**
 * The HTML report: one self-contained file (inline CSS and SVG, no scripts, fonts or
 * images from anywhere) that can be mailed or attached to an issue. First the matrix as a
 * shaded table; then per workload its charts — TTFT per turn (agent), burst wall per
 * policy, TTFT mean per rung (llmd), TTFT distributions (empirical CDFs) for every
 * workload — and the text report's tables; the headline ratios last.
 */
import type { WorkloadName } from "./args.ts";
import { FAILED_MARK, fmt, hasBlocks, sampleSize, spreadOf, tierOf, type Matrix, type Tier } from "./matrix.ts";
import {
  correctionSummary,
  timerLagText,
  describeRun,
  headlineLines,
  headlines,
  HIT_NOTE,
  hitTable,
  rungTable,
  TITLES,
  workloadNote,
  workloadTable,
  type EngineBlock,
} from "./report.ts";
import type { BenchResult, Sample } from "./run.ts";
import { median } from "./stats.ts";

const COLOURS: Record<string, string> = {
  roundrobin: "#d62728",
  random: "#ff7f0e",
  "least-loaded": "#8c564b",
  affinity: "#1f77b4",
  hybrid: "#2ca02c",
  "cache-aware": "#9467bd",
  "hybrid-plain": "#bcbd22",
  oracle: "#555555",
  pooled: "#999999",
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

/** One line per policy through (x, y) points, log y; x linear or log. */
export function lineChart(series: { arm: string; points: { x: number; y: number }[] }[], xLabel: string, yLabel: string, xLog = false): string {
  const usable = series.map((s) => ({ arm: s.arm, points: s.points.filter((p) => Number.isFinite(p.y) && p.y > 0) }));
  const ys = usable.flatMap((s) => s.points.map((p) => p.y));
  if (ys.length === 0) return "";
  const xs = usable.flatMap((s) => s.points.map((p) => p.x));
  const y: Axis = { min: Math.min(...ys) * 0.8, max: Math.max(...ys) * 1.25, log: true };
  const x: Axis = xLog ? { min: Math.min(...xs) / 1.2, max: Math.max(...xs) * 1.2, log: true } : { min: Math.min(...xs), max: Math.max(Math.min(...xs) + 1, ...xs), log: false };
  const px = (v: number) => M.left + project(v, x, PW);
  const py = (v: number) => M.top + PH - project(v, y, PH);
  const body = usable
    .map((s) => {
      const pts = s.points.map((p) => [px(p.x).toFixed(1), py(p.y).toFixed(1)] as const);
      const dots = pts.map(([cx, cy]) => `<circle cx="${cx}" cy="${cy}" r="2.5" fill="${colour(s.arm)}"/>`).join("");
      return `<polyline points="${pts.map((p) => p.join(",")).join(" ")}" fill="none" stroke="${colour(s.arm)}" stroke-width="2"${s.arm === "oracle" ? ' stroke-dasharray="4 3"' : ""}/>${dots}`;
    })
    .join("\n");
  const xTicks = xLog ? [...new Set(xs)].sort((a, b) => a - b) : linearTicks(x.min, x.max, Math.min(x.max - x.min, 10)).filter((t) => Number.isInteger(t));
  return frame(x, y, xLabel, yLabel, xTicks, logTicks(y.min, y.max), body, usable.map((s) => legendItem(s.arm)));
}

/** TTFT of each turn of the conversation, one line per policy (log y); over several runs, each turn's median. */
export function turnChart(series: { arm: string; turns: { turn: number; ttftMs: number }[] }[]): string {
  return lineChart(
    series.map((s) => {
      const turns = [...new Set(s.turns.map((t) => t.turn))].sort((a, b) => a - b);
      return { arm: s.arm, points: turns.map((turn) => ({ x: turn, y: median(s.turns.filter((t) => t.turn === turn && Number.isFinite(t.ttftMs)).map((t) => t.ttftMs)) / 1000 })) };
    }),
    "turn",
    "TTFT, s (log)",
  );
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
.note{color:#555}figure{margin:1em 0}figcaption{color:#555;font-size:12px}
table.matrix{border-collapse:collapse;margin:1em 0;font-size:13px}table.matrix th,table.matrix td{border:1px solid #ddd;padding:.25em .45em;text-align:right;white-space:nowrap}
table.matrix th{background:#f6f6f6}table.matrix th:nth-child(-n+2){text-align:left}table.matrix td:first-child,table.matrix td:nth-child(2){text-align:left}table.matrix.blocks th:nth-child(3),table.matrix.blocks td:nth-child(3){text-align:left}table.matrix small{color:#555}
.key{padding:0 .4em;border:1px solid #ddd}
.alarm{background:#f4a3a3;padding:.5em .8em;font-weight:600}`;

function samplesOf(result: BenchResult, workload: WorkloadName): { arm: string; samples: Sample[] }[] {
  const w = result.workloads.find((x) => x.workload === workload);
  // A trace's warm-up is sent, not measured.
  return w ? w.arms.map((a) => ({ arm: a.arm, samples: a.samples.filter((s) => !s.error && !s.warmup) })) : [];
}

const SHADES: Record<Tier | "worst", string> = { best: "#c7e9c0", near: "#fff2b3", far: "#fdd0a2", worst: "#f4a3a3" };

/** The matrix as a shaded table: green within 5 % of the best arm, yellow within 25 %, orange beyond, red past 2×. */
export function matrixHtml(m: Matrix): string {
  const blocks = hasBlocks(m);
  const head = `<tr>${blocks ? "<th>engine</th>" : ""}<th>workload</th><th>headline</th><th>n</th>${m.arms.map((a) => `<th>${escapeHtml(a)}</th>`).join("")}<th>best</th></tr>`;
  const rows = m.rows.map((r) => {
    const cells = r.cells.map((c) => {
      const tier = tierOf(c.relative);
      if (!tier) return "<td>-</td>";
      const shade = c.relative > 2 ? SHADES.worst : SHADES[tier];
      const spread = spreadOf(c);
      const title = `${fmt(c.value, r.unit)}; n=${c.n.join("+")}${spread ? `; runs ${c.runs.map((v) => fmt(v, r.unit)).join(", ")}` : ""}${c.failed > 0 ? `; ${c.failed} requests failed: over the survivors` : ""}`;
      return `<td style="background:${shade}" title="${escapeHtml(title)}">${c.relative.toFixed(2)}×${spread ? ` <small>${spread}</small>` : ""}${c.failed > 0 ? FAILED_MARK : ""}</td>`;
    });
    return `<tr>${blocks ? `<td>${escapeHtml(r.engine ?? "-")}</td>` : ""}<td>${r.workload}</td><td>${escapeHtml(r.what)}</td><td class="num">${sampleSize(r)}</td>${cells.join("")}<td class="num">${escapeHtml(`${fmt(r.best.value, r.unit)} ${r.best.arm}`)}</td></tr>`;
  });
  const legend = Object.entries({ "within 5 % of the best": SHADES.best, "within 25 %": SHADES.near, "further": SHADES.far, "over 2×": SHADES.worst })
    .map(([label, shade]) => `<span class="key" style="background:${shade}">${label}</span>`)
    .join(" ");
  const runs = m.runs > 1 ? ` Median of ${m.runs} runs; ± is half the runs' range.` : "";
  return `<table class="matrix${blocks ? " blocks" : ""}">${head}${rows.join("")}</table>
<p class="note">Each cell: the arm's headline figure ÷ the best arm's (lower is better; 1.00× = the best).${runs} n = samples per arm${m.runs > 1 ? " and run" : ""}; hover a cell for its value.${m.rows.some((r) => r.cells.some((c) => c.failed > 0)) ? ` ${FAILED_MARK} requests failed in that arm: its figure is over the survivors, so it is not the best unless every arm lost some.` : ""} ${legend}</p>`;
}

/** One engine setup's sections: per workload its charts, tables and notes, then its headline ratios. */
function blockSections(block: EngineBlock, runs: number, prefix: string, explain: boolean): string[] {
  const { result, summaries } = block;
  const replicas = result.target.replicas.map((r) => r.name);
  const sections: string[] = [];
  let explained = !explain;
  for (const w of summaries) {
    const charts: string[] = [];
    const bySample = samplesOf(result, w.workload);
    if (w.workload === "agent") {
      charts.push(
        figure(
          turnChart(bySample.map(({ arm, samples }) => ({ arm, turns: samples.filter((s) => s.kind === "turn" && s.group === 0).map((s) => ({ turn: s.index, ttftMs: s.ttftMs })) }))),
          `TTFT of every turn of the conversation, per policy${runs > 1 ? " (each turn's median over the runs)" : ""}. Turn 1 is cold everywhere; after it, a policy that keeps the conversation on one replica stays low.`,
        ),
      );
    }
    if (w.workload === "llmd") {
      const rates = result.options.llmd.rates;
      charts.push(
        figure(
          lineChart(
            w.arms.map((a) => ({ arm: a.arm, points: (a.rungs ?? []).filter((r) => r.rung >= 1).map((r) => ({ x: rates[r.rung - 1]!, y: r.ttft.mean / 1000 })) })),
            "offered rate, requests per second (log)",
            "TTFT mean, s (log)",
            true,
          ),
          "Mean TTFT at each rung of the ladder, per policy (llm-d's latency-vs-QPS chart). Where a line turns up, that policy's fleet can no longer keep up.",
        ),
      );
    }
    if (w.workload === "burst" || w.workload === "mixed") {
      const res = result.workloads.find((x) => x.workload === w.workload)!;
      charts.push(
        figure(
          barChart(
            res.arms.map((a) => ({ arm: a.arm, median: w.arms.find((s) => s.arm === a.arm)!.burstWall?.median! / 1000, values: a.bursts.map((b) => b.wallMs / 1000) })),
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
    const tables = [workloadTable(w, replicas), rungTable(w, result.options), hitTable(w, replicas)].filter((x) => x !== undefined);
    const notes = [explained ? undefined : HIT_NOTE, workloadNote(w.workload, result)].filter((x) => x !== undefined);
    explained = true;
    sections.push(
      `<h2>${escapeHtml(prefix + TITLES[w.workload])}</h2>\n${charts.join("\n")}\n<pre>${escapeHtml(tables.join("\n\n"))}</pre>${notes.map((n) => `<p class="note">${escapeHtml(n)}</p>`).join("")}`,
    );
  }
  const hl = headlines(summaries);
  if (hl.length) sections.push(`<h2>${escapeHtml(prefix)}Headline ratios</h2><pre>${escapeHtml(headlineLines(hl))}</pre>`);
  return sections;
}

export function renderHtml(blocks: readonly EngineBlock[], matrix: Matrix): string {
  const first = blocks[0]!.result;
  const { title, where } = describeRun(blocks, matrix.runs);
  const corrections = correctionSummary(blocks);
  const lag = timerLagText(blocks);
  const sections = blocks.flatMap((b, i) => blockSections(b, matrix.runs, blocks.length > 1 && b.label ? `${b.label}: ` : "", i === 0));
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmroute bench ${escapeHtml(blocks.map((b) => b.result.run).join(", "))}</title><style>${CSS}</style></head>
<body>
<h1>llmroute bench</h1>
<p class="note">${escapeHtml(title)}, started ${escapeHtml(first.startedAt)}. ${escapeHtml(where)}.
Every arm starts from a cold, equal fleet; every prompt opens with a salt line unique to the run, workload and arm. n = sample size.</p>
${matrixHtml(matrix)}
<p class="${corrections.false > 0 ? "alarm" : "note"}">${escapeHtml(corrections.text)}</p>${lag ? `
<p class="note">${escapeHtml(lag)}</p>` : ""}
${sections.join("\n")}
</body></html>
`;
}

function figure(svg: string, caption: string): string {
  return svg ? `<figure>${svg}<figcaption>${escapeHtml(caption)}</figcaption></figure>` : "";
}
