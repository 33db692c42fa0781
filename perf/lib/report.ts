/**
 * The results of one perf run as the markdown perf/README.md shows between its perf markers: the
 * headline table (the targets' shape), the ratios, the details, streams, memory, the decision
 * cost, every target with its verdict, and the machine it ran on. Pure: results in, text out.
 */
import { ratio } from "../../src/bench/stats.ts";
import type { Machine } from "./machine.ts";
import { describeMachine } from "./machine.ts";
import { markdownTable } from "./markdown.ts";
import { findCell, type Cell, type StreamCell } from "./summarize.ts";
import { formatNumber, judge, limitText, type Target } from "./targets.ts";

export const ARM_LABELS: Record<string, string> = {
  direct: "direct",
  nginx: "nginx",
  haproxy: "HAProxy",
  passthrough: "Bun pass-through",
  llmroute: "llmroute",
};

export interface MemorySize {
  entries: number;
  conversations: number;
  /** Process RSS after the fill and a full GC, and before the fill (imports only). */
  rssMB: number;
  baseRssMB: number;
  /** `index.memoryBytes()`: the index's arrays (capacity, not just the live entries). */
  indexBytes: number;
  fillSeconds: number;
}

export interface MemoryResults {
  /** How the conversations were shaped (message sizes, shared system prompts). */
  conversation: string;
  replicas: number;
  bound: number;
  sizes: MemorySize[];
  /** `index.activeWorkingSet(now)` at the bound: a reading every 2 s of simulated time, and one after a window change (a full walk). */
  capacity?: { medianMs: number; p90Ms: number; rebuildMs: number; samples: number };
  /** A real `llmroute serve` restored with the full index from a state file. */
  router?: { entries: number; rssMB: number; statusMs: number; metricsMs: number; firstStatusMs: number; samples: number };
}

export interface DecisionResults {
  replicas: number;
  indexEntries: number;
  rows: { policy: string; tokens: number; bodyKiB: number; links: number; indexEntries: number; medianMs: number; p90Ms: number }[];
}

export interface StreamResults {
  cells: StreamCell[];
  chunks: number;
  gapMs: number;
  streams: number;
  concurrency: number;
}

export interface OverheadResults {
  machine: Machine;
  finishedAt: string;
  loadAfter: [number, number, number];
  /** Cores' worth of CPU used by processes other than this run's, on average, while arms ran. */
  otherCores: number;
  /** CPU lists for the proxy under test and for the client + engine; undefined when not pinned. */
  pinning?: { proxy: string; load: string };
  runs: number;
  seconds: number;
  client: string;
  arms: { id: string; version?: string }[];
  missing: { id: string; why: string }[];
  bodies: { id: string; label: string; bytes: number }[];
  concurrency: number[];
  cells: Cell[];
  streams?: StreamResults;
  memory?: MemoryResults;
  decision?: DecisionResults;
}

const label = (arm: string) => ARM_LABELS[arm] ?? arm;
const ms = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? "—" : x < 10 ? x.toFixed(2) : x.toFixed(1));
const int = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? "—" : Math.round(x).toLocaleString("en-US"));
const times = (x: number) => (Number.isFinite(x) ? `${x.toFixed(2)}×` : "—");

/** The body the per-request figures are quoted for (the first), and the large one (the last). */
const smallOf = (r: OverheadResults) => r.bodies[0]?.id ?? "small";
const largeOf = (r: OverheadResults) => r.bodies.at(-1)?.id ?? "large";

/** Added latency at concurrency 1: an arm's p50 minus direct's. */
export function addedMs(cells: readonly Cell[], arm: string, body: string): number {
  const a = findCell(cells, arm, body, 1);
  const d = findCell(cells, "direct", body, 1);
  return a && d ? a.p50Ms - d.p50Ms : NaN;
}

