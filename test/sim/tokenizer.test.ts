/** The sim's tokenizer: tokens on a grid of c characters, and what two texts share of them. */
import { describe, expect, it } from "bun:test";
import { commonPrefixTokens } from "../../src/sim/tokenizer.ts";

describe("commonPrefixTokens", () => {
  it.each([
    ["abcdefgh", "abcdefgh", 2],
    ["abcdefgh", "abcdefgX", 1],
    ["abcdef", "abcdef", 2], // identical texts share their partial last token
    ["abcdef", "abcdefgh", 1], // "ef" is not the token "efgh"
    ["abcdefgh", "abcdefghijkl", 2],
    ["", "abcd", 0],
  ])("%p vs %p share %p tokens", (a, b, n) => {
    expect(commonPrefixTokens(a, b, 4)).toBe(n);
    expect(commonPrefixTokens(b, a, 4)).toBe(n);
  });

  it("finds a difference past the native comparison runs", () => {
    const a = "x".repeat(5_000);
    expect(commonPrefixTokens(a, `${"x".repeat(4_321)}y`, 4)).toBe(1_080);
  });
});
