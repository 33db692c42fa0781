/**
 * The bench's timer lag: with sims, sims, routers and client share one event loop, so a timer
 * held back by any of them is noise in every time they report; the report says how much.
 */
import { describe, expect, it } from "bun:test";
import { lagQuantiles, watchTimerLag } from "../../src/bench/lag.ts";
import { renderHtml } from "../../src/bench/html.ts";
import { buildMatrix } from "../../src/bench/matrix.ts";
import { engineBlock, poolRuns, renderText, summarizeWorkload, timerLagText } from "../../src/bench/report.ts";
import { parseBenchArgs } from "../../src/bench/args.ts";
import type { ArmResult, BenchResult } from "../../src/bench/run.ts";

describe("watchTimerLag", () => {
  it("sees the loop held: a timer due during 80 ms of computation fires at least 60 ms late", async () => {
    const watch = watchTimerLag(5);
    const until = performance.now() + 80;
    while (performance.now() < until) {
      // held, as a long prompt's parsing and hashing hold it
    }
    // Timers fire in the order they fall due: the watcher's, overdue, before this one.
    await new Promise((resolve) => setTimeout(resolve, 0));
    const lag = watch.stop();
    expect(lag.n).toBeGreaterThanOrEqual(1);
    expect(lag.maxMs).toBeGreaterThanOrEqual(60);
  });

  it("quantiles as every bench figure reads them (stats.ts: interpolated between ranks)", () => {
    const lags = Array.from({ length: 100 }, (_, i) => 100 - i); // 100 … 1
    const q = lagQuantiles(lags);
    expect(q.p50Ms).toBeCloseTo(50.5, 10);
    expect(q.p99Ms).toBeCloseTo(99.01, 10);
    expect([q.maxMs, q.n]).toEqual([100, 100]);
    expect(lagQuantiles([])).toEqual({ p50Ms: 0, p99Ms: 0, maxMs: 0, n: 0 });
  });
});

describe("the report's timer-lag line", () => {
  const arm = (name: ArmResult["arm"], p50Ms: number, p99Ms: number): ArmResult => ({
    arm: name,
    samples: [],
    bursts: [],
    wallMs: 1_000,
    timerLag: { p50Ms, p99Ms, maxMs: p99Ms * 2, n: 500 },
  });
  const run = (id: string, lags: [number, number][]): BenchResult => ({
    run: id,
    target: { kind: "sim", replicas: [{ name: "gpu0", kvTokens: 1_000 }], timeScale: 0.1, model: "sim-model" },
    options: parseBenchArgs({ workload: "agent", policies: "roundrobin,hybrid" }),
    startedAt: "2026-01-01T00:00:00.000Z",
    elapsedS: 1,
    workloads: [{ workload: "agent", arms: [arm("roundrobin", ...lags[0]!), arm("hybrid", ...lags[1]!)] }],
  });

  it("gives the lag in model time, the median arm's and the worst, under the matrix", () => {
    const r = run("a", [[1, 4], [2, 30]]);
    const line = timerLagText([engineBlock([r])]);
    expect(line).toBe(
      "Timer lag: the sims, routers and client share this process's event loop, magnified 10× by the time scale; its timers fired late by a median 15 ms (p50) and 170 ms (p99) of model time an arm, worst p99 300 ms (agent hybrid). A TTFT difference within that is noise.",
    );
    const text = renderText([engineBlock([r])], buildMatrix([r.workloads.map((w) => summarizeWorkload(w, ["gpu0"]))]));
    expect(text).toContain(line!);
    expect(renderHtml([engineBlock([r])], buildMatrix([r.workloads.map((w) => summarizeWorkload(w, ["gpu0"]))]))).toContain("worst p99 300 ms (agent hybrid)");
  });

  it("several runs keep each arm's worst run", () => {
    const pooled = poolRuns([run("a", [[1, 4], [2, 30]]), run("b", [[1, 9], [2, 3]])]);
    expect(pooled.workloads[0]!.arms.map((a) => a.timerLag?.p99Ms)).toEqual([9, 30]);
  });

  it("is absent on real replicas, whose arms measure none", () => {
    const r = run("a", [[1, 4], [2, 30]]);
    for (const a of r.workloads[0]!.arms) delete a.timerLag;
    expect(timerLagText([engineBlock([r])])).toBeUndefined();
  });
});
