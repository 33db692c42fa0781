import { describe, expect, it } from "bun:test";
import { median, p90, quantile, ratio, shares, summarize } from "../../src/bench/stats.ts";

describe("quantile (linear interpolation between closest ranks)", () => {
  it.each([
    [[5], 0.5, 5],
    [[1, 2, 3], 0.5, 2],
    [[1, 2, 3, 4], 0.5, 2.5],
    [[4, 1, 3, 2], 0.5, 2.5],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9, 9.1],
    [[10, 20], 0.9, 19],
    [[1, 2, 3], 0, 1],
    [[1, 2, 3], 1, 3],
  ])("%j at q=%d is %d", (values, q, expected) => {
    expect(quantile(values, q)).toBeCloseTo(expected, 10);
  });

  it("is NaN for an empty sample and rejects q outside [0, 1]", () => {
    expect(quantile([], 0.5)).toBeNaN();
    expect(() => quantile([1], 1.5)).toThrow(RangeError);
    expect(() => quantile([1], Number.NaN)).toThrow(RangeError);
  });

  it("does not reorder its input", () => {
    const values = [3, 1, 2];
    median(values);
    p90(values);
    expect(values).toEqual([3, 1, 2]);
  });
});

describe("summarize", () => {
  it("carries the sample size with every figure", () => {
    const s = summarize([1, 2, 3, 4, 10]);
    expect(s).toMatchObject({ n: 5, median: 3, mean: 4, min: 1, max: 10 });
    expect(s.p90).toBeCloseTo(7.6, 10);
  });

  it("an empty sample has n = 0 and no figures", () => {
    const s = summarize([]);
    expect(s.n).toBe(0);
    expect(s.median).toBeNaN();
    expect(s.max).toBeNaN();
  });
});

describe("ratio and shares", () => {
  it.each([
    [2676, 1096, 2676 / 1096],
    [1, 0, Number.NaN],
    [undefined, 1, Number.NaN],
    [Number.NaN, 1, Number.NaN],
  ])("ratio(%p, %p)", (a, b, expected) => {
    const r = ratio(a, b);
    if (Number.isNaN(expected)) expect(r).toBeNaN();
    else expect(r).toBeCloseTo(expected, 10);
  });

  it("shares count every key, keeping replicas that got nothing at 0", () => {
    expect(shares(["gpu0", "gpu0", "gpu1", "gpu0"], ["gpu0", "gpu1", "gpu2"])).toEqual({ gpu0: 0.75, gpu1: 0.25, gpu2: 0 });
    expect(shares([], ["gpu0"])).toEqual({ gpu0: 0 });
  });
});
