/**
 * A small Prometheus text-format registry: labelled counters and histograms updated as
 * requests finish, and gauges read from live state at scrape time.
 */

type Labels = Record<string, string>;

interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  render(out: string[]): void;
}

export class Registry {
  private readonly families: Family[] = [];

  counter(name: string, help: string): Counter {
    const c = new Counter(name, help);
    this.families.push(c);
    return c;
  }

  histogram(name: string, help: string, buckets: number[]): Histogram {
    const h = new Histogram(name, help, buckets);
    this.families.push(h);
    return h;
  }

  /** A gauge (or a counter kept elsewhere) whose samples are read from live state when scraped. */
  gauge(name: string, help: string, collect: () => Iterable<[Labels, number]>, type: "gauge" | "counter" = "gauge"): void {
    this.families.push({
      name,
      help,
      type,
      render(out) {
        for (const [labels, value] of collect()) out.push(`${name}${fmtLabels(labels)} ${fmtValue(value)}`);
      },
    });
  }

  render(): string {
    const out: string[] = [];
    for (const f of this.families) {
      out.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`);
      f.render(out);
    }
    return `${out.join("\n")}\n`;
  }
}

export class Counter implements Family {
  readonly type = "counter";
  private readonly values = new Map<string, { labels: Labels; value: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  inc(labels: Labels, by = 1): void {
    const k = labelKey(labels);
    const cur = this.values.get(k);
    if (cur) cur.value += by;
    else this.values.set(k, { labels, value: by });
  }

  get(labels: Labels): number {
    return this.values.get(labelKey(labels))?.value ?? 0;
  }

  render(out: string[]): void {
    for (const { labels, value } of this.values.values()) out.push(`${this.name}${fmtLabels(labels)} ${fmtValue(value)}`);
  }
}

export class Histogram implements Family {
  readonly type = "histogram";
  private readonly series = new Map<string, { labels: Labels; counts: number[]; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: number[],
  ) {}

  observe(labels: Labels, value: number): void {
    const k = labelKey(labels);
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    this.buckets.forEach((le, i) => {
      if (value <= le) s!.counts[i]!++;
    });
    s.sum += value;
    s.count++;
  }

  render(out: string[]): void {
    for (const s of this.series.values()) {
      this.buckets.forEach((le, i) => out.push(`${this.name}_bucket${fmtLabels({ ...s.labels, le: String(le) })} ${s.counts[i]}`));
      out.push(`${this.name}_bucket${fmtLabels({ ...s.labels, le: "+Inf" })} ${s.count}`);
      out.push(`${this.name}_sum${fmtLabels(s.labels)} ${fmtValue(s.sum)}`);
      out.push(`${this.name}_count${fmtLabels(s.labels)} ${s.count}`);
    }
  }
}

/**
 * A series' key: its labels in the order given. Every caller names a family's labels in one
 * fixed order (object literals in telemetry.ts), so no sort is needed on the request path.
 */
function labelKey(labels: Labels): string {
  let key = "";
  for (const k in labels) key += `${k}=${labels[k]}\u0000`;
  return key;
}

function fmtLabels(labels: Labels): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
}

function fmtValue(v: number): string {
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}
