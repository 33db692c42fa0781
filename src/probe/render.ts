/**
 * Reports → human text (pure). Figures first, the verdict last, the sample size always.
 */
import type { FamilyPresence } from "./metrics.ts";
import type { EngineReport, ViaReport } from "./run.ts";
import { int, pct, table } from "../ops/table.ts";
import { times as ratio, TTFT_RATIO_MAX, type Verdict } from "./verdict.ts";

export const secs = (ms: number) =>
  !Number.isFinite(ms) ? "-" : ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;

/** The shared table renderer, as lines; the first row is the header. */
const lines = (rows: string[][], right: number[]) => table(rows[0]!, rows.slice(1), { right }).split("\n");

const SOURCE: Record<EngineReport["tokens"]["source"], string> = {
  tokenize: "counted by the engine's /tokenize",
  usage: "usage.prompt_tokens of the cold request",
  estimate: "estimated at 4 chars/token: the engine reported no count",
};

export function renderEngine(r: EngineReport): string {
  const out: string[] = [];
  out.push(`llmroute probe  ${r.target.label === r.target.url ? r.target.url : `${r.target.label} ${r.target.url}`}  model ${r.model}`);
  out.push(`prompt   ${int(r.tokens.prefix)} tokens shared (${SOURCE[r.tokens.source]}); salted first line; warm = same prefix, new tail`);
  const load = r.idle.load;
  out.push(
    `idle     ${
      load
        ? `${load.running + load.waiting === 0 ? "yes" : "NO"} (running ${load.running}, waiting ${load.waiting} before the probe)`
        : "not checked: no running/waiting metric"
    }`,
  );
  for (const note of r.notes) out.push(`note     ${note}`);
  out.push("");

  const rows: string[][] = [["pair", "cold TTFT", "warm TTFT", "warm/cold", "cached on warm", "prefix-cache hits on warm"]];
  r.pairs.forEach((p, i) => {
    rows.push([
      String(i + 1),
      secs(p.cold.ttftMs),
      secs(p.warm.ttftMs),
      ratio(p.ratio),
      p.warm.cachedTokens === undefined
        ? "not reported"
        : `${int(p.warm.cachedTokens)} / ${int(p.prefixTokens)} (${pct(p.cachedFraction ?? 0)})${p.warm.cachedSource === "timings" ? " timings.cache_n" : ""}`,
      p.warmCounters ? `${int(p.warmCounters.hits)} of ${int(p.warmCounters.queries)} tokens` : "-",
    ]);
  });
  const s = r.summary;
  rows.push(["median", secs(s.coldTtftMs), secs(s.warmTtftMs), ratio(s.ratio), s.cachedFraction === undefined ? "-" : pct(s.cachedFraction), `n=${s.n}`]);
  out.push(...lines(rows, [1, 2, 3]));
  out.push("");

  const m = r.metrics;
  if (!m.available) {
    out.push(
      `metrics  ${m.path}: not available (absent, or not Prometheus text) — no names to verify and no counters; SGLang needs --enable-metrics, llama.cpp --metrics (Ollama has none)`,
    );
  } else {
    out.push(`metrics  ${m.path}: known names checked against the live endpoint (${m.scrapes} scrapes)`);
    for (const f of m.families ?? []) if (f.signals.length > 0) out.push(...renderFamily(f));
    if (m.delta) {
      out.push(
        `  prefix cache during the probe: ${int(m.delta.hits)} hits of ${int(m.delta.queries)} queried tokens (${m.delta.names.join(", ")} deltas; the lifetime ratio is not a verdict)`,
      );
    }
    if (m.sglangHitRate) {
      const { before, after } = m.sglangHitRate;
      out.push(`  sglang:cache_hit_rate ${before === undefined ? "-" : pct(before)} -> ${after === undefined ? "-" : pct(after)} (a gauge of the last prefill batch only, not this probe's truth)`);
    }
    if (!m.delta && !m.sglangHitRate) {
      out.push("  no prefix-cache counters on this endpoint: cached tokens per request are the only engine-side truth");
    }
  }
  out.push("");
  out.push(...renderVerdict(r.verdict));
  return out.join("\n");
}

