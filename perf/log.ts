/**
 * What consola costs on the request path. The router writes one log line per request
 * (src/proxy/outcome.ts `publishRecord`); since the log goes through a consola instance, each line
 * pays consola's dispatch (its log object, level check, reporter loop) on top of
 * formatting the JSON. This times, in one process and interleaved sample by sample:
 *
 *   before    the line formatted and handed to the sink the way src/log.ts did before
 *             consola (a record object, JSON.stringify, the sink), copied here as it was;
 *   reporter  the JSON reporter (src/reporters/json.ts) called directly with a log object
 *             built by hand: everything but consola's dispatch;
 *   consola   `createLog({ format: "json" })` as the router builds it.
 *
 * All three write into the same in-memory sink (the batched stderr write behind it is the
 * same for all and was measured on its own when it was added). consola − reporter is
 * consola's own cost; consola − before is what the change costs a request. Many short
 * samples, the arms interleaved in rotating order, ratios taken within each sample: the
 * machine is shared, and a pair measured side by side sees the same load.
 *
 *   npm run perf:log [-- --samples 301 --lines 2000]
 */
import { parseArgs } from "node:util";
import { quantile } from "../src/bench/stats.ts";
import type { ConsolaOptions } from "consola/core";
import { createLog, type Fields } from "../src/log.ts";
import { jsonReporter } from "../src/reporters/json.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { samples: { type: "string", default: "301" }, lines: { type: "string", default: "2000" } },
});
const SAMPLES = Number(values.samples);
const LINES = Number(values.lines);
/** The router's CPU per small request at concurrency 64 in perf/README.md's latest perf:overhead run (µs). */
const ROUTER_US_PER_REQUEST = 264;

// What record() logs for a streamed chat answered from cache.
const fields = (i: number): Fields => ({
  endpoint: "chat",
  model: "qwen3-30b",
  replica: i % 2 ? "gpu1" : "gpu0",
  route: "pin",
  status: 200,
  outcome: undefined,
  error: undefined,
  prompt_tokens: 90_412 + i,
  cached_tokens: 89_984,
  ttft_ms: 1101,
  total_ms: 4210,
});

let sunk = 0;
const sink = (line: string) => void (sunk += line.length);

/** src/log.ts's JSON path before consola, as it was but for the sink. */
function directLog(write: (line: string) => void, now: () => Date = () => new Date()) {
  return {
    info(msg: string, f: Fields = {}) {
      const record: Record<string, unknown> = { time: now().toISOString(), level: "info", msg };
      for (const [k, v] of Object.entries(f)) if (v !== undefined && v !== null) record[k] = v;
      write(JSON.stringify(record));
    },
  };
}
const consolaLog = (write: (line: string) => void, now?: () => Date) => createLog({ format: "json", write, journal: false, isTTY: false, ...(now ? { now } : {}) });

// Same bytes from both, or the comparison means nothing.
const written = { direct: [] as string[], consola: [] as string[] };
const epoch = () => new Date(0);
directLog((l) => written.direct.push(l), epoch).info("request", fields(1));
consolaLog((l) => written.consola.push(l), epoch).info("request", fields(1));
if (written.direct[0] !== written.consola[0]) throw new Error(`the two paths write different lines:\n${written.direct[0]}\n${written.consola[0]}`);

const reporter = jsonReporter((_level, line) => sink(line));
const reporterLog = {
  info(msg: string, f: Fields) {
    reporter.log({ date: new Date(), args: [msg], fields: f, level: 3, type: "info", tag: "" }, { options: {} as ConsolaOptions });
  },
};
const arms = { before: directLog(sink), reporter: reporterLog, consola: consolaLog(sink) };
type Arm = keyof typeof arms;
const NAMES = Object.keys(arms) as Arm[];

const prepared = Array.from({ length: LINES }, (_, i) => fields(i));
const time = (log: { info(msg: string, f: Fields): void }) => {
  const t0 = Bun.nanoseconds();
  for (let i = 0; i < LINES; i++) log.info("request", prepared[i]!);
  return (Bun.nanoseconds() - t0) / LINES;
};

for (let i = 0; i < 20; i++) for (const name of NAMES) time(arms[name]);
const ns: Record<Arm, number[]> = { before: [], reporter: [], consola: [] };
for (let s = 0; s < SAMPLES; s++) {
  for (let k = 0; k < NAMES.length; k++) {
    const name = NAMES[(s + k) % NAMES.length]!;
    ns[name].push(time(arms[name]));
  }
}

const q = (xs: number[], p: number) => quantile(xs, p);
const spread = (xs: number[], digits: number, unit = "") => `median ${q(xs, 0.5).toFixed(digits)}${unit} (p10 ${q(xs, 0.1).toFixed(digits)}, p90 ${q(xs, 0.9).toFixed(digits)})`;
const perSample = (f: (i: number) => number) => ns.before.map((_, i) => f(i));
const ownNs = perSample((i) => ns.consola[i]! - ns.reporter[i]!);
const addedNs = perSample((i) => ns.consola[i]! - ns.before[i]!);
console.log(`the request log line (JSON), n = ${SAMPLES} samples × ${LINES.toLocaleString("en-US")} lines per arm, arms interleaved; ns per line`);
console.log(`  before consola (old src/log.ts)   ${spread(ns.before, 0)}`);
console.log(`  JSON reporter alone               ${spread(ns.reporter, 0)}`);
console.log(`  through consola (createLog)       ${spread(ns.consola, 0)}`);
console.log(`  consola ÷ before, per sample:     ${spread(perSample((i) => ns.consola[i]! / ns.before[i]!), 2, "×")}`);
console.log(`  consola ÷ reporter, per sample:   ${spread(perSample((i) => ns.consola[i]! / ns.reporter[i]!), 2, "×")}`);
console.log(`  consola's own dispatch, per sample: ${spread(ownNs, 0, " ns")}`);
console.log(`  consola − before, per sample:       ${spread(addedNs, 0, " ns")}`);
const pct = (nsPerLine: number) => ((nsPerLine / 1000 / ROUTER_US_PER_REQUEST) * 100).toFixed(2);
console.log(`  = ${pct(q(ownNs, 0.5))} % (dispatch) and ${pct(q(addedNs, 0.5))} % (change) of the router's ${ROUTER_US_PER_REQUEST} µs of CPU per small request (perf/README.md)`);
if (sunk === 0) console.log("(nothing written)");
