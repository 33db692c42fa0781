/**
 * `llmroute demo` (`npm run demo`): the first thing a new user runs. Two simulated
 * 3090-class replicas, time-scaled so the whole demo takes about a minute on two cores;
 * the reference measurements' agent loop and cold burst, and the two mixed, each with
 * roundrobin, affinity and hybrid; then the comparison and the path of the HTML report. Needs nothing but `npm ci`.
 * While it runs, the live dashboard of whichever router is running is at one address.
 */
import { createServer, type AddressInfo } from "node:net";
import { resolve } from "node:path";
import { defineCommand } from "citty";
import { parseBenchArgs } from "./args.ts";
import { bench, uiProgress } from "./command.ts";
import { fmt, type Matrix, type MatrixRow } from "./matrix.ts";
import { simTarget } from "./targets.ts";
import { ui } from "../ui.ts";

/**
 * About a minute of real time for the demo's model time; a smaller scale would finish
 * sooner but let the fixed real costs of each request (timers, HTTP) weigh more once divided
 * by the scale (docs/bench-design.md#the-demo).
 */
export const DEMO_TIME_SCALE = 0.08;

/** The demo's report, in the directory it was run from (npm run demo: the project's), where a user finds it. */
export const DEMO_REPORT = "llmroute-report-demo.html";

export default defineCommand({
  meta: { name: "demo", description: "Two simulated replicas, three policies, an agent loop, bursts and both at once: about a minute" },
  args: {
    "time-scale": { type: "string", description: `Sim speed (default ${DEMO_TIME_SCALE}; smaller is faster and noisier)` },
    report: { type: "string", description: `Where to write the HTML report (default: ./${DEMO_REPORT}, replaced by the next demo)` },
    json: { type: "string", description: "Also write every sample as JSON" },
  },
  async run({ args }) {
    const report = resolve(args.report || DEMO_REPORT);
    const options = parseBenchArgs({
      sim: "2",
      "time-scale": args["time-scale"] || String(DEMO_TIME_SCALE),
      policies: "roundrobin,affinity,hybrid",
      oracle: false,
      workload: "agent,burst,mixed",
      report,
      ...(args.json ? { json: args.json } : {}),
    });
    // A box on a terminal; the two lines as they are elsewhere.
    ui.box(
      "llmroute demo: 2 simulated RTX 3090-class replicas (122,636 KV tokens, ~4,000 prefill tokens/s each),\n" +
        "the same workloads through roundrobin, affinity and hybrid; times below are the modelled card's.",
    );
    // Each policy gets a fresh router; they take turns on one admin address, so the page
    // stays open across the arms and shows whichever policy is running.
    const admin = `127.0.0.1:${await freePort()}`;
    const target = await simTarget({ replicas: options.sim, timeScale: options.timeScale, adminListen: admin });
    ui.info(`Watch it live: http://${admin}/dashboard (each policy's router in turn)`);
    const { errors, matrix } = await bench(options, { out: (t) => console.log(t), progress: uiProgress, quietFiles: true }, target).finally(() => target.stop());
    const reading = demoReading(matrix);
    console.log(
      [
        ...(reading.length > 0 ? ["", ...reading] : []),
        "",
        ...demoClosing(report, options.json, cliCommand(Bun.main)),
      ].join("\n"),
    );
    return errors > 0 ? 1 : 0;
  },
});

/**
 * How the user runs llmroute as this process was run: the built executable is `llmroute`;
 * from source (`npm run demo`, `npx bun src/cli.ts …`) no `llmroute` is on PATH after
 * `npm ci`, and `npx bun src/cli.ts` from the project's directory is what works.
 */
export function cliCommand(main: string): string {
  return /[\\/]src[\\/]cli\.ts$/.test(main) ? "npx bun src/cli.ts" : "llmroute";
}

/** Where the report is, and what to run next, in the words that work where the demo ran. */
export function demoClosing(report: string, json: string | undefined, command: string): string[] {
  return [
    `HTML report (charts): ${report} — open it in a browser${json ? `\nJSON (every sample): ${json}` : ""}`,
    `Next: \`${command} bench --sim 2\` adds the shared-document (shared, pressured, llmd) and capacity workloads and the oracle;`,
    `\`${command} bench --config router.toml\` measures your own replicas.`,
  ];
}

/** A gap this large is worth explaining; hybrid within the matrix's "best" band (5 %) is at the best. */
const EXPLAIN_RATIO = 1.2;
const AT_BEST = 1.05;

/**
 * The demo's closing lines, from this run's matrix: what each arm's figures say, and an
 * explanation only where the numbers show the effect it explains (a time-scaled run on a
 * busy machine can show anything). Empty when nothing was measured.
 */
export function demoReading(matrix: Matrix): string[] {
  const rows = matrix.rows.filter((r) => Number.isFinite(r.best.value));
  if (rows.length === 0) return [];
  const cell = (r: MatrixRow, arm: string) => r.cells.find((c) => c.arm === arm && Number.isFinite(c.value));
  const x = (ratio: number) => `${ratio.toFixed(2)}×`;
  /** `arm` against the faster of `others`, when both were measured. */
  const against = (r: MatrixRow | undefined, arm: string, others: string[]) => {
    const mine = r && cell(r, arm);
    const best = r && others.map((o) => cell(r, o)).filter((c) => c !== undefined).sort((a, b) => a.value - b.value)[0];
    return mine && best ? { ratio: mine.value / best.value, to: best, unit: r.unit } : undefined;
  };
  const lines = ["Read it like this (this run's medians):"];
  const agent = rows.find((r) => r.workload === "agent");
  const burst = rows.find((r) => r.workload === "burst");
  const rr = against(agent, "roundrobin", ["affinity", "hybrid"]);
  if (rr && rr.ratio >= EXPLAIN_RATIO) {
    lines.push(`  agent: roundrobin's warm turns took ${x(rr.ratio)} ${rr.to.arm}'s (${fmt(rr.to.value, rr.unit)}): each re-prefilled what the other card computed.`);
  }
  const aff = against(burst, "affinity", ["roundrobin", "hybrid"]);
  if (aff && aff.ratio >= EXPLAIN_RATIO) {
    lines.push(`  burst: affinity's bursts took ${x(aff.ratio)} ${aff.to.arm}'s (${fmt(aff.to.value, aff.unit)}): it put each whole burst on one card.`);
  }
  const within: string[] = [];
  const behind: string[] = [];
  for (const r of rows) {
    const hybrid = cell(r, "hybrid");
    if (!hybrid) continue;
    const label = `${r.workload} ${r.what}`;
    if (hybrid.relative <= AT_BEST) within.push(label);
    else behind.push(`${label} (${x(hybrid.relative)} ${r.best.arm}'s ${fmt(r.best.value, r.unit)})`);
  }
  if (behind.length === 0 && within.length > 0) {
    const both = agent && burst && within.includes(`agent ${agent.what}`) && within.includes(`burst ${burst.what}`);
    lines.push(`  hybrid was within 5 % of the best arm on every figure${both ? ": it kept the agent loop warm and the burst spread." : "."}`);
  } else if (behind.length > 0) {
    lines.push(`  hybrid was ${within.length > 0 ? `within 5 % of the best arm on ${list(within)}, and ` : ""}behind on ${list(behind)}.`);
  }
  return lines.length > 1 ? lines : [];
}

/** "a", "a and b", "a, b and c". */
function list(items: string[]): string {
  return items.length <= 1 ? (items[0] ?? "") : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`;
}

/** A port nothing listens on right now (the OS picks it; the routers reuse it in turn). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}
