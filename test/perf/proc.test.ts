import { describe, expect, it } from "bun:test";
import { cpuLayout } from "../../perf/lib/proc.ts";

describe("cpuLayout", () => {
  it("gives the proxy under test the last core and the load side the rest", () => {
    expect(cpuLayout(2, true)).toEqual({ proxy: "1", load: "0" });
    expect(cpuLayout(8, true)).toEqual({ proxy: "7", load: "0-6" });
  });

  it("does not pin when asked not to, or on one core", () => {
    expect(cpuLayout(8, false)).toBeUndefined();
    expect(cpuLayout(1, true)).toBeUndefined();
  });
});
