import { describe, expect, it } from "bun:test";
import { parseBenchArgs } from "../../src/bench/args.ts";
import { renderHtml } from "../../src/bench/html.ts";
import { jsonReport } from "../../src/bench/command.ts";
import { buildMatrix, matrixText, stackMatrices, tierOf } from "../../src/bench/matrix.ts";
import { matrixHtml } from "../../src/bench/html.ts";
import {
  correctionCount,
  corrections,
  correctionSummary,
  correctionText,
  describeRun,
  engineBlock,
  headlines,
  hitTable,
  isCapacityWarning,
  routerCapacityWarnings,
  turnPlacement,
  hitDecomposition,
  hitRates,
  poolRuns,
  renderText,
  summarizeArm,
  summarizeWorkload,
  workloadTable,
  type WorkloadSummary,
} from "../../src/bench/report.ts";
import type { ArmResult, BenchResult, Sample } from "../../src/bench/run.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";

const replicas = ["gpu0", "gpu1"];

function turn(group: number, index: number, ttftMs: number, extra: Partial<Sample> = {}): Sample {
  return {
    group,
    index,
    kind: "turn",
    startMs: index * 1_000,
    ttftMs,
    totalMs: ttftMs + 500,
    replica: "gpu0",
    route: index === 1 ? "spread" : "pin",
    status: 200,
    promptTokens: 1_000,
    cachedTokens: index === 1 ? 0 : 900,
    completionTokens: 8,
    ...extra,
  };
}

/** One conversation of `turns` turns with warm TTFT `warm` (turn 1 cold at 10 s). */
function agentArm(arm: ArmResult["arm"], warm: number, turns = 6, extra: (i: number) => Partial<Sample> = () => ({})): ArmResult {
  return { arm, samples: Array.from({ length: turns }, (_, i) => turn(0, i + 1, i === 0 ? 10_000 : warm, extra(i + 1))), bursts: [], wallMs: 20_000 };
}

function burstArm(arm: ArmResult["arm"], walls: number[]): ArmResult {
  const samples: Sample[] = walls.flatMap((wall, g) =>
    Array.from({ length: 4 }, (_, i): Sample => ({ ...turn(g, i, wall / 2), kind: "burst", replica: replicas[i % 2]!, route: "spread", cachedTokens: 0 })),
  );
  return { arm, samples, bursts: walls.map((wallMs, group) => ({ group, wallMs, size: 4 })), wallMs: walls.reduce((a, b) => a + b, 0) };
}

describe("summarizeArm", () => {
  it("warm turns are turns ≥ 2: n = turns − 1 per conversation; turn 1 is reported apart", () => {
    const s = summarizeArm("agent", agentArm("hybrid", 1_100, 6), replicas);
    expect(s.warm).toMatchObject({ n: 5, median: 1_100 });
    expect(s.first).toMatchObject({ n: 1, median: 10_000 });
    expect(s.cachedShare).toBeCloseTo(0.9, 10);
    expect(s.routeShare).toEqual({ spread: 1 / 6, pin: 5 / 6 });
    expect(s.replicaShare).toEqual({ gpu0: 1, gpu1: 0 });
  });

  it("failed requests are counted, and kept out of every figure", () => {
    const s = summarizeArm("agent", agentArm("hybrid", 1_100, 6, (i) => (i === 3 ? { error: "HTTP 503", ttftMs: Number.NaN } : {})), replicas);
    expect(s.requests).toBe(6);
    expect(s.errors).toBe(1);
    expect(s.warm?.n).toBe(4);
    expect(s.warm?.median).toBe(1_100);
  });

  it("bursts: one wall sample per burst, every member in the TTFT sample", () => {
    const s = summarizeArm("burst", burstArm("affinity", [30_000, 31_000, 29_000]), replicas);
    expect(s.burstWall).toMatchObject({ n: 3, median: 30_000, max: 31_000 });
    expect(s.ttft?.n).toBe(12);
    expect(s.replicaShare).toEqual({ gpu0: 0.5, gpu1: 0.5 });
  });

  it("capacity: one summary per family, with its own cached share and replicas", () => {
    const arm: ArmResult = {
      arm: "hybrid",
      samples: [
        ...agentArm("hybrid", 2_000, 3).samples,
        ...agentArm("hybrid", 20_000, 3, () => ({ group: 1, replica: "gpu1", cachedTokens: 200 })).samples.map((s) => ({ ...s, group: 1 })),
      ],
      bursts: [],
      wallMs: 1,
      warnings: ["gpu1: working set ~130000 tokens exceeds kv_tokens 122636: …", "gpu0: down: refused"],
    };
    const s = summarizeArm("capacity", arm, replicas);
    expect(s.perGroup?.map((g) => [g.group, g.warm.n, g.warm.median, g.cachedShare, g.replicas])).toEqual([
      [0, 2, 2_000, 0.9, ["gpu0"]],
      [1, 2, 20_000, 0.2, ["gpu1"]],
    ]);
    expect(s.capacityWarnings).toEqual(["gpu1: working set ~130000 tokens exceeds kv_tokens 122636: …"]);
  });
});

