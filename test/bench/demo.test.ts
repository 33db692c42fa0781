/**
 * The demo's closing reading says what this run's numbers say: it
 * claimed "hybrid keeps the agent loop warm and the burst spread" whatever they were.
 */
import { describe, expect, it } from "bun:test";
import { cliCommand, DEMO_REPORT, demoClosing, demoReading } from "../../src/bench/demo.ts";
import type { Matrix, MatrixRow } from "../../src/bench/matrix.ts";
import type { WorkloadName } from "../../src/bench/args.ts";

const ARMS = ["roundrobin", "affinity", "hybrid"];

/** A matrix row from each arm's figure (NaN: not measured). */
function row(workload: WorkloadName, what: string, unit: "ms" | "s", values: Record<string, number>): MatrixRow {
  const finite = ARMS.filter((a) => Number.isFinite(values[a]));
  const best = finite.reduce((b, a) => (values[a]! < values[b]! ? a : b), finite[0]!);
  return {
    workload,
    what,
    unit,
    best: { arm: best, value: values[best]! },
    cells: ARMS.map((arm) => ({ arm, value: values[arm]!, relative: values[arm]! / values[best]!, runs: [values[arm]!], n: [15], failed: 0 })),
  };
}

function matrix(agent: Record<string, number>, burst: Record<string, number>, mixed?: [Record<string, number>, Record<string, number>]): Matrix {
  return {
    runs: 1,
    arms: ARMS,
    rows: [
      row("agent", "warm-turn TTFT p50", "ms", agent),
      row("burst", "wall p50", "s", burst),
      ...(mixed ? [row("mixed", "agent warm-turn TTFT p50", "ms", mixed[0]), row("mixed", "burst wall p50", "s", mixed[1])] : []),
    ],
  };
}

describe("the demo's reading", () => {
  it("the seed's picture: each claim with its ratio", () => {
    const m = matrix({ roundrobin: 2676, affinity: 1096, hybrid: 1095 }, { roundrobin: 18_600, affinity: 30_100, hybrid: 19_000 });
    expect(demoReading(m)).toEqual([
      "Read it like this (this run's medians):",
      "  agent: roundrobin's warm turns took 2.44× hybrid's (1,095 ms): each re-prefilled what the other card computed.",
      "  burst: affinity's bursts took 1.62× roundrobin's (18.6 s): it put each whole burst on one card.",
      "  hybrid was within 5 % of the best arm on every figure: it kept the agent loop warm and the burst spread.",
    ]);
  });

  it("hybrid behind on a figure: says where and by how much, and claims nothing it did not do", () => {
    const m = matrix({ roundrobin: 2676, affinity: 1096, hybrid: 1700 }, { roundrobin: 18_600, affinity: 30_100, hybrid: 18_900 }, [
      { roundrobin: 3000, affinity: 1200, hybrid: 1190 },
      { roundrobin: 20_000, affinity: 31_000, hybrid: 26_000 },
    ]);
    const text = demoReading(m).join("\n");
    expect(text).not.toContain("kept the agent loop warm and the burst spread");
    expect(text).toContain("  hybrid was within 5 % of the best arm on burst wall p50 and mixed agent warm-turn TTFT p50, and behind on agent warm-turn TTFT p50 (1.55× affinity's 1,096 ms) and mixed burst wall p50 (1.30× roundrobin's 20.0 s).");
  });

  it("no gap worth a word: no explanation is invented", () => {
    const m = matrix({ roundrobin: 1100, affinity: 1096, hybrid: 1095 }, { roundrobin: 18_600, affinity: 19_000, hybrid: 18_700 });
    const text = demoReading(m).join("\n");
    expect(text).not.toContain("re-prefilled");
    expect(text).not.toContain("one card");
    expect(text).toContain("hybrid was within 5 % of the best arm on every figure");
  });

  it("nothing measured: nothing to read", () => {
    expect(demoReading({ runs: 1, arms: ARMS, rows: [{ workload: "agent", what: "warm-turn TTFT p50", unit: "ms", best: { arm: "-", value: NaN }, cells: ARMS.map((arm) => ({ arm, value: NaN, relative: NaN, runs: [NaN], n: [0], failed: 0 })) }] })).toEqual([]);
  });
});

describe("the demo's closing lines", () => {
  it("from source (npm run demo), the next command is one that works after npm ci: npx bun src/cli.ts", () => {
    const lines = demoClosing("/home/u/llmroute/llmroute-report-demo.html", undefined, cliCommand("/home/u/llmroute/src/cli.ts"));
    expect(lines).toEqual([
      "HTML report (charts): /home/u/llmroute/llmroute-report-demo.html — open it in a browser",
      "Next: `npx bun src/cli.ts bench --sim 2` adds the shared-document (shared, pressured, llmd) and capacity workloads and the oracle;",
      "`npx bun src/cli.ts bench --config router.toml` measures your own replicas.",
    ]);
  });

  it("the built executable names itself llmroute", () => {
    expect(cliCommand("/$bunfs/root/llmroute")).toBe("llmroute");
    expect(demoClosing("/r.html", "/s.json", "llmroute")).toEqual([
      "HTML report (charts): /r.html — open it in a browser\nJSON (every sample): /s.json",
      "Next: `llmroute bench --sim 2` adds the shared-document (shared, pressured, llmd) and capacity workloads and the oracle;",
      "`llmroute bench --config router.toml` measures your own replicas.",
    ]);
  });

  it("the report goes to the directory the demo runs in, under a name .gitignore keeps out of the repository", async () => {
    expect(DEMO_REPORT).toBe("llmroute-report-demo.html");
    const ignored = (await Bun.file(new URL("../../.gitignore", import.meta.url)).text()).split("\n").map((l) => new RegExp(`^${l.trim().replace(/[.]/g, "\\.").replace(/\*/g, ".*")}$`));
    expect(ignored.some((re) => re.test(DEMO_REPORT))).toBe(true);
  });
});
