/**
 * The Prometheus text exposition rules that `promtool check metrics` enforces, as a
 * checker tests can run without promtool: it parses every line and returns the problems
 * (empty = clean). The rules: valid names and label syntax; one HELP and one TYPE per
 * family, before its samples, samples of a family together; a counter family is named
 * `…_total` in HELP, TYPE and samples (the lint vLLM's exporter passes); a histogram has
 * `_bucket` samples with ascending `le` ending in +Inf, cumulative counts, and `_count`
 * equal to the +Inf bucket; no series twice; values are numbers.
 *
 * Metric names may contain ":" — promtool warns about that, vLLM's names have it, and the
 * sim keeps vLLM's names on purpose — so colons are not a problem here.
 */

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
  line: number;
}

interface Family {
  name: string;
  help?: string;
  type?: string;
  samples: Sample[];
}

export function checkExposition(text: string): string[] {
  const problems: string[] = [];
  const families = new Map<string, Family>();
  const closed = new Set<string>();
  let current: Family | undefined;
  const family = (name: string): Family => {
    let f = families.get(name);
    if (!f) families.set(name, (f = { name, samples: [] }));
    return f;
  };
  const enter = (f: Family, line: number) => {
    if (current === f) return;
    if (current) closed.add(current.name);
    if (closed.has(f.name)) problems.push(`line ${line}: ${f.name}: its lines are not together`);
    current = f;
  };

  if (text !== "" && !text.endsWith("\n")) problems.push("the exposition must end with a newline");
  text.split("\n").forEach((raw, i) => {
    const n = i + 1;
    if (raw === "") return;
    const meta = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(raw);
    if (meta) {
      const [, kind, name, rest = ""] = meta as unknown as [string, "HELP" | "TYPE", string, string?];
      if (!METRIC_NAME.test(name)) problems.push(`line ${n}: bad metric name ${JSON.stringify(name)}`);
      const f = family(name);
      enter(f, n);
      if (f.samples.length > 0) problems.push(`line ${n}: ${kind} for ${name} after its samples`);
      if (kind === "HELP") {
        if (f.help !== undefined) problems.push(`line ${n}: second HELP for ${name}`);
        f.help = rest;
      } else {
        if (f.type !== undefined) problems.push(`line ${n}: second TYPE for ${name}`);
        if (!TYPES.has(rest)) problems.push(`line ${n}: unknown type ${JSON.stringify(rest)} for ${name}`);
        f.type = rest;
      }
      return;
    }
    if (raw.startsWith("#")) return; // other comments are allowed
    const sample = parseSample(raw, n, problems);
    if (!sample) return;
    const owner = [...families.values()].find((f) => sampleBelongs(f, sample.name)) ?? family(sample.name);
    enter(owner, n);
    owner.samples.push(sample);
  });

  for (const f of families.values()) {
    if (f.help === undefined || f.help.trim() === "") problems.push(`${f.name}: no help text`);
    if (f.type === undefined) problems.push(`${f.name}: no TYPE line`);
    if (f.type === "counter") {
      if (!f.name.endsWith("_total")) problems.push(`${f.name}: counter metrics should have "_total" suffix`);
      for (const s of f.samples) if (s.name !== f.name) problems.push(`line ${s.line}: counter sample ${s.name} is not named ${f.name}`);
    }
    if (f.type === "gauge") for (const s of f.samples) if (s.name !== f.name) problems.push(`line ${s.line}: gauge sample ${s.name} is not named ${f.name}`);
    if (f.type === "histogram") problems.push(...checkHistogram(f));
    const seen = new Set<string>();
    for (const s of f.samples) {
      const id = `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`;
      if (seen.has(id)) problems.push(`line ${s.line}: ${s.name} series given twice`);
      seen.add(id);
    }
  }
  return problems;
}

function sampleBelongs(f: Family, name: string): boolean {
  if (name === f.name) return true;
  if (f.type === "histogram") return [`${f.name}_bucket`, `${f.name}_sum`, `${f.name}_count`].includes(name);
  if (f.type === "summary") return [`${f.name}_sum`, `${f.name}_count`].includes(name);
  return false;
}

