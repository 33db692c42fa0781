import { describe, expect, it } from "bun:test";
import { microsPerRequest, parseCpuTotals, parseProcStat, treeTicks } from "../../perf/lib/cpu.ts";

// A real line's shape: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
const stat = (pid: number, comm: string, ppid: number, utime: number, stime: number) =>
  `${pid} (${comm}) S ${ppid} ${pid} ${pid} 0 -1 4194560 1000 0 0 0 ${utime} ${stime} 0 0 20 0 3 0 100 6000000 15000 18446744073709551615`;

describe("parseProcStat", () => {
  it("reads pid, ppid and utime + stime", () => {
    expect(parseProcStat(stat(4242, "bun", 1, 150, 25))).toEqual({ pid: 4242, ppid: 1, ticks: 175 });
  });

  it("survives a command name with spaces and parentheses", () => {
    expect(parseProcStat(stat(7, "nginx: worker (1) x", 6, 10, 5))).toEqual({ pid: 7, ppid: 6, ticks: 15 });
  });

  it("rejects what is not a stat line", () => {
    expect(() => parseProcStat("garbage")).toThrow(/not a \/proc/);
  });
});

describe("treeTicks", () => {
  const stats = [
    { pid: 1, ppid: 0, ticks: 1000 },
    { pid: 10, ppid: 1, ticks: 5 }, // nginx master
    { pid: 11, ppid: 10, ticks: 300 }, // its worker
    { pid: 12, ppid: 11, ticks: 7 }, // a grandchild
    { pid: 20, ppid: 1, ticks: 50 }, // someone else
  ];

  it("sums a process and everything below it, nothing beside it", () => {
    expect(treeTicks(10, stats)).toBe(312);
    expect(treeTicks(20, stats)).toBe(50);
  });

  it("is 0 for a process that is gone", () => {
    expect(treeTicks(99, stats)).toBe(0);
  });

  it("terminates on a ppid cycle (pid reuse between reads)", () => {
    expect(treeTicks(30, [{ pid: 30, ppid: 31, ticks: 1 }, { pid: 31, ppid: 30, ticks: 2 }])).toBe(3);
  });
});

describe("microsPerRequest", () => {
  it("turns ticks at CLK_TCK into µs per request", () => {
    // 150 ticks at 100 Hz = 1.5 s over 10,000 requests = 150 µs each
    expect(microsPerRequest(150, 10_000, 100)).toBeCloseTo(150, 9);
  });

  it("is NaN without requests, never Infinity", () => {
    expect(microsPerRequest(150, 0, 100)).toBeNaN();
  });
});

describe("parseCpuTotals", () => {
  it("counts idle and iowait as idle, everything else as busy", () => {
    const text = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\nintr 1 2 3\n";
    expect(parseCpuTotals(text)).toEqual({ busy: 170, total: 990 });
  });

  it("says so when the cpu line is missing", () => {
    expect(() => parseCpuTotals("intr 1\n")).toThrow(/no cpu line/);
  });
});
