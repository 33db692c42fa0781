import { describe, expect, it } from "bun:test";
import { judge, limitText, type Target } from "../../perf/lib/targets.ts";

const target = (t: Partial<Target>): Target => ({ text: "t", measured: 1, limit: 1, op: "<=", unit: "×", digits: 2, ...t });

describe("judge", () => {
  it.each([
    [target({ op: ">=", limit: 0.8, measured: 0.85 }), "met"],
    [target({ op: ">=", limit: 0.8, measured: 0.8 }), "met"],
    [target({ op: "<=", limit: 0.5, unit: " ms", measured: 0.2 }), "met"],
  ])("%# met", (t, status) => {
    expect(judge(t)).toEqual({ status: status as "met", text: "met" });
  });

  it("says by how much a lower bound was missed, in the unit and as a share of the limit", () => {
    expect(judge(target({ op: ">=", limit: 0.8, measured: 0.6 }))).toEqual({ status: "missed", text: "missed by 0.20× (25 % of the limit)" });
  });

  it("says by how much an upper bound was missed", () => {
    expect(judge(target({ op: "<=", limit: 150, unit: " MB", digits: 0, measured: 212 }))).toEqual({ status: "missed", text: "missed by 62 MB (41 % of the limit)" });
  });

  it("large counts get thousands separators", () => {
    expect(judge(target({ op: ">=", limit: 300_000, unit: "", digits: 0, measured: 164_210 })).text).toBe("missed by 135,790 (45 % of the limit)");
  });

  it("a figure that was not measured never passes", () => {
    expect(judge(target({ measured: NaN, missing: "haproxy not installed" }))).toEqual({ status: "not measured", text: "not measured (haproxy not installed)" });
  });
});

describe("limitText", () => {
  it("writes the bound the way the issue does", () => {
    expect(limitText(target({ op: ">=", limit: 0.8 }))).toBe("≥ 0.80×");
    expect(limitText(target({ op: "<=", limit: 0.5, unit: " ms" }))).toBe("≤ 0.50 ms");
  });
});