function checkHistogram(f: Family): string[] {
  const problems: string[] = [];
  const series = new Map<string, Sample[]>();
  const key = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).filter(([k]) => k !== "le").sort());
  for (const s of f.samples) series.set(key(s.labels), [...(series.get(key(s.labels)) ?? []), s]);
  for (const samples of series.values()) {
    const buckets = samples.filter((s) => s.name === `${f.name}_bucket`);
    const count = samples.find((s) => s.name === `${f.name}_count`);
    if (!samples.some((s) => s.name === `${f.name}_sum`)) problems.push(`${f.name}: a series without _sum`);
    if (buckets.some((b) => b.labels.le === undefined)) problems.push(`${f.name}: a bucket without le`);
    const les = buckets.map((b) => Number(b.labels.le === "+Inf" ? Infinity : b.labels.le));
    if (les.at(-1) !== Infinity) problems.push(`${f.name}: no le="+Inf" bucket last`);
    for (let i = 1; i < buckets.length; i++) {
      if (!(les[i]! > les[i - 1]!)) problems.push(`line ${buckets[i]!.line}: ${f.name} buckets out of order`);
      if (buckets[i]!.value < buckets[i - 1]!.value) problems.push(`line ${buckets[i]!.line}: ${f.name} bucket counts are not cumulative`);
    }
    if (!count) problems.push(`${f.name}: a series without _count`);
    else if (buckets.length > 0 && buckets.at(-1)!.value !== count.value) problems.push(`${f.name}: _count differs from the +Inf bucket`);
  }
  return problems;
}

function parseSample(raw: string, n: number, problems: string[]): Sample | undefined {
  const head = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(raw);
  if (!head) {
    problems.push(`line ${n}: not a sample: ${raw}`);
    return undefined;
  }
  const name = head[1]!;
  let i = name.length;
  const labels: Record<string, string> = {};
  if (raw[i] === "{") {
    i++;
    while (raw[i] !== "}") {
      const label = /^([^=]*)="/.exec(raw.slice(i));
      if (!label) {
        problems.push(`line ${n}: bad label syntax: ${raw}`);
        return undefined;
      }
      const labelName = label[1]!;
      if (!LABEL_NAME.test(labelName) || labelName.startsWith("__")) problems.push(`line ${n}: bad label name ${JSON.stringify(labelName)}`);
      if (labelName in labels) problems.push(`line ${n}: label ${labelName} twice`);
      i += label[0].length;
      let value = "";
      for (;;) {
        const c = raw[i];
        if (c === undefined) {
          problems.push(`line ${n}: unterminated label value`);
          return undefined;
        }
        if (c === '"') break;
        if (c === "\\") {
          const e = raw[i + 1];
          if (e !== "\\" && e !== '"' && e !== "n") problems.push(`line ${n}: bad escape \\${e} in a label value`);
          value += e === "n" ? "\n" : e;
          i += 2;
          continue;
        }
        value += c;
        i++;
      }
      labels[labelName] = value;
      i++;
      if (raw[i] === ",") i++;
      else if (raw[i] !== "}") {
        problems.push(`line ${n}: expected , or } after a label: ${raw}`);
        return undefined;
      }
    }
    i++;
  }
  const rest = raw.slice(i);
  const m = /^ (\S+)(?: (-?\d+))?$/.exec(rest);
  if (!m) {
    problems.push(`line ${n}: expected " value [timestamp]" after the name: ${raw}`);
    return undefined;
  }
  const text = m[1]!;
  const value = text === "+Inf" ? Infinity : text === "-Inf" ? -Infinity : text === "NaN" ? Number.NaN : Number(text);
  if (text !== "NaN" && Number.isNaN(value)) problems.push(`line ${n}: value ${JSON.stringify(text)} is not a number`);
  return { name, labels, value, line: n };
}
