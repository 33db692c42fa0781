import { expect, it } from "bun:test";
import { int, pct, table } from "../../src/ops/table.ts";

it("pads columns and right-aligns the numeric ones", () => {
  expect(table(["pair", "cold"], [["1", "22.3 s"], ["median", "1.4 s"]], { right: [1] }).split("\n")).toEqual(["pair      cold", "1       22.3 s", "median   1.4 s"]);
});

it("formats counts and shares", () => {
  expect([int(122636.4), pct(0.496)]).toEqual(["122,636", "50%"]);
});