function renderFamily(f: FamilyPresence): string[] {
  const label = `  ${f.label.padEnd(10)}`;
  if (f.found.length === 0) return [`${label}none of ${f.found.length + f.missing.length} known names`];
  const lines = [`${label}found ${f.found.length} of ${f.found.length + f.missing.length}: ${f.found.join(", ")}`];
  const absent = f.signals.filter((s) => s.found === undefined);
  const otherSpellings = f.signals.flatMap((s) => (s.found === undefined ? [] : s.known.filter((n) => n !== s.found)));
  if (absent.length > 0) lines.push(`${" ".repeat(label.length)}missing: ${absent.map((s) => `${s.signal} (${s.known.join(" / ")})`).join(", ")}`);
  if (otherSpellings.length > 0) lines.push(`${" ".repeat(label.length)}other spellings not exposed: ${otherSpellings.join(", ")}`);
  return lines;
}

export function renderVerdict(v: Verdict): string[] {
  const out = [`verdict  ${v.code}: ${v.summary}`];
  const evidence = v.causes.filter((c) => c.evidence);
  const other = v.causes.filter((c) => !c.evidence);
  if (evidence.length > 0) {
    out.push("likely causes (from this run):");
    for (const c of evidence) out.push(`  - ${c.text}`);
  }
  if (other.length > 0) {
    out.push(evidence.length > 0 ? "other common causes:" : "likely causes:");
    for (const c of other) out.push(`  - ${c.text}`);
  }
  for (const n of v.notes) out.push(`note     ${n}`);
  return out;
}

export function renderVia(r: ViaReport): string {
  const out: string[] = [];
  out.push(`llmroute probe --via ${r.target.url}  model ${r.model}`);
  for (const note of r.notes) out.push(`note     ${note}`);
  r.conversations.forEach((c, i) => {
    const f = r.figures[i]!;
    out.push("");
    out.push(
      c.label === "long"
        ? `long shared prefix: ~${int(c.prefixTokens)} tokens, ${c.turns.length} turns (a continuation: earlier turns and replies resent)`
        : `short shared prefix: ${c.prefixBytes} bytes, ${c.turns.length} turns (under 1 KiB: a "first N KiB" identity would never pin it)`,
    );
    const rows = [["turn", "replica", "route", "TTFT", "cached"]];
    c.turns.forEach((t, k) =>
      rows.push([String(k + 1), t.replica ?? "?", t.route ?? "?", secs(t.ttftMs), t.cachedTokens === undefined ? "-" : int(t.cachedTokens)]),
    );
    out.push(...lines(rows, [3, 4]).map((l) => `  ${l}`));
    const pinned = f.pinned ? `pinned: yes, every turn on ${f.replicas[0]}` : `pinned: NO (${f.replicas.join(" -> ")})`;
    const warm =
      c.label === "long"
        ? `; warm turns ${ratio(f.ratio)} turn 1 (median, needs <= ${TTFT_RATIO_MAX}x${f.cachedFraction === undefined ? "" : `; ${pct(f.cachedFraction)} cached`})`
        : "";
    const cold = c.label === "long" && f.coldTurns.length > 0 ? `; cold again on turn ${f.coldTurns.join(", ")}` : "";
    const failedOver = f.routes.flatMap((route, k) => (route.split(",").includes("failover") ? [k + 1] : []));
    const failover = failedOver.length > 0 ? `; failed over on turn ${failedOver.join(", ")}` : "";
    out.push(`  ${pinned}${failover}${warm}${cold}`);
  });
  out.push("");
  out.push(...renderVerdict(r.verdict));
  return out.join("\n");
}
