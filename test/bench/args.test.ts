import { describe, expect, it } from "bun:test";
import { DEFAULT_POLICIES, DEFAULTS, parseBenchArgs, WORKLOAD_NAMES } from "../../src/bench/args.ts";
import { agentFirstTokens } from "../../src/bench/workloads.ts";

describe("parseBenchArgs", () => {
  it("defaults: two sims, the four policies plus the oracle, every workload, the seed's sizes", () => {
    const o = parseBenchArgs({});
    expect(o.sim).toBe(2);
    expect(o.policies).toEqual(DEFAULT_POLICIES);
    expect(o.policies).toEqual(["roundrobin", "affinity", "hybrid", "cache-aware"]);
    expect(o.oracle).toBe(true);
    expect(o.workloads).toEqual([...WORKLOAD_NAMES]);
    expect(o.agent.contextTokens).toBe(90_000);
    expect(o.burst.size).toBe(16);
    expect(o.shared.docTokens).toBe(8_000);
    expect(o.capacity.families.every((f) => f >= 50_000 && f <= 80_000)).toBe(true);
  });

  it("the default agent and mixed conversations fit their context", () => {
    expect(agentFirstTokens(DEFAULTS.agent)).toBeGreaterThan(10_000);
    expect(agentFirstTokens(DEFAULTS.mixed.agent)).toBeGreaterThan(1_000);
  });

  it("the default capacity families overflow one 3090 in every pair (the wall) but each fits alone", () => {
    const kv = 122_636;
    const f = [...DEFAULTS.capacity.families].sort((a, b) => a - b);
    expect(f[0]! + f[1]!).toBeGreaterThan(kv);
    expect(f.at(-1)!).toBeLessThan(kv);
  });

  it("parses lists, numbers and files", () => {
    const o = parseBenchArgs({
      sim: "3",
      "time-scale": "0.01",
      policies: "hybrid, roundrobin,hybrid",
      workload: "burst,agent",
      turns: "4",
      "context-tokens": "20_000",
      families: "60000,70000",
      oracle: false,
      json: "out.json",
      report: "r.html",
    });
    expect(o).toMatchObject({ sim: 3, timeScale: 0.01, policies: ["hybrid", "roundrobin"], workloads: ["burst", "agent"], oracle: false, json: "out.json", report: "r.html" });
    expect(o.agent).toMatchObject({ turns: 4, contextTokens: 20_000 });
    expect(o.capacity.families).toEqual([60_000, 70_000]);
  });

  it.each([
    [{ policies: "hybrid,fastest" }, /--policies "hybrid,fastest": unknown "fastest"; choose from roundrobin/],
    [{ workload: "agent,chat" }, /--workload "agent,chat": unknown "chat"/],
    [{ sim: "0" }, /--sim "0": must be an integer >= 1/],
    [{ "time-scale": "-1" }, /--time-scale "-1": must be a number > 0/],
    [{ turns: "1" }, /--turns "1": must be an integer >= 2/],
    [{ families: "80000,abc" }, /--families "80000,abc"/],
  ])("%j is a usage error naming the flag", (raw, message) => {
    expect(() => parseBenchArgs(raw as never)).toThrow(message);
  });

  it("a conversation that cannot fit its context is a usage error before anything runs", () => {
    expect(() => parseBenchArgs({ "context-tokens": "3000" })).toThrow(/agent: 16 turns of 2000\+64 tokens after a 2000-token system prompt do not fit in 3000 tokens/);
    expect(() => parseBenchArgs({ "context-tokens": "3000", workload: "burst" })).not.toThrow();
    expect(() => parseBenchArgs({ "context-tokens": "3000", turns: "3", "turn-tokens": "200", "system-tokens": "100", workload: "agent" })).not.toThrow();
  });

  it("reports every bad flag at once", () => {
    expect(() => parseBenchArgs({ sim: "x", rate: "0" })).toThrow(/--sim "x".*; --rate "0"/);
  });
});