export function targetsOf(r: OverheadResults): Target[] {
  const small = smallOf(r);
  const large = largeOf(r);
  const c64 = (arm: string) => findCell(r.cells, arm, small, 64);
  const notRun = (arm: string) => (r.missing.find((m) => m.id === arm)?.why ?? `${label(arm)} not run`);
  const streamOf = (arm: string) => r.streams?.cells.find((c) => c.arm === arm);
  const at = r.memory?.sizes.find((s) => s.entries >= r.memory!.bound) ?? r.memory?.sizes.at(-1);
  // The RSS limit is set at 1M entries, whatever the default bound is.
  const at1M = r.memory?.sizes.find((s) => s.entries >= 1_000_000) ?? at;
  const decisionMs = (tokens: number) =>
    r.decision?.rows.find((x) => x.policy === "hybrid" && x.tokens === tokens && x.indexEntries === r.decision!.indexEntries)?.medianMs ?? NaN;
  const perEntry = at ? at.indexBytes / at.entries : NaN;
  const scrape = r.memory?.router ? Math.max(r.memory.router.statusMs, r.memory.router.metricsMs) : NaN;
  return [
    {
      text: `small bodies, concurrency 64: req/s ÷ Bun pass-through`,
      measured: ratio(c64("llmroute")?.rps, c64("passthrough")?.rps),
      limit: 0.8, op: ">=", unit: "×", digits: 2, missing: notRun("passthrough"),
    },
    {
      text: `small bodies, concurrency 64: req/s ÷ HAProxy`,
      measured: ratio(c64("llmroute")?.rps, c64("haproxy")?.rps),
      limit: 0.7, op: ">=", unit: "×", digits: 2, missing: notRun("haproxy"),
    },
    {
      text: `small bodies, concurrency 64: CPU per request ÷ Bun pass-through's`,
      measured: ratio(c64("llmroute")?.armUs, c64("passthrough")?.armUs),
      limit: 1.3, op: "<=", unit: "×", digits: 2, missing: notRun("passthrough"),
    },
    {
      text: `${r.bodies.at(-1)?.label ?? "large"} bodies, concurrency 1: added p50 ÷ Bun pass-through's added p50`,
      measured: ratio(addedMs(r.cells, "llmroute", large), addedMs(r.cells, "passthrough", large)),
      limit: 1.5, op: "<=", unit: "×", digits: 2, missing: notRun("passthrough"),
    },
    {
      text: "streams: added inter-chunk gap p99 (llmroute − direct)",
      measured: streamOf("llmroute") && streamOf("direct") ? streamOf("llmroute")!.gapP99Ms - streamOf("direct")!.gapP99Ms : NaN,
      limit: 0.5, op: "<=", unit: " ms", digits: 2, missing: "streams not run",
    },
    {
      text: "index: bytes per entry (index.memoryBytes() ÷ entries at the bound)",
      measured: perEntry, limit: 100, op: "<=", unit: " B", digits: 0, missing: "memory not run",
    },
    {
      text: `RSS with ${int(at1M?.entries)} index entries (the index alone, fresh process)`,
      measured: at1M?.rssMB ?? NaN, limit: 150, op: "<=", unit: " MB", digits: 0, missing: "memory not run",
    },
    {
      text: `RSS of \`llmroute serve\` restored with ${int(r.memory?.router?.entries)} entries`,
      measured: r.memory?.router?.rssMB ?? NaN, limit: 150, op: "<=", unit: " MB", digits: 0, missing: "router memory not run",
    },
    {
      text: "three-turn conversations the default bound holds",
      measured: at ? at.conversations : NaN, limit: 300_000, op: ">=", unit: "", digits: 0, missing: "memory not run",
    },
    {
      text: "capacity reading `index.activeWorkingSet(now)` at the bound (median)",
      measured: r.memory?.capacity?.medianMs ?? NaN, limit: 5, op: "<=", unit: " ms", digits: 3, missing: "memory not run",
    },
    {
      text: "/status and /metrics scrape at the bound (the slower one's median)",
      measured: scrape, limit: 5, op: "<=", unit: " ms", digits: 2, missing: "router memory not run",
    },
    {
      text: `routing decision, 90k-token chat over ${r.decision?.replicas ?? 8} replicas (hybrid, full index)`,
      measured: decisionMs(90_000), limit: 0.5, op: "<=", unit: " ms", digits: 3, missing: "decision not run",
    },
    {
      text: `routing decision, 8k-token chat over ${r.decision?.replicas ?? 8} replicas (hybrid, full index)`,
      measured: decisionMs(8_000), limit: 0.1, op: "<=", unit: " ms", digits: 3, missing: "decision not run",
    },
  ];
}

