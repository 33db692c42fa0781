/**
 * Prometheus text exposition helpers for the profiles' /metrics (the names, labels and
 * meanings are each profile's: profiles/vllm.ts, sglang.ts, llamacpp.ts).
 *
 * `Exposition` writes as prometheus_client (vLLM's and SGLang's exporter) does: a counter's
 * `_total` name in HELP, TYPE and samples alike (which `promtool check metrics` requires),
 * floats printed like Python's repr. TTFT is observed in real seconds — the clock a client
 * measures.
 */
import type { HistogramView } from "./engine-api.ts";

export class Exposition {
  private readonly lines: string[] = [];

  /** One family: HELP, TYPE, then `[suffixAndLabels, value]` samples. */
  metric(name: string, type: "counter" | "gauge" | "histogram", help: string, samples: [string, number][]): this {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [suffixAndLabels, value] of samples) this.lines.push(`${name}${suffixAndLabels} ${pythonFloat(value)}`);
    return this;
  }

  /** A histogram read at `bounds` out of `h` (every bound must be one of h's buckets). */
  histogram(name: string, help: string, labels: string, h: HistogramView, bounds: readonly number[]): this {
    const samples: [string, number][] = bounds.map((le) => {
      const i = h.buckets.indexOf(le);
      if (i < 0) throw new Error(`sim: histogram ${name} has no bucket ${le}`);
      return [`_bucket{${labels}${labels ? "," : ""}le="${pythonFloat(le)}"}`, h.counts[i]!];
    });
    samples.push([`_bucket{${labels}${labels ? "," : ""}le="+Inf"}`, h.count], [`_count${labels ? `{${labels}}` : ""}`, h.count], [`_sum${labels ? `{${labels}}` : ""}`, h.sum]);
    return this.metric(name, "histogram", help, samples);
  }

  text(): string {
    return `${this.lines.join("\n")}\n`;
  }
}

/** A float as Python's repr writes it (prometheus_client's floatToGoString): 3 → "3.0". */
export function pythonFloat(value: number): string {
  if (Number.isInteger(value)) return Math.abs(value) >= 1e16 ? String(value) : value.toFixed(1);
  return String(value);
}

export function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/**
 * A double as C++'s `std::ostream << double` writes it (%g, 6 significant digits): llama.cpp's
 * /metrics. 0 → "0", 1299.7903 → "1299.79", 228919000 → "2.28919e+08".
 */
export function cppDouble(value: number): string {
  if (value === 0) return "0";
  if (!Number.isFinite(value)) return Number.isNaN(value) ? "nan" : value > 0 ? "inf" : "-inf";
  const exponent = Math.floor(Math.log10(Math.abs(value)));
  if (exponent < -5 || exponent >= 6) {
    const [mantissa, exp] = value.toExponential(5).split("e");
    const m = mantissa!.replace(/\.?0+$/, "");
    const e = Number(exp);
    return `${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  return value.toPrecision(6).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
}