function result(): BenchResult {
  const options = parseBenchArgs({ workload: "agent,burst", policies: "roundrobin,affinity,hybrid" });
  return {
    run: "abc123",
    target: { kind: "sim", replicas: replicas.map((name) => ({ name, kvTokens: 122_636 })), timeScale: 0.05, model: "sim-model" },
    options,
    startedAt: "2026-01-01T00:00:00.000Z",
    elapsedS: 42,
    workloads: [
      { workload: "agent", arms: [agentArm("roundrobin", 2_676), agentArm("affinity", 1_096), agentArm("hybrid", 1_095), agentArm("oracle", 1_000)] },
      { workload: "burst", arms: [burstArm("roundrobin", [18_600]), burstArm("affinity", [30_100]), burstArm("hybrid", [19_970])] },
    ],
  };
}

describe("headlines", () => {
  const r = result();
  const list = headlines(r.workloads.map((w) => summarizeWorkload(w, replicas)));
  const find = (label: string) => list.find((h) => h.label.startsWith(label));

  it("divide the arms' key figures, next to the seed's ratio", () => {
    expect(find("agent warm-turn TTFT p50: roundrobin / hybrid")?.value).toBeCloseTo(2_676 / 1_095, 10);
    expect(find("agent warm-turn TTFT p50: roundrobin / hybrid")?.reference).toBeCloseTo(2_676 / 1_096, 10);
    expect(find("burst wall p50: affinity / hybrid")?.value).toBeCloseTo(30_100 / 19_970, 10);
    expect(find("burst wall p50: affinity / hybrid")?.reference).toBeCloseTo(30.1 / 18.6, 10);
    expect(find("burst wall p50: hybrid / roundrobin")?.value).toBeCloseTo(19_970 / 18_600, 10);
  });

  it("say their sample sizes", () => {
    expect(find("agent warm-turn TTFT p50: roundrobin / hybrid")?.detail).toBe("2,676 ms (n=5) / 1,095 ms (n=5)");
    expect(find("burst wall p50: affinity / hybrid")?.detail).toBe("30.1 s (n=1) / 20.0 s (n=1)");
  });

  it("compare each policy with the oracle where it ran", () => {
    expect(list.filter((h) => h.label.includes("/ oracle")).map((h) => h.label.split(":")[1]!.trim().split(" ")[0])).toEqual(["roundrobin", "affinity", "hybrid"]);
    expect(list.some((h) => h.label.startsWith("burst") && h.label.includes("oracle"))).toBe(false);
  });
});

