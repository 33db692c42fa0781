/**
 * The trace workload end to end on two in-process sims, replaying the small generated trace
 * (test/fixtures/trace/small.jsonl, 64-token blocks) at a tiny time scale. It asserts what
 * holds by construction — the report's columns, n equal to the measured requests, shares
 * that sum to one, a hit rate no engine could exceed, the arms' order over two runs — never
 * timings, which at this scale are timer noise.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { join } from "node:path";
import { parseBenchArgs } from "../../src/bench/args.ts";
import { bench, type BenchOutput } from "../../src/bench/command.ts";
import type { ArmSummary } from "../../src/bench/report.ts";
import type { Sample } from "../../src/bench/run.ts";
import { simTarget, type Target } from "../../src/bench/targets.ts";
import { loadTrace, TRACE_DEFAULTS, type TracePlan } from "../../src/bench/trace.ts";
import { runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

const SMALL = join(import.meta.dir, "../fixtures/trace/small.jsonl");
const window = { "trace-block-tokens": "64", "trace-start": "1", "trace-warmup-minutes": "1", "trace-minutes": "4" };

let target: Target;
beforeAll(async () => {
  target = await simTarget({ replicas: 2, timeScale: 0.002 });
});
afterAll(async () => {
  await target.stop();
});

describe("a trace replayed on two sims, chat-shaped, two runs", () => {
  let out: BenchOutput;
  let plan: TracePlan;
  const lines: string[] = [];
  let json: { engines: { summaries: { workload: string; yardstick: unknown; arms: ArmSummary[] }[] }[]; options: { trace: { minutes: number } } };
  beforeAll(async () => {
    const dir = await tempDir("llmroute-trace-e2e-");
    plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64, startMinutes: 1, warmupMinutes: 1, minutes: 4 });
    out = await bench(
      parseBenchArgs({ trace: SMALL, ...window, policies: "roundrobin,hybrid", runs: "2", json: join(dir, "bench.json") }),
      { out: () => {}, progress: { status: () => {}, line: (l) => lines.push(l) } },
      target,
    );
    json = await Bun.file(join(dir, "bench.json")).json();
  });

  const arms = () => out.blocks[0]!.summaries[0]!.arms;
  const samples = (run: number, arm: string): Sample[] => out.blocks[0]!.results[run]!.workloads[0]!.arms.find((a) => a.arm === arm)!.samples;
  const measured = () => plan.requests.filter((r) => !r.warmup).length;

  it("every request answered; the warm-up sent but not measured; n is the measured requests of both runs", () => {
    expect(out.errors).toBe(0);
    expect(arms().map((a) => a.arm)).toEqual(["roundrobin", "hybrid", "oracle", "pooled"]);
    for (const a of arms()) {
      expect(a.trace!.n).toBe(2 * measured());
      expect(a.trace!.warmup).toBe(2 * (plan.requests.length - measured()));
      expect(a.trace!.ttft.n).toBe(a.trace!.n);
    }
    expect(samples(0, "hybrid").map((s) => s.line)).toEqual(plan.requests.map((r) => plan.records[r.record]!.line));
  });

  it("every request carries its card's own time to first token, never more than the client's, which adds the hops", () => {
    for (const run of [0, 1]) {
      for (const arm of ["roundrobin", "hybrid", "oracle", "pooled"]) {
        for (const s of samples(run, arm)) {
          expect(s.simSequence).toBeInteger();
          expect(s.engineTtftMs).toBeGreaterThan(0);
          expect(s.engineTtftMs!).toBeLessThanOrEqual(s.ttftMs);
        }
      }
    }
    for (const a of arms()) {
      expect(a.trace!.engineTtft!.n).toBe(a.trace!.n);
      expect(a.trace!.engineTtft!.p50).toBeLessThanOrEqual(a.trace!.ttft.p50);
    }
  });

  it("the runs took the arms forward, then backward", () => {
    const order = (run: number) => lines.filter((l) => l.startsWith("vllm-details · trace · ")).slice(run * 4, run * 4 + 4).map((l) => l.split(" · ")[2]!.split(":")[0]);
    expect(order(0)).toEqual(["roundrobin", "hybrid", "oracle", "pooled"]);
    expect(order(1)).toEqual(["pooled", "oracle", "hybrid", "roundrobin"]);
    expect(lines.filter((l) => l.startsWith("bench run")).map((l) => l.split(": trace × ")[1]!.split(" on ")[0])).toEqual(["roundrobin, hybrid, oracle, pooled", "pooled, oracle, hybrid, roundrobin"]);
  });

  it("each card's share of requests and of prompt tokens sums to one; route reasons sum to n, over the arm and per card", () => {
    for (const a of arms()) {
      const cards = Object.values(a.trace!.cards);
      expect(cards.reduce((x, c) => x + c.requestShare, 0)).toBeCloseTo(1, 10);
      expect(cards.reduce((x, c) => x + c.tokenShare, 0)).toBeCloseTo(1, 10);
      expect(a.trace!.maxRequestShare).toBe(Math.max(...cards.map((c) => c.requestShare)));
      expect(Object.values(a.trace!.routes).reduce((x, n) => x + n, 0)).toBe(a.trace!.n);
      for (const c of cards) expect(Object.values(c.routes).reduce((x, n) => x + n, 0)).toBe(c.requests);
      // Evictions come from each sim's own counter.
      for (const c of cards) expect(c.evictedBlocks).toBeGreaterThanOrEqual(0);
    }
    expect(Object.keys(arms().find((a) => a.arm === "hybrid")!.trace!.cards)).toEqual(["gpu0", "gpu1"]);
    expect(Object.keys(arms().find((a) => a.arm === "pooled")!.trace!.cards)).toEqual(["pooled"]);
  });

  it("no arm delivers more than the infinite cache allows, plus the salt line and template markers no trace block holds", () => {
    const y = out.blocks[0]!.summaries[0]!.yardstick!;
    expect(y.requests).toBe(measured());
    expect(y.pooled!.kvTokens).toBe(2 * target.replicas[0]!.kvTokens);
    expect(y.pooled!.hitRate).toBeLessThanOrEqual(y.ceiling.hitRate);
    for (const a of arms()) {
      const t = a.trace!;
      expect(t.hitRate).toBeGreaterThan(0);
      const mine = [0, 1].flatMap((run) => samples(run, a.arm).filter((s) => !s.warmup));
      const enginePrompt = mine.reduce((x, s) => x + s.promptTokens, 0);
      const overhead = enginePrompt - 2 * y.promptTokens;
      expect(overhead).toBeGreaterThan(0);
      expect(t.hitRate).toBeLessThanOrEqual((2 * y.ceiling.hitTokens + overhead) / enginePrompt);
      expect(t.vsCeiling).toBeCloseTo(t.hitRate / y.ceiling.hitRate, 12);
      expect(t.vsPooled).toBeCloseTo(t.hitRate / y.pooled!.hitRate, 12);
    }
  });

  it("the text report has the trace's tables; the JSON the same figures", () => {
    expect(out.text).toContain("yardsticks over the same");
    for (const column of ["ttft p50 ms", "p90 ms", "p99 ms", "engine p50 ms", "hit rate", "÷ ceiling", "÷ pooled", "most requests · most tokens", "routes"]) expect(out.text).toContain(column);
    expect(out.text).toMatch(/per card +card +requests +share +prompt tokens +share +hit rate +evicted blocks +routes/);
    expect(out.text).toMatch(/trace +TTFT p50 /);
    expect(out.text).toMatch(/trace +TTFT p90 /);
    expect(out.text).toMatch(/trace +engine TTFT p50 /);
    expect(out.text).toMatch(/trace +engine TTFT p90 /);
    const trace = json.engines[0]!.summaries[0]!;
    expect(trace.workload).toBe("trace");
    expect(trace.yardstick).toEqual(out.blocks[0]!.summaries[0]!.yardstick as never);
    expect(trace.arms.map((a) => a.trace!.n)).toEqual(arms().map((a) => a.trace!.n));
  });
});

describe("flat-shaped, one run", () => {
  it("one user message a request; the same n and columns, in the HTML report too", async () => {
    const report = join(await tempDir("llmroute-trace-flat-"), "report.html");
    const out = await bench(
      parseBenchArgs({ trace: SMALL, ...window, "trace-shape": "flat", policies: "hybrid", oracle: false, pooled: false, report }),
      { out: () => {}, progress: { status: () => {}, line: () => {} } },
      target,
    );
    expect(out.errors).toBe(0);
    expect(out.blocks[0]!.summaries[0]!.arms.map((a) => a.arm)).toEqual(["hybrid"]);
    expect(out.text).toContain("÷ pooled");
    const html = await Bun.file(report).text();
    expect(html).toContain("trace — a production trace replayed");
    // The TTFT distribution of the measured requests only.
    expect(html).toContain(`hybrid (n=${out.blocks[0]!.summaries[0]!.arms[0]!.trace!.n})`);
  });
});

describe("sims on threads of their own (--sim-threads)", () => {
  it("the same replay answered in full, the pooled arm's sim on a thread too, and the timer-lag line says the sims ran apart", async () => {
    const threaded = await simTarget({ replicas: 2, timeScale: 0.002, threads: true });
    try {
      const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64, startMinutes: 1, warmupMinutes: 1, minutes: 4 });
      const out = await bench(
        parseBenchArgs({ trace: SMALL, ...window, policies: "hybrid", oracle: false, "sim-threads": true }),
        { out: () => {}, progress: { status: () => {}, line: () => {} } },
        threaded,
      );
      expect(out.errors).toBe(0);
      const arms = out.blocks[0]!.summaries[0]!.arms;
      expect(arms.map((a) => a.arm)).toEqual(["hybrid", "pooled"]);
      for (const a of arms) expect(a.trace!.n).toBe(plan.requests.filter((r) => !r.warmup).length);
      expect(arms[0]!.trace!.hitRate).toBeGreaterThan(0);
      expect(out.text).toMatch(/^Timer lag: the routers and client \(the sims on threads of their own\) share this process's event loop, magnified 500× by the time scale;/m);
    } finally {
      await threaded.stop();
    }
  });
});

describe("a bad trace stops the bench before it starts anything", () => {
  it("exit 2, the file, line and field on stderr, no run begun", async () => {
    const file = join(await tempDir("llmroute-trace-bad-"), "bad.jsonl");
    await Bun.write(file, `${JSON.stringify({ timestamp: 0, input_length: 100, output_length: 5, hash_ids: [0, 1] })}\n${JSON.stringify({ timestamp: 5, input_length: -3, output_length: 5, hash_ids: [] })}\n`);
    const { code, stdout, stderr } = await runCli(["bench", "--trace", file, "--trace-block-tokens", "64"]);
    expect(code).toBe(2);
    expect(stderr).toContain(`${file}:2: field input_length: -3 is negative; must be the prompt's tokens, a whole number >= 1`);
    expect(stderr).not.toContain("bench run");
    expect(stdout).toBe("");
  });
});
