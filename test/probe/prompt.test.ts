import { describe, expect, it } from "bun:test";
import { buildPrefix, calibrate, closeEnough, filler, makeSalt, saltLine, shortPrefix, tail } from "../../src/probe/prompt.ts";

const fixedRandom = (values: number[]) => {
  let i = 0;
  return () => values[i++ % values.length]!;
};
const NOW = new Date("2026-11-29T19:23:01.456Z");

describe("makeSalt", () => {
  it("is a timestamp plus random hex, so it sorts by time and differs per call", () => {
    expect(makeSalt(fixedRandom([0, 0.5, 0.999, 0.25]), NOW)).toBe("probe-20261129T192301Z-0080ff40");
    const random = Math.random;
    const salts = new Set(Array.from({ length: 200 }, () => makeSalt(random, NOW)));
    expect(salts.size).toBe(200);
  });
});

describe("filler", () => {
  it.each([0, 1, 17, 4_000, 360_000])("is exactly %d characters", (chars) => {
    expect(filler(chars).length).toBe(chars);
  });

  it("is deterministic and prose-like (words and spaces, not one repeated character)", () => {
    expect(filler(5_000)).toBe(filler(5_000));
    expect(filler(100)).toBe(filler(5_000).slice(0, 100));
    const words = filler(5_000).split(/\s+/);
    expect(words.length).toBeGreaterThan(700);
    expect(new Set(words).size).toBeGreaterThan(100);
  });
});

describe("buildPrefix", () => {
  it("starts with the unique salt line, so two runs never share a first token", () => {
    const a = buildPrefix("probe-a", 1_000);
    const b = buildPrefix("probe-b", 1_000);
    expect(a.startsWith(saltLine("probe-a"))).toBe(true);
    expect(a[0]).toBe(b[0]);
    expect(a.slice(0, saltLine("probe-a").length)).not.toBe(b.slice(0, saltLine("probe-b").length));
    // Same filler after the salt: pairs differ only in their salt.
    expect(a.slice(saltLine("probe-a").length)).toBe(b.slice(saltLine("probe-b").length));
  });

  it.each([
    [16_000, 4, 64_000],
    [90_000, 4, 360_000],
    [1_000, 3.5, 3_500],
  ])("%d tokens at %d chars/token is %d characters", (tokens, cpt, chars) => {
    expect(buildPrefix("s", tokens, cpt).length).toBe(chars);
  });

  it("a tiny request is still the whole salt line (never cut inside the salt)", () => {
    expect(buildPrefix("probe-x", 1)).toBe(saltLine("probe-x"));
  });
});

describe("calibrate / closeEnough", () => {
  it.each([
    [40_000, 10_000, 4],
    [45_000, 10_000, 4.5],
    [40_000, 0, 4],
    [100, 1_000, 1],
    [1_000_000, 10, 8],
  ])("%d chars counted as %d tokens → %d chars/token", (chars, tokens, expected) => {
    expect(calibrate(chars, tokens)).toBe(expected);
  });

  it.each([
    [16_000, 16_000, true],
    [16_700, 16_000, true],
    [15_100, 16_000, false],
    [20_000, 16_000, false],
  ])("%d vs target %d → %p", (count, target, ok) => {
    expect(closeEnough(count, target)).toBe(ok);
  });
});

describe("tails and the short prefix", () => {
  it("cold and warm tails differ, so the cache must hold with a varying tail", () => {
    expect(tail("cold s")).not.toBe(tail("warm s"));
    expect(tail("cold s").length).toBeLessThan(80);
  });

  it("the short shared prefix is well under 1 KiB and salted", () => {
    const p = shortPrefix("probe-20261129T192301Z-0080ff40");
    expect(new TextEncoder().encode(p).length).toBeLessThan(512);
    expect(p.startsWith(saltLine("probe-20261129T192301Z-0080ff40"))).toBe(true);
  });
});
