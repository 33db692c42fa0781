/**
 * Engine /metrics: a Prometheus text parser, and reading a scrape through the family
 * profiles (src/engines/<family>.ts hold the names and what they mean). Names drift between
 * versions, so every reader reports which names it found and which it did not.
 */
import { detectFamily, PROFILES } from "./index.ts";
import { ENGINE_FAMILIES, type EngineFamily, type Signal } from "./profile.ts";

export type { EngineFamily, Signal };

export interface Sample {
  labels: Record<string, string>;
  value: number;
}

/** Parse Prometheus text exposition: metric name → samples (comments and timestamps ignored). */
export function parsePrometheus(text: string): Map<string, Sample[]> {
  const out = new Map<string, Sample[]>();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const value = parseValue(m[4]!);
    if (value === undefined) continue;
    const labels: Record<string, string> = {};
    if (m[3]) {
      for (const lm of m[3].matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]!] = lm[2]!.replace(/\\(.)/g, "$1");
    }
    let samples = out.get(m[1]!);
    if (!samples) out.set(m[1]!, (samples = []));
    samples.push({ labels, value });
  }
  return out;
}

function parseValue(text: string): number | undefined {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  const v = Number(text);
  return Number.isNaN(v) && text !== "NaN" ? undefined : v;
}

/**
 * Sum over every label set (vLLM data-parallel engines report one series each), each figure
 * once where the family repeats some (`distinct`: EngineProfile.distinct). NaN and ±Inf are
 * missing values: the text format allows them (a client library writes a gauge set to one as
 * such), and a sum or a load computed with one is not a number any more.
 */
export function total(metrics: Map<string, Sample[]>, name: string, distinct?: (name: string, samples: readonly Sample[]) => Sample[]): number | undefined {
  const samples = finiteSamples(metrics, name, distinct);
  return samples.length > 0 ? samples.reduce((sum, s) => sum + s.value, 0) : undefined;
}

function finiteSamples(metrics: Map<string, Sample[]>, name: string, distinct?: (name: string, samples: readonly Sample[]) => Sample[]): Sample[] {
  const samples = metrics.get(name)?.filter((s) => Number.isFinite(s.value)) ?? [];
  return distinct && samples.length > 1 ? distinct(name, samples) : samples;
}

/** The signal catalogue per family, from the profiles (src/engines/<family>.ts). */
export const ENGINE_METRICS: Record<EngineFamily, Partial<Record<Signal, readonly string[]>>> = Object.fromEntries(
  ENGINE_FAMILIES.map((f) => [f, PROFILES[f].metrics]),
) as Record<EngineFamily, Partial<Record<Signal, readonly string[]>>>;

export interface EngineReading {
  family?: EngineFamily;
  /** Signal → value, for the signals whose name was found. */
  values: Partial<Record<Signal, number>>;
  /** Signal → the name that was found. */
  found: Partial<Record<Signal, string>>;
  /** Signals this family should have whose names were not on the endpoint. */
  missing: Signal[];
}

/** Which family the endpoint belongs to (by metric prefix), and its signals (all, or only `wanted`). */
export function readEngine(metrics: Map<string, Sample[]>, wanted?: readonly Signal[]): EngineReading {
  const family = detectFamily({ metrics })?.family;
  const reading: EngineReading = { values: {}, found: {}, missing: [] };
  if (!family) return reading;
  reading.family = family;
  const distinct = PROFILES[family].distinct;
  for (const [signal, candidates] of Object.entries(ENGINE_METRICS[family]) as [Signal, string[]][]) {
    if (wanted && !wanted.includes(signal)) continue;
    const name = candidates.find((n) => metrics.has(n));
    if (name === undefined) {
      reading.missing.push(signal);
      continue;
    }
    reading.found[signal] = name;
    // Found but not a number (NaN, ±Inf): no value, as if the engine had not said.
    const samples = finiteSamples(metrics, name, distinct);
    if (samples.length === 0) continue;
    const sum = samples.reduce((a, s) => a + s.value, 0);
    // Ratios are averaged over data-parallel engines; counts and gauges of requests add up.
    reading.values[signal] = signal === "kv_usage" || signal === "cache_hit_rate" ? sum / samples.length : sum;
  }
  return reading;
}
