import { describe, expect, it } from "bun:test";
import { markdownTable, replaceBetween } from "../../perf/lib/markdown.ts";

describe("markdownTable", () => {
  it("left-aligns the first column and right-aligns numbers by default", () => {
    expect(markdownTable(["arm", "req/s"], [["direct", "13,415"], ["llmroute", 5169]])).toBe(
      ["| arm | req/s |", "| --- | ---: |", "| direct | 13,415 |", "| llmroute | 5169 |"].join("\n"),
    );
  });

  it("escapes pipes and flattens line breaks inside cells", () => {
    expect(markdownTable(["a"], [["x | y\nz"]], ["left"])).toBe("| a |\n| --- |\n| x \\| y z |");
  });
});

describe("replaceBetween", () => {
  const text = "intro\n<!-- perf:begin -->\nold table\n<!-- perf:end -->\nafter\n";

  it("replaces what lies between the markers and keeps them", () => {
    expect(replaceBetween(text, "<!-- perf:begin -->", "<!-- perf:end -->", "new table\n")).toBe(
      "intro\n<!-- perf:begin -->\nnew table\n<!-- perf:end -->\nafter\n",
    );
  });

  it("refuses when a marker is missing rather than writing somewhere else", () => {
    expect(() => replaceBetween("no markers", "<!-- perf:begin -->", "<!-- perf:end -->", "x")).toThrow(/markers/);
  });
});
