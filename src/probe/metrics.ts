/**
 * What the probe reads from an engine's /metrics (pure), on top of the shared catalogue in
 * src/engines/metrics.ts — the same names the router's load scraping uses, so a name the
 * probe reports as missing is one the router would miss too.
 *
 * Names drift between versions (vLLM renamed its KV and prefix-cache metrics in 0.9), so
 * every known name is checked against the live endpoint and reported found / missing per
 * engine family. Prefix-cache counters are read as a *delta* across each request: the
 * lifetime ratio averages every prompt the engine ever saw and is not a verdict.
 */
import { detectFamily as detectEngine, PROFILES, profileOf } from "../engines/index.ts";
import { ENGINE_METRICS, parsePrometheus, readEngine, type EngineFamily, type Sample, type Signal } from "../engines/metrics.ts";

export type Scrape = Map<string, Sample[]>;

export const FAMILY_LABELS: Record<EngineFamily, string> = Object.fromEntries(Object.values(PROFILES).map((p) => [p.family, p.label])) as Record<EngineFamily, string>;

/** Prometheus text → samples; undefined when the text holds no sample (an HTML page, a JSON 404). */
export function parseScrape(text: string): Scrape | undefined {
  const scrape = parsePrometheus(text);
  return scrape.size === 0 ? undefined : scrape;
}

export interface SignalPresence {
  signal: Signal;
  /** The name found on the endpoint, if any (the newest spelling wins). */
  found?: string;
  /** Every known spelling, newest first. */
  known: string[];
}

export interface FamilyPresence {
  family: EngineFamily;
  label: string;
  found: string[];
  missing: string[];
  signals: SignalPresence[];
}

/**
 * Found / missing names per family over every scrape taken: some series (histograms with
 * labels) only appear after the first request, so the probe scrapes before and after.
 * Older spellings (vLLM < 0.9) count as missing when the newer one is found — that is the
 * point: it tells which spelling a dashboard must use.
 */
export function presence(scrapes: readonly Scrape[]): FamilyPresence[] {
  const has = (name: string) => scrapes.some((s) => s.has(name));
  return (Object.keys(ENGINE_METRICS) as EngineFamily[]).map((family) => {
    const found: string[] = [];
    const missing: string[] = [];
    const signals: SignalPresence[] = [];
    for (const [signal, known] of Object.entries(ENGINE_METRICS[family]) as [Signal, string[]][]) {
      const hit = known.find(has);
      signals.push({ signal, known, ...(hit === undefined ? {} : { found: hit }) });
      for (const name of known) (has(name) ? found : missing).push(name);
    }
    return { family, label: FAMILY_LABELS[family], found, missing, signals };
  });
}

/** The family with the most names found, if any. */
export function detectFamily(families: readonly FamilyPresence[]): EngineFamily | undefined {
  let best: FamilyPresence | undefined;
  for (const f of families) if (f.found.length > 0 && (!best || f.found.length > best.found.length)) best = f;
  return best?.family;
}

export interface Load {
  running: number;
  waiting: number;
  family: EngineFamily;
}

/** Requests running and waiting, from whichever engine's names the scrape has. */
export function loadOf(scrape: Scrape): Load | undefined {
  const reading = readEngine(scrape);
  if (!reading.family) return undefined;
  const { running, waiting } = reading.values;
  if (running === undefined && waiting === undefined) return undefined;
  return { running: running ?? 0, waiting: waiting ?? 0, family: reading.family };
}

export interface PrefixCounters {
  /** Tokens found in the prefix cache. */
  hits: number;
  /** Tokens looked up. */
  queries: number;
  /** The counter names read (hits first). */
  names: string[];
}

/**
 * The engine's prefix-cache counters (tokens), whichever family's: vLLM's hits and queries,
 * SGLang's cached_tokens_total over prompt_tokens_total, llama.cpp's
 * prompt_tokens_cached_total over it plus prompt_tokens_total (each profile says how).
 */
export function prefixCounters(scrape: Scrape): PrefixCounters | undefined {
  const family = detectEngine({ metrics: scrape })?.family;
  return family ? profileOf(family).cacheCounters(scrape) : undefined;
}

/** after − before; undefined when either lacks the counters or they went backwards (a restart). */
export function counterDelta(before: Scrape | undefined, after: Scrape | undefined): PrefixCounters | undefined {
  const a = before && prefixCounters(before);
  const b = after && prefixCounters(after);
  if (!a || !b || a.names[0] !== b.names[0]) return undefined;
  const hits = b.hits - a.hits;
  const queries = b.queries - a.queries;
  if (hits < 0 || queries < 0) return undefined;
  return { hits, queries, names: b.names };
}

/** SGLang's cache-hit gauge: the hit ratio of its LAST prefill batch (collector.py), not a lifetime or window figure. */
export function sglangHitRate(scrape: Scrape): number | undefined {
  const samples = scrape.get(ENGINE_METRICS.sglang.cache_hit_rate?.[0] ?? "");
  if (!samples || samples.length === 0) return undefined;
  return samples.reduce((a, s) => a + s.value, 0) / samples.length;
}
