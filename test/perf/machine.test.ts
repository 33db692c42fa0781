import { describe, expect, it } from "bun:test";
import { describeMachine, parseCpuModel, parseLoadavg } from "../../perf/lib/machine.ts";

describe("machine", () => {
  it("reads the CPU model from /proc/cpuinfo", () => {
    expect(parseCpuModel("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\ncpu MHz\t\t: 2450.000\n")).toBe("AMD EPYC 7B13");
    expect(parseCpuModel("processor : 0\n")).toBe("unknown CPU");
  });

  it("reads the three load averages", () => {
    expect(parseLoadavg("4.16 6.78 6.14 1/161 18745\n")).toEqual([4.16, 6.78, 6.14]);
  });

  it("describes a machine in one line", () => {
    expect(describeMachine({ cpu: "AMD EPYC", cores: 2, load: [4.16, 6.78, 6.14] })).toBe("AMD EPYC, 2 cores, load 4.16 / 6.78 / 6.14 (1 / 5 / 15 min)");
  });
});