describe("rendering", () => {
  const r = result();
  const summaries = r.workloads.map((w) => summarizeWorkload(w, replicas));

  it("the text report opens with the matrix, then the tables per workload, the hit-rate decomposition and the headlines", () => {
    const text = renderText([engineBlock([r])], buildMatrix([summaries]));
    const at = (needle: string) => text.indexOf(needle);
    expect(at("÷ the best arm's")).toBeGreaterThan(0);
    expect(at("÷ the best arm's")).toBeLessThan(at("agent —"));
    expect(text).toMatch(/^hit rate \(all requests\)\s+available\s+captured\s+delivered\s+corrections \(false\)\s+template\s+warm pinned\s+turns delivered\s+÷ oracle\s+gpu0 n a\/c\/d corrections \(false\)/m);
    // Every request, turn 1 included; responses without a verdict are not counted as judged.
    expect(text).toMatch(/^roundrobin\s+-\s+-\s+75%\s+none judged\s+-\s+100% of 5\s+75%\s+100%\s+6 -\/-\/75% none judged\s+0 -\/-\/- none judged$/m);
    expect(at("agent —")).toBeLessThan(at("\nheadline  "));
  });

  it("the text report has a table per workload with sample sizes, and says the time is model time", () => {
    const text = renderText([engineBlock([r])], buildMatrix([summaries]));
    expect(text).toContain("time scale 0.05: times are model time");
    expect(text).toMatch(/policy\s+n\s+warm p50 ms/);
    expect(text).toMatch(/roundrobin\s+5\s+2,676/);
    expect(text).toMatch(/affinity\s+1\s+30\.1/);
    expect(text).toContain("headline");
  });

  it("the HTML report is one self-contained file: inline SVG charts, no scripts, no external assets", () => {
    const html = renderHtml([engineBlock([r])], buildMatrix([summaries]));
    expect(html.startsWith("<!doctype html>")).toBe(true);
    expect(html.match(/<svg /g)?.length).toBe(4); // turns + agent CDF + burst bars + burst CDF
    expect(html.indexOf('<table class="matrix">')).toBeLessThan(html.indexOf("<h2>"));
    expect(html).not.toMatch(/<script|<link|<img|@import|url\(/i);
    expect(html.replaceAll('xmlns="http://www.w3.org/2000/svg"', "")).not.toMatch(/https?:\/\//);
    expect(html).toContain("roundrobin (n=5)");
  });

  it("escapes what it did not write itself", () => {
    const evil = { ...r, run: "<script>alert(1)</script>" };
    expect(renderHtml([engineBlock([evil], "<b>engine</b>")], buildMatrix([summaries], "<b>engine</b>"))).not.toMatch(/<script>|<b>/);
  });
});

/** A one-shot over a shared prefix (shared, pressured, llmd). */
function oneShot(i: number, extra: Partial<Sample> = {}): Sample {
  return { ...turn(i, 0, 200), kind: "shared", startMs: i * 100, totalMs: 500, route: "spread", ...extra };
}

describe("hit-rate decomposition: available → captured → delivered", () => {
  it("each figure is Σ tokens ÷ Σ prompt tokens", () => {
    const h = hitRates([
      oneShot(0, { promptTokens: 1_000, availableTokens: 800, capturedTokens: 800, cachedTokens: 784 }),
      oneShot(1, { promptTokens: 3_000, availableTokens: 2_000, capturedTokens: 0, cachedTokens: 0 }),
    ]);
    expect(h).toEqual({ requests: 2, available: 2_800 / 4_000, captured: 800 / 4_000, delivered: 784 / 4_000 });
  });

  it("a router that does not report the index's view leaves available and captured undefined (shown as -)", () => {
    const h = hitRates([oneShot(0, { cachedTokens: 500 })]);
    expect(h.available).toBeUndefined();
    expect(h.captured).toBeUndefined();
    expect(h.delivered).toBeCloseTo(0.5, 10);
  });

  it("where only some requests carry the view, it is over those requests' own prompts", () => {
    const h = hitRates([oneShot(0, { availableTokens: 1_000, cachedTokens: 1_000 }), oneShot(1, { promptTokens: 3_000, cachedTokens: 0 })]);
    expect(h.available).toBe(1);
    expect(h.delivered).toBeCloseTo(1_000 / 4_000, 10);
  });

  it("per replica: the requests each one served, every replica listed", () => {
    const d = hitDecomposition(
      [oneShot(0, { replica: "gpu0", availableTokens: 900, capturedTokens: 900, cachedTokens: 900 }), oneShot(1, { replica: "gpu0", availableTokens: 900, capturedTokens: 0, cachedTokens: 0 })],
      replicas,
    );
    expect(d.perReplica.gpu0).toEqual({ requests: 2, available: 0.9, captured: 0.45, delivered: 0.45 });
    expect(d.perReplica.gpu1).toMatchObject({ requests: 0 });
    expect(d.perReplica.gpu1!.delivered).toBeNaN();
    expect(d).toMatchObject({ requests: 2, available: 0.9, captured: 0.45, delivered: 0.45 });
  });

  it("summarizeArm carries it over every successful request", () => {
    const arm: ArmResult = { arm: "hybrid", samples: [oneShot(0, { cachedTokens: 600 }), oneShot(1, { error: "HTTP 503", cachedTokens: 0 })], bursts: [], wallMs: 1 };
    expect(summarizeArm("shared", arm, replicas).hits).toMatchObject({ requests: 1, delivered: 0.6 });
  });
});

describe("llmd: per rung and over the ladder", () => {
  // Warm-up (rung 0) slow, then rung 1 at 100 ms and rung 2 at 300 ms TTFT; 2 requests each.
  const samples = [
    oneShot(0, { rung: 0, ttftMs: 5_000 }),
    oneShot(1, { rung: 0, ttftMs: 5_000 }),
    oneShot(2, { rung: 1, ttftMs: 100, startMs: 10_000, totalMs: 500, completionTokens: 10 }),
    oneShot(3, { rung: 1, ttftMs: 100, startMs: 11_500, totalMs: 500, completionTokens: 10 }),
    oneShot(4, { rung: 2, ttftMs: 200, startMs: 12_000, totalMs: 1_000 }),
    oneShot(5, { rung: 2, ttftMs: 400, startMs: 12_500, totalMs: 1_000 }),
  ];
  const s = summarizeArm("llmd", { arm: "hybrid", samples, bursts: [], wallMs: 1 }, replicas);

  it("one summary per rung, warm-up apart; throughput is the rung's requests over its first send → last byte", () => {
    expect(s.rungs?.map((r) => [r.rung, r.ttft.n, r.ttft.mean])).toEqual([
      [0, 2, 5_000],
      [1, 2, 100],
      [2, 2, 300],
    ]);
    const rung1 = s.rungs![1]!;
    expect(rung1.throughput).toBeCloseTo(2 / 2, 10); // 10.0 s → 12.0 s
    expect(rung1.outputTps).toBeCloseTo(20 / 2, 10);
  });

  it("the ladder leaves the warm-up out, and its TTFT mean is the headline", () => {
    expect(s.ladder?.ttft).toMatchObject({ n: 4, mean: 200 });
    expect(summarizeWorkload({ workload: "llmd", arms: [{ arm: "hybrid", samples, bursts: [], wallMs: 1 }] }, replicas).arms[0]!.ladder?.ttft.p90).toBeCloseTo(340, 10);
  });
});

/** One workload summary per (workload, arm → figure), as the matrix reads them. */
function summaries(figures: Record<string, Record<string, number>>): WorkloadSummary[] {
  return Object.entries(figures).map(([workload, arms]) => ({
    workload: workload as WorkloadSummary["workload"],
    arms: Object.entries(arms).map(([arm, v]) => {
      const burst = workload === "burst";
      const samples = burst ? [] : Array.from({ length: 3 }, (_, i) => turn(0, i + 1, i === 0 ? 99_999 : v));
      return summarizeArm(workload as WorkloadSummary["workload"], { arm: arm as ArmResult["arm"], samples, bursts: burst ? [{ group: 0, wallMs: v, size: 16 }] : [], wallMs: 1 }, replicas);
    }),
  }));
}

describe("the matrix: each arm ÷ the best arm, per workload", () => {
  const one = buildMatrix([summaries({ agent: { roundrobin: 2_000, hybrid: 1_000, oracle: 1_040 }, burst: { roundrobin: 18_000, hybrid: 30_000 } })]);

  it("a row per workload, a column per arm; the best is 1.00×, the others their ratio to it", () => {
    expect(one.arms).toEqual(["roundrobin", "hybrid", "oracle"]);
    const [agent, burst] = one.rows;
    expect(agent!.cells.map((c) => c.relative)).toEqual([2, 1, 1.04]);
    expect(agent!.best).toEqual({ arm: "hybrid", value: 1_000 });
    expect(agent!.cells.map((c) => c.n)).toEqual([[2], [2], [2]]);
    expect(burst!.cells.map((c) => c.relative)).toEqual([1, 30_000 / 18_000, NaN]);
  });

  it("an arm whose requests failed is measured over the survivors: it is marked, and not the best unless every arm lost some", () => {
    const failing = (arm: ArmResult["arm"], warm: number): ArmResult => ({ ...agentArm(arm, warm), samples: [...agentArm(arm, warm).samples, turn(1, 1, 0, { status: 500, error: "HTTP 500" })] });
    const m = buildMatrix([[{ workload: "capacity", arms: [summarizeArm("capacity", failing("cache-aware", 1_300), replicas), summarizeArm("capacity", agentArm("hybrid", 5_600), replicas)] }]]);
    const [cacheAware, hybrid] = m.rows[0]!.cells;
    expect(cacheAware).toMatchObject({ failed: 1, relative: 1_300 / 5_600 });
    expect(hybrid).toMatchObject({ failed: 0, relative: 1 });
    expect(m.rows[0]!.best.arm).toBe("hybrid");
    const text = matrixText(m);
    expect(text).toContain("0.23× ●†");
    expect(text).toContain("† requests failed in that arm: its figure is over the survivors");
    const allFailed = buildMatrix([[{ workload: "capacity", arms: [summarizeArm("capacity", failing("cache-aware", 1_300), replicas), summarizeArm("capacity", failing("hybrid", 5_600), replicas)] }]]);
    expect(allFailed.rows[0]!.best.arm).toBe("cache-aware");
    expect(matrixText(one)).not.toContain("†");
  });

  it("mixed gets two rows: its agents' turns and its bursts", () => {
    const mixed: WorkloadSummary = { workload: "mixed", arms: [summarizeArm("mixed", { ...agentArm("hybrid", 1_000), bursts: [{ group: 0, wallMs: 8_000, size: 16 }] }, replicas)] };
    expect(buildMatrix([[mixed]]).rows.map((r) => r.what)).toEqual(["agent warm-turn TTFT p50", "burst wall p50"]);
  });

  it("over several runs: the median of the runs' figures, their spread, every run's n", () => {
    const m = buildMatrix([
      summaries({ agent: { roundrobin: 2_000, hybrid: 1_000 } }),
      summaries({ agent: { roundrobin: 2_400, hybrid: 1_100 } }),
      summaries({ agent: { roundrobin: 2_200, hybrid: 900 } }),
    ]);
    expect(m.runs).toBe(3);
    const [rr, hybrid] = m.rows[0]!.cells;
    expect(hybrid).toMatchObject({ value: 1_000, runs: [1_000, 1_100, 900], n: [2, 2, 2], relative: 1 });
    expect(rr).toMatchObject({ value: 2_200, relative: 2.2 });
    expect(matrixText(m)).toContain("2.20× ±9% ○");
    expect(matrixText(m)).toContain("1.00× ±10% ●");
    expect(matrixText(m)).toContain("median of 3 runs");
  });

  it.each([
    [1, "best"],
    [1.05, "best"],
    [1.051, "near"],
    [1.25, "near"],
    [1.3, "far"],
    [NaN, undefined],
  ] as const)("%p× is %p", (relative, tier) => {
    expect(tierOf(relative)).toBe(tier);
  });

  it("text: one line per row with the sample size, marks, and the best figure; an arm that did not run shows -", () => {
    const text = matrixText(one);
    const lines = text.split("\n");
    expect(lines[0]).toContain("÷ the best arm's");
    expect(lines.find((l) => l.startsWith("agent"))).toMatch(/^agent\s+warm-turn TTFT p50\s+2\s+2\.00× ○\s+1\.00× ●\s+1\.04× ●\s+1,000 ms hybrid$/);
    expect(lines.find((l) => l.startsWith("burst"))).toMatch(/1\.00× ●\s+1\.67× ○\s+-\s+18\.0 s roundrobin$/);
  });

  it("HTML: a shaded table, green at the best, red past 2×, each cell's value and n in its title", () => {
    const html = matrixHtml(one);
    expect(html).toContain('<td style="background:#c7e9c0" title="1,000 ms; n=2">1.00×</td>');
    expect(html).toContain('<td style="background:#fdd0a2" title="2,000 ms; n=2">2.00×</td>');
    expect(matrixHtml(buildMatrix([summaries({ agent: { roundrobin: 2_500, hybrid: 1_000 } })]))).toContain("background:#f4a3a3");
  });
});

describe("several runs pooled for the detailed tables", () => {
  const run = (id: string, warm: number): BenchResult => ({ ...result(), run: id, elapsedS: 10, workloads: [{ workload: "agent", arms: [{ ...agentArm("hybrid", warm), sim: { preemptions: 1, evictedBlocks: 5 } }] }] });

  it("samples side by side (n adds up), sim counters summed, run ids kept", () => {
    const pooled = poolRuns([run("a", 1_000), run("b", 3_000)]);
    expect(pooled.run).toBe("a+b");
    expect(pooled.elapsedS).toBe(20);
    const arm = pooled.workloads[0]!.arms[0]!;
    expect(arm.samples.length).toBe(12);
    expect(arm.sim).toEqual({ preemptions: 2, evictedBlocks: 10 });
    expect(summarizeArm("agent", arm, replicas).warm).toMatchObject({ n: 10, median: 2_000 });
  });

  it("throughput adds each run's span: two runs' clocks both start at 0", () => {
    const oneShots = (id: string): BenchResult => ({
      ...result(),
      run: id,
      workloads: [{ workload: "shared", arms: [{ arm: "hybrid", samples: [oneShot(0, { startMs: 0, totalMs: 1_000 }), oneShot(1, { startMs: 1_000, totalMs: 1_000 })], bursts: [], wallMs: 2_000 }] }],
    });
    const single = summarizeArm("shared", oneShots("a").workloads[0]!.arms[0]!, replicas);
    const pooled = summarizeArm("shared", poolRuns([oneShots("a"), oneShots("b")]).workloads[0]!.arms[0]!, replicas);
    expect(single.throughput).toBe(1); // 2 requests in 2 s
    expect(pooled.throughput).toBe(1); // 4 requests in 2 × 2 s, not in 2 s
  });

  it("capacity warnings: one entry per replica, its largest working set over the runs", () => {
    // The router's one-line findings (src/fleet/capacity.ts), as /status lists them.
    const finding = (replica: string, tokens: string, pct: number) => `${replica}: working set ~${tokens} tokens, ${pct}% of kv_tokens 122,636: the engine evicts and re-prefills; the fleet has room, so placement can help`;
    const warnings = [finding("gpu1", "130,000", 106), finding("gpu0", "125,000", 102), finding("gpu1", "140,000", 114)];
    const arm = summarizeArm("shared", { arm: "hybrid", samples: [oneShot(0)], bursts: [], wallMs: 1, warnings }, replicas);
    expect(workloadTable({ workload: "shared", arms: [arm] }, replicas)).toMatch(/yes: gpu1 ~140,000, gpu0 ~125,000\s+0$/m);
  });

  it("KV walls: a replica whose engine turned requests away as full during the arm is a capacity warning, though its finding lapsed", () => {
    const status = (kvFull: number, findings: { replica: string; line: string }[]) => ({
      warnings: [],
      findings: findings.map((f) => ({ id: `${f.replica}/capacity`, kind: "capacity" as const, details: null, ...f })),
      replicas: [
        { name: "gpu0", kv_full: 0 },
        { name: "gpu1", kv_full: kvFull },
      ] as StatusDocument["replicas"],
    });
    // The wall still standing at the end: said once, by its count, not twice.
    const standing = routerCapacityWarnings(status(12, [{ replica: "gpu1", line: "KV full with ~130,000 prompt tokens in flight: requests there take turns" }]));
    expect(standing).toEqual(["gpu1: KV full 12×: requests there took turns"]);
    // Lapsed (no finding at the end): still said; two runs pooled show the larger count.
    const lapsed = routerCapacityWarnings(status(14, []));
    expect(lapsed).toEqual(["gpu1: KV full 14×: requests there took turns"]);
    expect(routerCapacityWarnings(status(0, []))).toEqual([]);
    // The larger count first: the table shows the most of the runs pooled, not the last one.
    const arm = summarizeArm("shared", { arm: "hybrid", samples: [oneShot(0)], bursts: [], wallMs: 1, warnings: [...new Set([...lapsed, ...standing])] }, replicas);
    expect(arm.capacityWarnings).toHaveLength(2);
    expect(workloadTable({ workload: "shared", arms: [arm] }, replicas)).toMatch(/yes: gpu1 KV full ×14\s+0$/m);
  });

  it("one run is itself", () => {
    const r = run("a", 1_000);
    expect(poolRuns([r])).toBe(r);
  });

  it("the title names the runs' arrival seeds when a seeded workload ran, and none when none did", () => {
    const pooled = (workload: string) => {
      const options = parseBenchArgs({ workload, seed: "3", runs: "2" });
      return engineBlock([{ ...run("a", 1_000), options }, { ...run("b", 1_000), options }]);
    };
    expect(describeRun([pooled("agent,llmd")], 2).title).toBe("2 runs a, b, arrivals seeds 3–4, 20 s real");
    expect(describeRun([pooled("agent,burst")], 2).title).toBe("2 runs a, b, 20 s real");
  });

  it("the hit-rate ceiling is the runs' mean: each run draws its own arrivals, so its own ceiling", () => {
    const withCeiling = (id: string, ceiling: number): BenchResult => ({ ...run(id, 1_000), workloads: [{ ...run(id, 1_000).workloads[0]!, workload: "shared", ceiling }] });
    expect(poolRuns([withCeiling("a", 0.8), withCeiling("b", 0.9)]).workloads[0]!.ceiling).toBeCloseTo(0.85, 12);
    // A workload without one (agent) gets none.
    expect(poolRuns([run("a", 1_000), run("b", 1_000)]).workloads[0]!.ceiling).toBeUndefined();
  });
});

describe("index corrections, checked against the sim's evictions", () => {
  // A miss the sim confirms (stop evicted), one it denies (stop new: a template break read as
  // an eviction), a template verdict, hits; one request on gpu1.
  const judged = [
    oneShot(0, { verdict: "miss", simStop: "evicted", simHeld: 1_000 }),
    oneShot(1, { verdict: "miss", simStop: "new" }),
    oneShot(2, { verdict: "template", simStop: "new" }),
    oneShot(3, { verdict: "hit", simStop: "new" }),
    oneShot(4, { verdict: "miss", simStop: "full", replica: "gpu1" }),
    oneShot(5, { simStop: "new" }), // no verdict: nothing to judge (no cached figure in usage)
  ];

  it("counts corrections (miss verdicts), the false ones (the sim evicted nothing), template verdicts, and what was judged", () => {
    const c = corrections(judged, replicas);
    expect(c).toMatchObject({ judged: 5, corrections: 3, false: 2, unchecked: 0, templates: 1 });
    expect(c.perReplica.gpu0).toEqual({ judged: 4, corrections: 2, false: 1, unchecked: 0, templates: 1 });
    expect(c.perReplica.gpu1).toEqual({ judged: 1, corrections: 1, false: 1, unchecked: 0, templates: 0 });
  });

  it("a prompt's head held in a busy llama.cpp slot: false when nothing of it was computed beyond, true when its tail had been computed and dropped (and that tail is lost to eviction)", () => {
    const busyHead = oneShot(0, { verdict: "miss", simStop: "elsewhere", cachedTokens: 0, simHeld: 600, capturedTokens: 900 });
    const tailDropped = oneShot(1, { verdict: "miss", simStop: "elsewhere", cachedTokens: 0, simHeld: 600, simComputed: 900, capturedTokens: 900 });
    // The index expected only the held head: what it dropped, the card still held.
    const headOnly = oneShot(2, { verdict: "miss", simStop: "elsewhere", cachedTokens: 0, simHeld: 600, simComputed: 900, capturedTokens: 600 });
    expect(correctionCount([busyHead, tailDropped, headOnly])).toMatchObject({ corrections: 3, false: 2 });
    expect(correctionCount([tailDropped])).toMatchObject({ corrections: 1, false: 0 });
    const prompt = busyHead.promptTokens + tailDropped.promptTokens;
    expect(hitDecomposition([busyHead, tailDropped], replicas).lost).toEqual({ evicted: 300 / prompt, elsewhere: 1_200 / prompt });
  });

  it("on real replicas (no sim stop) a correction can be neither true nor false", () => {
    expect(correctionCount([oneShot(0, { verdict: "miss" }), oneShot(1, { verdict: "hit" })])).toEqual({ judged: 2, corrections: 1, unchecked: 1, templates: 0 });
    expect(correctionText(correctionCount([oneShot(0, { verdict: "miss" })]))).toBe("1 (?)");
    expect(correctionText(correctionCount([oneShot(0, { verdict: "miss", simStop: "new" }), oneShot(1, { verdict: "miss" })]))).toBe("2 (1+1?)");
    expect(correctionText(correctionCount([oneShot(0)]))).toBe("none judged");
    expect(correctionText(undefined)).toBe("-");
  });

  it("the oracle has no index, so no corrections; a router arm always has them", () => {
    expect(summarizeArm("shared", { arm: "oracle", samples: judged, bursts: [], wallMs: 1 }, replicas).corrections).toBeUndefined();
    expect(summarizeArm("shared", { arm: "hybrid", samples: judged, bursts: [], wallMs: 1 }, replicas).corrections?.false).toBe(2);
  });

  it("the hit table shows them per arm and per replica", () => {
    const w = summarizeWorkload({ workload: "shared", arms: [{ arm: "hybrid", samples: judged, bursts: [], wallMs: 1 }] }, replicas);
    const text = hitTable(w, replicas);
    expect(text.split("\n")[0]).toMatch(/delivered\s+lost evicted\/elsewhere\s+corrections \(false\)\s+template\s+gpu0 n a\/c\/d corrections \(false\)\s+gpu1 n a\/c\/d corrections \(false\)$/);
    // Each request missed 100 of its 1,000 tokens; the sim put one such miss down to an eviction.
    expect(text).toMatch(/^hybrid\s+-\s+-\s+90%\s+2%\/0%\s+3 \(2\)\s+1\s+5 -\/-\/90% 2 \(1\)\s+1 -\/-\/90% 1 \(1\)$/m);
  });

  it("what was lost to evictions and to a prefix held where the engine did not let the request use it (a busy llama.cpp slot), ÷ Σ prompt tokens; only when every response said", () => {
    // What the card held beyond the hit: a busy slot's 800 tokens, 500 evicted (the rest of those prompts was new there).
    const samples = [oneShot(0, { simStop: "elsewhere", cachedTokens: 0, simHeld: 800 }), oneShot(1, { simStop: "evicted", cachedTokens: 400, simHeld: 900 }), oneShot(2, { simStop: "full" }), oneShot(3, { simStop: "new" })];
    expect(hitDecomposition(samples, replicas).lost).toEqual({ evicted: 500 / 4_000, elsewhere: 800 / 4_000 });
    expect(hitDecomposition([...samples, oneShot(4)], replicas).lost).toBeUndefined();
  });

  it("isCapacityWarning keeps the router's capacity findings, whichever KV they were measured against, and kv_tokens contradictions", () => {
    expect(isCapacityWarning("gpu1: working set ~130,000 tokens, 106% of the engine's KV 122,624: the engine evicts and re-prefills")).toBe(true);
    expect(isCapacityWarning("gpu1: working set ~130,000 tokens, 106% of kv_tokens 122,636: the engine evicts")).toBe(true);
    expect(isCapacityWarning("gpu0: 4 conversations active on 2 slots (~9,000 tokens, 120% of the KV its evictions show, ~7,500): llama.cpp keeps one prompt per slot")).toBe(true);
    expect(isCapacityWarning("gpu0: kv_tokens 735,816 is more than the engine's own 122,624 (vllm:cache_config_info); the router assumes 122,624")).toBe(true);
    expect(isCapacityWarning("gpu0: down for 3s: health check: connection refused")).toBe(false);
  });
});

describe("conversations: warm turns kept on the previous turn's replica, delivered against the oracle's", () => {
  const conversation = (replicasByTurn: string[], cached: number[], extra: Partial<Sample> = {}) =>
    replicasByTurn.map((replica, i) => turn(extra.group ?? 0, i + 1, 500, { replica, cachedTokens: cached[i]!, ...extra }));

  it("pinned: turns ≥ 2 on the replica of the turn before, per conversation (and run); a turn whose predecessor failed is not counted", () => {
    const samples = [
      ...conversation(["gpu0", "gpu0", "gpu1", "gpu1"], [0, 900, 0, 900]),
      ...conversation(["gpu1", "gpu1", "gpu1"], [0, 900, 900], { group: 1 }),
      // Run 1 reuses group 0: a conversation of its own.
      ...conversation(["gpu1", "gpu0"], [0, 0], { run: 1 }),
    ];
    const p = turnPlacement(samples.filter((s) => !(s.group === 1 && s.index === 2)));
    // Conversation 0: turn 2 pinned, 3 moved, 4 pinned; conversation 1: turn 3's predecessor is gone; run 1: moved.
    expect(p).toMatchObject({ warm: 4, pinned: 2 / 4 });
    expect(p.delivered).toBeCloseTo((900 + 900 + 900) / 8_000, 10);
  });

  it("÷ oracle is each arm's turns' delivered ÷ the oracle's on the same workload; the table shows it with the pinned share", () => {
    const arm = (name: ArmResult["arm"], replicasByTurn: string[], cached: number[]): ArmResult => ({ arm: name, samples: conversation(replicasByTurn, cached), bursts: [], wallMs: 1 });
    const w = summarizeWorkload(
      {
        workload: "agent",
        arms: [arm("roundrobin", ["gpu0", "gpu1", "gpu0", "gpu1"], [0, 0, 400, 400]), arm("hybrid", ["gpu0", "gpu0", "gpu0", "gpu0"], [0, 760, 760, 760]), arm("oracle", ["gpu1", "gpu1", "gpu1", "gpu1"], [0, 800, 800, 800])],
      },
      replicas,
    );
    expect(w.arms.map((a) => [a.arm, a.turns!.pinned])).toEqual([
      ["roundrobin", 0],
      ["hybrid", 1],
      ["oracle", 1],
    ]);
    // Σ delivered over the same 4,000 prompt tokens: 800, 2,280 and 2,400.
    expect(w.arms.map((a) => a.turns!.vsOracle! * 2_400)).toEqual([expect.closeTo(800, 9), expect.closeTo(2_280, 9), 2_400]);
    const text = hitTable(w, replicas);
    expect(text.split("\n")[0]).toMatch(/template\s+warm pinned\s+turns delivered\s+÷ oracle\s+gpu0/);
    expect(text).toMatch(/^hybrid\s+-\s+-\s+57%\s+none judged\s+-\s+100% of 3\s+57%\s+95%\s+4 /m);
    expect(text).toMatch(/^oracle\s+-\s+-\s+60%\s+-\s+-\s+100% of 3\s+60%\s+100%\s+0 -\/-\/-\s+4 -\/-\/60%$/m);
  });

  it("one-shot workloads have no such columns; no oracle, no ÷ oracle", () => {
    const shared = summarizeWorkload({ workload: "shared", arms: [{ arm: "hybrid", samples: [oneShot(0)], bursts: [], wallMs: 1 }] }, replicas);
    expect(shared.arms[0]!.turns).toBeUndefined();
    expect(hitTable(shared, replicas)).not.toContain("warm pinned");
    const agent = summarizeWorkload({ workload: "agent", arms: [agentArm("hybrid", 1_000)] }, replicas);
    expect(agent.arms[0]!.turns!.vsOracle).toBeUndefined();
  });
});

describe("row blocks: one per engine setup", () => {
  const setup = (engine: string, template: string, kvTokens: string, warm: number, arms: ArmResult[] = []): BenchResult => ({
    ...result(),
    target: { ...result().target, sim: { engine, template, kvTokens, card: "3090" } },
    workloads: [{ workload: "agent", arms: [agentArm("roundrobin", 2 * warm), agentArm("hybrid", warm), ...arms] }],
  });
  const falseMiss = (): ArmResult => ({
    ...agentArm("hybrid", 1_000, 6, (i) => (i === 3 ? { verdict: "miss", simStop: "new" } : i > 1 ? { verdict: "hit", simStop: "new" } : {})),
  });
  const blocks = [engineBlock([setup("vllm", "chatml", "6x", 1_000)], "vllm"), engineBlock([{ ...setup("sglang", "deepseek-r1", "6x", 1_000), workloads: [{ workload: "agent", arms: [agentArm("roundrobin", 2_000), falseMiss()] }] }], "sglang · deepseek-r1")];
  const matrix = stackMatrices(blocks.map((b) => buildMatrix(b.perRun, b.label)));

  it("the matrix stacks the blocks; each row names its engine setup and keeps its n", () => {
    expect(matrix.rows.map((r) => [r.engine, r.workload, r.cells.map((c) => c.n[0])])).toEqual([
      ["vllm", "agent", [5, 5]],
      ["sglang · deepseek-r1", "agent", [5, 5]],
    ]);
    const lines = matrixText(matrix).split("\n");
    expect(lines[2]).toMatch(/^engine\s+workload\s+headline\s+n\s+roundrobin\s+hybrid\s+best$/);
    expect(lines[3]).toMatch(/^vllm\s+agent\s+warm-turn TTFT p50\s+5\s+2\.00× ○\s+1\.00× ●\s+1,000 ms hybrid$/);
    expect(lines[4]).toMatch(/^sglang · deepseek-r1\s+agent\s+warm-turn TTFT p50\s+5/);
    // One block: no engine column (the header line names the engine).
    expect(matrixText(buildMatrix(blocks[0]!.perRun, "vllm")).split("\n")[2]).toMatch(/^workload\s+headline/);
  });

  it("an arm one block lacks is '-' there", () => {
    const stacked = stackMatrices([buildMatrix(blocks[0]!.perRun, "a"), buildMatrix([summaries({ agent: { hybrid: 1_000, oracle: 900 } })], "b")]);
    expect(stacked.arms).toEqual(["roundrobin", "hybrid", "oracle"]);
    expect(stacked.rows[0]!.cells[2]).toMatchObject({ arm: "oracle", n: [] });
    expect(matrixText(stacked).split("\n")[3]).toMatch(/1\.00× ●\s+-\s+1,000 ms hybrid$/);
  });

  it("a false correction is summed under the matrix, loudly, with where it happened", () => {
    const c = correctionSummary(blocks);
    expect(c).toMatchObject({ judged: 5, corrections: 1, false: 1, where: ["sglang · deepseek-r1 agent hybrid 1/1"] });
    expect(c.text).toStartWith("FALSE INDEX CORRECTIONS: 1 of 1 corrections dropped index entries the engine still held");
    const text = renderText(blocks, matrix);
    expect(text.indexOf("FALSE INDEX CORRECTIONS")).toBeLessThan(text.indexOf("━━ vllm ━━"));
    expect(text).toMatch(/^hybrid\s+-\s+-\s+75%\s+1 \(1\)\s+0\s+/m);
  });

  it("no false ones, none judged: the line says which", () => {
    expect(correctionSummary([blocks[0]!]).text).toStartWith("Index corrections: none; no response carried a cached-token figure");
    const honest = engineBlock([{ ...setup("sglang", "chatml", "none", 1_000), workloads: [{ workload: "agent", arms: [agentArm("hybrid", 1_000, 3, (i) => (i > 1 ? { verdict: "miss", simStop: "evicted" } : {}))] }] }]);
    expect(correctionSummary([honest]).text).toBe("Index corrections: 2, none false (each matched an eviction the sim made); 0 template verdicts; 2 responses judged.");
  });

  it("the text report says what kv_tokens the routers were given and which setups ran, then each block's tables under its name", () => {
    const text = renderText(blocks, matrix);
    const first = text.split("\n")[0]!;
    expect(first).toContain("2 engine setups × 1 run");
    expect(first).toContain("fresh for each engine setup (vllm; sglang · deepseek-r1)");
    expect(first).toContain("router.toml kv_tokens: 6× the sims' real KV (735,816)");
    expect(text.indexOf("━━ vllm ━━")).toBeLessThan(text.indexOf("vllm: agent —"));
    expect(text.indexOf("vllm: agent —")).toBeLessThan(text.indexOf("━━ sglang · deepseek-r1 ━━"));
    expect(text).toContain("sglang · deepseek-r1: agent —");
  });

  it.each([
    ["none", "router.toml kv_tokens: none (each router takes the KV the engine publishes, or learns it from evictions)"],
    ["true", "router.toml kv_tokens: the sims' real KV (122,636)"],
    ["6x", "router.toml kv_tokens: 6× the sims' real KV (735,816)"],
  ])("one setup: the header names its engine, template and kv_tokens %s", (kv, words) => {
    const one = [engineBlock([setup("llamacpp", "qwen3-reasoning", kv, 1_000)], "llamacpp · qwen3-reasoning")];
    const { where } = describeRun(one, 1);
    expect(where).toContain("engine profile llamacpp, chat template qwen3-reasoning");
    expect(where).toContain(words);
  });

  it("HTML: an engine column in the matrix, each block's sections under its name, the false corrections in red", () => {
    const html = renderHtml(blocks, matrix);
    expect(html).toContain("<th>engine</th><th>workload</th>");
    expect(html).toContain("<td>sglang · deepseek-r1</td><td>agent</td>");
    expect(html).toContain("<h2>vllm: agent —");
    expect(html).toContain("<h2>sglang · deepseek-r1: Headline ratios</h2>");
    expect(html).toMatch(/<p class="alarm">FALSE INDEX CORRECTIONS: 1 of 1/);
    expect(renderHtml([blocks[0]!], buildMatrix(blocks[0]!.perRun, "vllm"))).toMatch(/<p class="note">Index corrections: none;/);
  });

  it("JSON: per engine setup its name, profile, template, kv_tokens, summaries and runs; the corrections summed", () => {
    const json = jsonReport(blocks, matrix) as { corrections: { false: number; text?: string }; engines: Record<string, unknown>[] };
    expect(json.corrections.false).toBe(1);
    expect(json.corrections.text).toBeUndefined();
    expect(json.engines.map((e) => [e.label, e.engine, e.template, e.kvTokens])).toEqual([
      ["vllm", "vllm", "chatml", "6x"],
      ["sglang · deepseek-r1", "sglang", "deepseek-r1", "6x"],
    ]);
    const runs = json.engines[1]!.runs as { summaries: WorkloadSummary[] }[];
    expect(runs[0]!.summaries[0]!.arms.find((a) => a.arm === "hybrid")!.corrections).toMatchObject({ corrections: 1, false: 1 });
  });
});