export function renderReport(r: OverheadResults): string {
  const arms = r.arms.map((a) => a.id);
  const small = smallOf(r);
  const out: string[] = [];

  out.push(`**${r.machine.date.slice(0, 10)}**, ${describeMachine(r.machine)}; load at the end ${r.loadAfter.map((x) => x.toFixed(2)).join(" / ")}; ` +
    `other processes used ${r.otherCores.toFixed(2)} of ${r.machine.cores} cores on average while the arms ran` +
    `${r.otherCores > 0.2 ? " — a busy machine: read ratios, not absolutes" : ""}. ` +
    `${r.pinning ? `Proxy under test pinned to CPU ${r.pinning.proxy}; client (wrk) and engine on CPU ${r.pinning.load}.` : "Not pinned: every process on every core."} ` +
    `Medians of ${r.runs} runs × ${r.seconds} s per cell, arms interleaved; client ${r.client}; Bun ${r.machine.bun}.`);
  if (r.missing.length > 0) out.push(`\nNot run: ${r.missing.map((m) => `${label(m.id)} (${m.why})`).join("; ")}.`);

  // Headline: the targets table.
  const head = ["", ...arms.map(label)];
  const rows: string[][] = [];
  for (const body of r.bodies) {
    for (const c of r.concurrency) {
      const cells = arms.map((a) => findCell(r.cells, a, body.id, c));
      rows.push(c === 1 ? [`${body.label}, concurrency 1: p50 ms`, ...cells.map((x) => ms(x?.p50Ms))] : [`${body.label}, concurrency ${c}: req/s`, ...cells.map((x) => int(x?.rps))]);
    }
  }
  for (const body of r.bodies) {
    const c = body.id === small ? 64 : 16;
    if (!r.concurrency.includes(c)) continue;
    rows.push([`router CPU per ${body.label} request (concurrency ${c}): µs`, ...arms.map((a) => (a === "direct" ? "—" : int(findCell(r.cells, a, body.id, c)?.armUs)))]);
  }
  out.push(`\n${markdownTable(head, rows)}`);
  const alone = findCell(r.cells, "direct", small, 64);
  if (alone) {
    out.push(
      `\nThe load side alone (direct, ${r.bodies[0]!.label}, concurrency 64): ${int(alone.rps)} req/s, with ${int(alone.clientUs)} µs of client and ${int(alone.engineUs)} µs of engine CPU per request` +
        `${r.pinning ? ` on CPU ${r.pinning.load}` : ""}. An arm far below that rate is limited by itself, not by the client.`,
    );
  }

  // Ratios.
  const others = ["passthrough", "haproxy", "nginx"].filter((a) => arms.includes(a));
  if (arms.includes("llmroute") && others.length > 0) {
    const ratioRows: string[][] = [];
    for (const body of r.bodies) {
      for (const c of r.concurrency) {
        const l = findCell(r.cells, "llmroute", body.id, c);
        ratioRows.push([
          `${body.label}, concurrency ${c}`,
          ...others.map((o) => times(ratio(l?.rps, findCell(r.cells, o, body.id, c)?.rps))),
          times(ratio(l?.armUs, findCell(r.cells, "passthrough", body.id, c)?.armUs)),
        ]);
      }
    }
    out.push(`\nllmroute's req/s ÷ each arm's, and its CPU per request ÷ the pass-through's:\n`);
    out.push(markdownTable(["", ...others.map((o) => `req/s ÷ ${label(o)}`), "CPU ÷ pass-through"], ratioRows));
    const added = r.bodies.map((b) => [b.label, ...arms.filter((a) => a !== "direct").map((a) => ms(addedMs(r.cells, a, b.id))), times(ratio(addedMs(r.cells, "llmroute", b.id), addedMs(r.cells, "passthrough", b.id)))]);
    out.push(`\nAdded p50 at concurrency 1 (arm − direct, ms), and llmroute's ÷ the pass-through's:\n`);
    out.push(markdownTable(["", ...arms.filter((a) => a !== "direct").map(label), "llmroute ÷ pass-through"], added));
  }

  // Details, with the load side's own cost: the client must not be the bottleneck.
  const detail: string[][] = [];
  for (const body of r.bodies) {
    for (const c of r.concurrency) {
      for (const a of arms) {
        const x = findCell(r.cells, a, body.id, c);
        if (!x) continue;
        detail.push([body.label, String(c), label(a), ms(x.p50Ms), ms(x.p99Ms), int(x.rps), a === "direct" ? "—" : int(x.armUs), int(x.engineUs), int(x.clientUs), `${Math.round(x.spread * 100)} %`, String(x.errors)]);
      }
    }
  }
  out.push(`\n<details><summary>Every cell: p50 / p99, req/s, CPU per request of the proxy, the engine and the client, the runs' spread</summary>\n`);
  out.push(markdownTable(["body", "conc.", "arm", "p50 ms", "p99 ms", "req/s", "proxy µs/req", "engine µs/req", "client µs/req", "spread", "errors"], detail));
  out.push(`\nSpread = (max − min) ÷ median of the runs' req/s. The direct arm is what client and engine do alone: any arm's req/s well below it is the arm's own limit, not the load side's.\n\n</details>`);

  if (r.streams) {
    const s = r.streams;
    const d = s.cells.find((c) => c.arm === "direct");
    out.push(`\nStreams: ${s.streams} streamed requests per run, ${s.concurrency} at a time, ${s.chunks} chunks ${s.gapMs} ms apart; gaps between the reads the client sees:\n`);
    out.push(
      markdownTable(
        ["arm", "gap p50 ms", "gap p99 ms", "added p50 ms", "added p99 ms", "reads per stream", "reads holding > 1 chunk"],
        s.cells.map((c) => [
          label(c.arm), ms(c.gapP50Ms), ms(c.gapP99Ms),
          c.arm === "direct" || !d ? "—" : (c.gapP50Ms - d.gapP50Ms).toFixed(2),
          c.arm === "direct" || !d ? "—" : (c.gapP99Ms - d.gapP99Ms).toFixed(2),
          `${c.reads.toFixed(1)} of ${c.expectedReads}`,
          `${(c.coalesced * 100).toFixed(1)} %`,
        ]),
      ),
    );
  }

  if (r.memory) {
    const m = r.memory;
    out.push(`\nMemory: the index filled through the real Router API (route + commit per turn) with ${m.conversation}, over ${m.replicas} replicas; a fresh process per size, RSS after a full GC:\n`);
    out.push(
      markdownTable(
        ["index entries", "conversations", "entries per conversation", "RSS MB", "RSS before fill MB", "index arrays MB", "bytes per entry (arrays)", "RSS growth per entry"],
        m.sizes.map((x) => [
          int(x.entries), int(x.conversations), (x.entries / x.conversations).toFixed(2), x.rssMB.toFixed(0), x.baseRssMB.toFixed(0),
          (x.indexBytes / 1e6).toFixed(1), (x.indexBytes / x.entries).toFixed(0), `${(((x.rssMB - x.baseRssMB) * 1e6) / x.entries).toFixed(0)} B`,
        ]),
      ),
    );
    if (m.capacity) out.push(`\nCapacity reading at ${int(m.sizes.at(-1)?.entries)} entries: median ${m.capacity.medianMs.toFixed(3)} ms, p90 ${m.capacity.p90Ms.toFixed(3)} ms (n = ${m.capacity.samples}, one every 2 s of clock); after a window change (a full walk) ${m.capacity.rebuildMs.toFixed(1)} ms.`);
    if (m.router) out.push(`\n\`llmroute serve\` restored from a state file with ${int(m.router.entries)} entries: RSS ${m.router.rssMB.toFixed(0)} MB; GET /status median ${m.router.statusMs.toFixed(2)} ms (the first, which rebuilds the window: ${m.router.firstStatusMs.toFixed(1)} ms), GET /metrics median ${m.router.metricsMs.toFixed(2)} ms (n = ${m.router.samples}, over HTTP).`);
  }

  if (r.decision) {
    const d = r.decision;
    out.push(`\nOne routing decision without HTTP (parse, chain, lookup on ${d.replicas} replicas, choose, record), median / p90 ms:\n`);
    out.push(markdownTable(["policy", "context tokens", "body KiB", "links", "index entries", "median ms", "p90 ms"], d.rows.map((x) => [x.policy, int(x.tokens), String(x.bodyKiB), String(x.links), int(x.indexEntries), x.medianMs.toFixed(3), x.p90Ms.toFixed(3)])));
  }

  out.push(`\nThe router's performance targets:\n`);
  out.push(markdownTable(["target", "limit", "measured", "verdict"], targetsOf(r).map((t) => [t.text, limitText(t), Number.isFinite(t.measured) ? `${formatNumber(t.measured, t.digits)}${t.unit}` : "—", judge(t).text])));
  return `${out.join("\n")}\n`;
}
