import { describe, expect, it } from "bun:test";
import { parseBenchArgs } from "../../src/bench/args.ts";
import { renderHtml } from "../../src/bench/html.ts";
import { headlines, renderText, summarizeArm, summarizeWorkload } from "../../src/bench/report.ts";
import type { ArmResult, BenchResult, Sample } from "../../src/bench/run.ts";

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
    expect(find("agent warm-turn TTFT p50: roundrobin / hybrid")?.seed).toBeCloseTo(2_676 / 1_096, 10);
    expect(find("burst wall p50: affinity / hybrid")?.value).toBeCloseTo(30_100 / 19_970, 10);
    expect(find("burst wall p50: affinity / hybrid")?.seed).toBeCloseTo(30.1 / 18.6, 10);
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

  it("the text report has a table per workload with sample sizes, and says the time is model time", () => {
    const text = renderText(r, summaries);
    expect(text).toContain("time scale 0.05: times are model time");
    expect(text).toMatch(/policy\s+n\s+warm p50 ms/);
    expect(text).toMatch(/roundrobin\s+5\s+2,676/);
    expect(text).toMatch(/affinity\s+1\s+30\.1/);
    expect(text).toContain("headline");
  });

  it("the HTML report is one self-contained file: inline SVG charts, no scripts, no external assets", () => {
    const html = renderHtml(r, summaries);
    expect(html.startsWith("<!doctype html>")).toBe(true);
    expect(html.match(/<svg /g)?.length).toBe(4); // turns + agent CDF + burst bars + burst CDF
    expect(html).not.toMatch(/<script|<link|<img|@import|url\(/i);
    expect(html.replaceAll('xmlns="http://www.w3.org/2000/svg"', "")).not.toMatch(/https?:\/\//);
    expect(html).toContain("roundrobin (n=5)");
  });

  it("escapes what it did not write itself", () => {
    const evil = { ...r, run: "<script>alert(1)</script>" };
    expect(renderHtml(evil, summaries)).not.toContain("<script>");
  });
});
