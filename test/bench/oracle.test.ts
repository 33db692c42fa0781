import { describe, expect, it } from "bun:test";
import { oracleChoice, type OracleCandidate } from "../../src/bench/targets.ts";

const c = (name: string, cachedTokens: number, busy = 0, promptTokens = 10_000): OracleCandidate => ({ name, promptTokens, cachedTokens, busy });

describe("oracleChoice", () => {
  it.each([
    ["an idle fleet: the replica holding the most of the prompt", [c("gpu0", 0), c("gpu1", 9_000)], "gpu1"],
    ["a long cached prefix outweighs a short queue", [c("gpu0", 9_600, 2), c("gpu1", 0, 0)], "gpu0"],
    ["a block of template and salt does not outweigh a queue", [c("gpu0", 16, 1), c("gpu1", 0, 0)], "gpu1"],
    ["equal caches: the less busy", [c("gpu0", 500, 3), c("gpu1", 500, 1)], "gpu1"],
  ] as const)("%s", (_what, candidates, expected) => {
    expect(oracleChoice(candidates, 0.05, 0)).toBe(expected);
  });

  it("complete ties rotate, so an idle fleet shares a cold burst", () => {
    const tied = [c("gpu0", 0), c("gpu1", 0)];
    expect([0, 1, 2, 3].map((k) => oracleChoice(tied, 0.05, k))).toEqual(["gpu0", "gpu1", "gpu0", "gpu1"]);
  });
});
