/**
 * `llmroute bench`: every policy measured side by side on the same replicas — simulated
 * (`--sim N`, plus the bench-only oracle) or the user's own (`--config router.toml`) —
 * once or `--runs N` times with fresh salts, with the matrix and tables on stdout, progress
 * on stderr, and optional JSON and HTML reports.
 * Returns the exit code: 0, or 1 when any request failed (the tables count them).
 */
import { defineCommand } from "citty";
import { startRedisServer, type RedisServer } from "../cluster/redis-server.ts";
import { loadConfigFile } from "../config.ts";
import { benchArgs, parseBenchArgs, type BenchOptions } from "./args.ts";
import { renderHtml } from "./html.ts";
import { buildMatrix, type Matrix } from "./matrix.ts";
import { poolRuns, renderText, summarizeWorkload, type WorkloadSummary } from "./report.ts";
import { runBench, type BenchResult, type Progress } from "./run.ts";
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
  /** Every run's result; one per --runs. */
  results: BenchResult[];
  /** The runs pooled (the single run when there is one). */
  result: BenchResult;
  /** Summaries of the pooled runs: the detailed tables. */
  summaries: WorkloadSummary[];
  matrix: Matrix;
  text: string;
  errors: number;
}

/** Start the target, run every workload × arm, write the files, print the tables. */
export async function bench(options: BenchOptions, io: BenchIo, target?: Target): Promise<BenchOutput> {
  const own = target === undefined;
  // --routers N: the instances share a Redis; the bench starts one unless given --redis.
  let redis: RedisServer | undefined;
  if (own && options.routers > 1 && !options.redis) redis = await startRedisServer();
  const fleet = options.routers > 1 ? { routers: options.routers, redis: options.redis ?? redis!.url } : undefined;
  try {
    target ??= options.config
      ? await configTarget(await loadConfigFile(options.config), options.model, fleet)
      : await simTarget({ replicas: options.sim, timeScale: options.timeScale, ...(fleet ? { fleet } : {}) });
  } catch (error) {
    await redis?.stop();
    throw error;
  }
  try {
    const where = target.kind === "sim" ? `${target.replicas.length} sim replicas, time scale ${target.timeScale}` : `${target.replicas.length} replicas of ${options.config}`;
    const arms = [...options.policies, ...(options.oracle && target.kind === "sim" ? ["oracle"] : [])];
    const instances = fleet ? `router instances: ${fleet.routers} per arm, sharing ${redis ? "a redis-server started by the bench" : "the Redis at --redis"}; requests spread round-robin` : undefined;
    const results: BenchResult[] = [];
    for (let r = 1; r <= options.runs; r++) {
      // A fresh run id is a fresh salt: no run measures another's warm cache.
      const run = newRunId();
      const which = options.runs > 1 ? ` (${r}/${options.runs})` : "";
      io.progress.line(`bench run ${run}${which}: ${options.workloads.join(", ")} × ${arms.join(", ")} on ${where}`);
      if (instances) io.progress.line(instances);
      results.push(await runBench(target, options, run, io.progress));
    }
    const replicas = target.replicas.map((r) => r.name);
    const perRun = results.map((res) => res.workloads.map((w) => summarizeWorkload(w, replicas)));
    const result = poolRuns(results);
    const summaries = result.workloads.map((w) => summarizeWorkload(w, replicas));
    const matrix = buildMatrix(perRun);
    const text = `${instances ? `${instances}\n\n` : ""}${renderText(result, summaries, matrix)}`;
    if (options.json) {
      const { workloads: _pooled, ...meta } = result;
      const runs = results.map((res, i) => ({ run: res.run, startedAt: res.startedAt, elapsedS: res.elapsedS, workloads: res.workloads, summaries: perRun[i] }));
      await Bun.write(options.json, `${JSON.stringify({ ...meta, matrix, summaries, runs }, jsonNumbers, 2)}\n`);
    }
    if (options.report) await Bun.write(options.report, renderHtml(result, summaries, matrix));
    io.out(text);
    if (options.json && !io.quietFiles) io.progress.line(`JSON: ${options.json}`);
    if (options.report && !io.quietFiles) io.progress.line(`HTML report: ${options.report}`);
    const errors = summaries.reduce((a, w) => a + w.arms.reduce((b, s) => b + s.errors, 0), 0);
    return { results, result, summaries, matrix, text, errors };
  } finally {
    if (own) await target.stop();
    await redis?.stop();
  }
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
