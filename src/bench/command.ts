/**
 * `llmroute bench`: every policy measured side by side on the same replicas — simulated
 * (`--sim N`, plus the bench-only oracle; on each `--engine` profile and `--template` mode)
 * or the user's own (`--config router.toml`) — once or `--runs N` times with fresh salts,
 * with the matrix and tables on stdout, progress on stderr, and optional JSON and HTML reports.
 * Returns the exit code: 0, or 1 when any request failed (the tables count them).
 */
import { defineCommand } from "citty";
import { startRedisServer, type RedisServer } from "../cluster/redis-server.ts";
import { loadConfigFile } from "../config.ts";
import type { EngineProfileName, TemplateName } from "../sim/index.ts";
import { benchArgs, parseBenchArgs, runOptions, type BenchOptions } from "./args.ts";
import { renderHtml } from "./html.ts";
import { buildMatrix, stackMatrices, type Matrix } from "./matrix.ts";
import { correctionSummary, engineBlock, renderText, type EngineBlock } from "./report.ts";
import { armOrder, armsOf, runBench, setupLabel, type BenchResult, type Progress } from "./run.ts";
import { loadTrace, type TracePlan } from "./trace.ts";
import { configTarget, simTarget, type Target } from "./targets.ts";
import { newRunId } from "./workloads.ts";
import { ui } from "../ui.ts";

export interface BenchIo {
  out: (text: string) => void;
  progress: Progress;
  /** Do not announce the JSON/HTML paths (the caller does, e.g. the demo). */
  quietFiles?: boolean;
}

export interface BenchOutput {
  /** One per engine setup (--engine × --template on sims; one block for --config or a given target), in order. */
  blocks: EngineBlock[];
  /** Every block's rows, one block under the other. */
  matrix: Matrix;
  text: string;
  errors: number;
}

/** One engine setup of the sims: a profile and a template (what a row block measures). */
interface Setup {
  engine: EngineProfileName;
  template: TemplateName;
}

/**
 * Start the target(s), run every workload × arm `--runs` times on each, write the files,
 * print the tables. On sims each engine setup (--engine × --template) gets its own fresh
 * sims; a given `target` (tests, the demo) is the one setup.
 */
export async function bench(options: BenchOptions, io: BenchIo, target?: Target): Promise<BenchOutput> {
  // A trace is read and checked whole before anything starts: a bad line stops the bench here.
  const trace = options.workloads.includes("trace") ? await loadTrace(options.trace) : undefined;
  if (trace) io.progress.line(traceLine(trace));
  // --routers N: the instances share a Redis; the bench starts one unless given --redis.
  let redis: RedisServer | undefined;
  if (target === undefined && options.routers > 1 && !options.redis) redis = await startRedisServer();
  const fleet = options.routers > 1 ? { routers: options.routers, redis: options.redis ?? redis!.url } : undefined;
  try {
    const blocks: EngineBlock[] = [];
    if (target) blocks.push(await benchTarget(target, options, io, fleet, redis !== undefined, trace));
    else if (options.config) {
      const own = await configTarget(await loadConfigFile(options.config), options.model, fleet);
      blocks.push(await benchTarget(own, options, io, fleet, redis !== undefined, trace).finally(() => own.stop()));
    } else {
      const setups: Setup[] = options.engines.flatMap((engine) => options.templates.map((template) => ({ engine, template })));
      for (const setup of setups) {
        // Fresh sims for every setup: no engine starts from another's cache or counters.
        const own = await simTarget({ replicas: options.sim, timeScale: options.timeScale, ...setup, card: options.card, kvTokens: options.kvTokens, threads: options.simThreads, ...(fleet ? { fleet } : {}) });
        blocks.push(await benchTarget(own, options, io, fleet, redis !== undefined, trace).finally(() => own.stop()));
      }
    }
    const matrix = stackMatrices(blocks.map((b) => buildMatrix(b.perRun, b.label)));
    const instances = fleet ? instancesLine(fleet, redis !== undefined) : undefined;
    const text = `${instances ? `${instances}\n\n` : ""}${renderText(blocks, matrix)}`;
    if (options.json) await Bun.write(options.json, `${JSON.stringify(jsonReport(blocks, matrix), jsonNumbers, 2)}\n`);
    if (options.report) await Bun.write(options.report, renderHtml(blocks, matrix));
    io.out(text);
    if (options.json && !io.quietFiles) io.progress.line(`JSON: ${options.json}`);
    if (options.report && !io.quietFiles) io.progress.line(`HTML report: ${options.report}`);
    const errors = blocks.reduce((a, b) => a + b.summaries.reduce((c, w) => c + w.arms.reduce((d, s) => d + s.errors, 0), 0), 0);
    return { blocks, matrix, text, errors };
  } finally {
    await redis?.stop();
  }
}

