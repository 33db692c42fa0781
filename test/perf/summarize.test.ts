import { describe, expect, it } from "bun:test";
import { findCell, rotate, spread, streamGaps, summarizeCells, summarizeStreamCells, summarizeStreams, type Sample } from "../../perf/lib/summarize.ts";

const sample = (s: Partial<Sample>): Sample => ({
  arm: "llmroute", body: "small", concurrency: 64, run: 0, requests: 1000, rps: 1000, p50Ms: 1, p99Ms: 5, errors: 0, armUs: 200, engineUs: 40, clientUs: 20, ...s,
});

describe("summarizeCells", () => {
  it("one cell per arm × body × concurrency, each figure the median of its runs", () => {
    const cells = summarizeCells([
      sample({ run: 0, rps: 5000, p50Ms: 10, armUs: 210 }),
      sample({ run: 1, rps: 5400, p50Ms: 12, armUs: 190 }),
      sample({ run: 2, rps: 4000, p50Ms: 30, armUs: 205, errors: 2 }),
      sample({ arm: "direct", run: 0, rps: 13000, armUs: undefined }),
      sample({ concurrency: 1, run: 0, rps: 2000 }),
    ]);
    expect(cells).toHaveLength(3);
    const c = findCell(cells, "llmroute", "small", 64)!;
    expect(c).toMatchObject({ runs: 3, rps: 5000, p50Ms: 12, armUs: 205, errors: 2 });
    expect(c.spread).toBeCloseTo((5400 - 4000) / 5000, 9);
  });

  it("direct has no proxy CPU figure at all, not a zero", () => {
    const [c] = summarizeCells([sample({ arm: "direct", armUs: undefined })]);
    expect(c!.armUs).toBeUndefined();
    expect("armUs" in c!).toBe(false);
  });
});

describe("spread", () => {
  it("(max − min) ÷ median", () => {
    expect(spread([90, 100, 110])).toBeCloseTo(0.2, 9);
    expect(spread([])).toBeNaN();
  });
});

describe("streams", () => {
  it("gaps are taken within each stream, never across streams or before the first byte", () => {
    expect(streamGaps([{ readsAt: [100, 105, 111], events: [1, 1, 2] }, { readsAt: [0, 5], events: [1, 2] }])).toEqual([5, 6, 5]);
  });

  it("counts reads that merged token chunks; the engine's last write (usage + [DONE]) is two events by design", () => {
    const s = summarizeStreams("llmroute", 0, [{ readsAt: [0, 5, 10, 20], events: [1, 1, 2, 2] }, { readsAt: [0, 5, 10, 15, 20], events: [1, 1, 1, 1, 2] }], 5);
    expect(s.reads).toBe(4.5);
    expect(s.expectedReads).toBe(5);
    expect(s.coalesced).toBeCloseTo(1 / 9, 9); // one merged read of nine
    expect(s.gapP50Ms).toBe(5);
  });

  it("a stream cell is the median over runs", () => {
    const runs = [3, 1, 2].map((p99, run) => ({ arm: "nginx", run, gapP50Ms: 5, gapP99Ms: p99, reads: 41, expectedReads: 41, coalesced: 0 }));
    expect(summarizeStreamCells(runs)).toEqual([{ arm: "nginx", runs: 3, gapP50Ms: 5, gapP99Ms: 2, reads: 41, expectedReads: 41, coalesced: 0 }]);
  });
});

describe("rotate", () => {
  it("moves each arm one place per run, so no arm always runs first", () => {
    expect(rotate(["a", "b", "c"], 0)).toEqual(["a", "b", "c"]);
    expect(rotate(["a", "b", "c"], 1)).toEqual(["b", "c", "a"]);
    expect(rotate(["a", "b", "c"], 4)).toEqual(["b", "c", "a"]);
    expect(rotate([], 3)).toEqual([]);
  });
});