/** What the replay sends: the file, its conversations and the sample, the window. */
export function traceLine(plan: TracePlan): string {
  const s = plan.spec;
  const measured = plan.requests.filter((r) => !r.warmup).length;
  const minutes = (ms: number) => (ms / 60_000).toFixed(ms % 60_000 === 0 ? 0 : 1);
  const end = Number.isFinite(plan.window.endMs) ? minutes(plan.window.endMs) : "end";
  return (
    `trace ${s.file}: ${plan.records.length} requests in ${plan.conversations.count} conversations (preamble ${plan.conversations.preamble} block${plan.conversations.preamble === 1 ? "" : "s"} of ${s.blockTokens} tokens); ` +
    `sample 1/${s.sample} keeps ${plan.keptConversations}; minutes ${minutes(plan.window.startMs)}–${end}` +
    `${s.warmupMinutes > 0 ? ` (warm-up to ${minutes(plan.window.warmupEndMs)})` : ""}: ${plan.requests.length} requests sent, ${measured} measured; ` +
    `speed ${s.speed}×, shape ${s.shape}, max_tokens ≤ ${s.maxOutput}`
  );
}

function instancesLine(fleet: { routers: number }, started: boolean): string {
  return `router instances: ${fleet.routers} per arm, sharing ${started ? "a redis-server started by the bench" : "the Redis at --redis"}; requests spread round-robin`;
}

/** Every run of one target, as one row block. */
async function benchTarget(target: Target, options: BenchOptions, io: BenchIo, fleet: { routers: number } | undefined, redisStarted: boolean, trace?: TracePlan): Promise<EngineBlock> {
  const label = setupLabel(target.sim);
  const where = target.kind === "sim" ? `${target.replicas.length} sim replicas${label ? ` (${label})` : ""}, time scale ${target.timeScale}` : `${target.replicas.length} replicas of ${options.config}`;
  const arms = [...new Set(options.workloads.flatMap((w) => armsOf(w, options, target)))];
  const results: BenchResult[] = [];
  for (let r = 1; r <= options.runs; r++) {
    // A fresh run id is a fresh salt: no run measures another's warm cache.
    const run = newRunId();
    const which = options.runs > 1 ? ` (${r}/${options.runs})` : "";
    io.progress.line(`bench run ${run}${which}: ${options.workloads.join(", ")} × ${armOrder(arms, r).join(", ")} on ${where}`);
    if (fleet) io.progress.line(instancesLine(fleet, redisStarted));
    results.push(await runBench(target, runOptions(options, r), run, io.progress, { runIndex: r, ...(trace ? { trace } : {}) }));
  }
  return engineBlock(results, label);
}

/**
 * The JSON file: the options, the stacked matrix, the corrections summary, and per engine
 * setup its target, pooled summaries and every run (samples and summaries).
 */
export function jsonReport(blocks: readonly EngineBlock[], matrix: Matrix): Record<string, unknown> {
  const first = blocks[0]!.result;
  const { text: _text, ...corrections } = correctionSummary(blocks);
  return {
    options: first.options,
    startedAt: first.startedAt,
    elapsedS: blocks.reduce((a, b) => a + b.result.elapsedS, 0),
    matrix,
    corrections,
    engines: blocks.map((b) => ({
      ...(b.label === undefined ? {} : { label: b.label }),
      ...(b.result.target.sim ?? {}),
      run: b.result.run,
      target: b.result.target,
      summaries: b.summaries,
      runs: b.results.map((res, i) => ({ run: res.run, startedAt: res.startedAt, elapsedS: res.elapsedS, workloads: res.workloads, summaries: b.perRun[i] })),
    })),
  };
}

/**
 * Progress through `ui` (stderr): on a terminal the running arm's status line is rewritten
 * in place and each finished arm stays as a line; elsewhere only the lines that stay.
 */
export const uiProgress: Progress = {
  status: (text) => ui.info({ args: [text], transient: true }),
  line: (text) => ui.info(text),
};

/** NaN and Infinity are not JSON: write null. */
function jsonNumbers(_key: string, value: unknown): unknown {
  return typeof value === "number" && !Number.isFinite(value) ? null : value;
}

export default defineCommand({
  meta: {
    name: "bench",
    description: "Measure the routing policies side by side on simulated replicas (--sim N) or your own (--config router.toml)",
  },
  args: benchArgs,
  async run({ args }) {
    const options = parseBenchArgs(args);
    const { errors } = await bench(options, { out: (t) => console.log(t), progress: uiProgress });
    if (errors > 0) {
      ui.error(`${errors} request(s) failed; see the errors column`);
      return 1;
    }
    return 0;
  },
});
